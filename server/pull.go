package server

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Puller is a Backend that can fetch a model by name (ollama's /api/pull). After a pull that
// returns nil the model is listed by Models.
type Puller interface {
	// Pull downloads name, calling progress as it goes (from several goroutines at once), and
	// makes it servable. It returns the name the model is now listed under.
	Pull(ctx context.Context, name string, progress func(PullProgress)) (string, error)
}

// Finder is a Backend that can serve models it was not configured with: a request naming a
// model in its stores (a pulled Hugging Face id, an ollama name) finds it there. Find is called
// only for a name Models does not list; a model it finds is listed from then on.
type Finder interface {
	Find(name string) (ModelInfo, bool)
}

// PullProgress is one of ollama's /api/pull progress objects.
type PullProgress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
}

// pullTick bounds how often one file's progress is streamed: the downloader reports every
// buffer, a client needs a few updates a second.
const pullTick = 100 * time.Millisecond

func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(r)
	var req struct {
		Model    string `json:"model"`
		Name     string `json:"name"` // older clients
		Insecure bool   `json:"insecure"`
		Stream   *bool  `json:"stream"`
	}
	if rerr == nil {
		rerr = decodeJSON(body, &req)
	}
	if rerr == nil && req.Model == "" && req.Name == "" {
		rerr = badField("model", "model is required")
	}
	p, ok := s.b.(Puller)
	if rerr == nil && !ok {
		rerr = &RequestError{Status: http.StatusNotImplemented, Msg: "this server cannot pull models"}
	}
	if rerr != nil {
		info(r).err = rerr.Msg
		writeOllamaError(w, rerr)
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	info(r).model = name
	stream := req.Stream == nil || *req.Stream
	out := &ndjson{w: w}
	var (
		mu   sync.Mutex
		last = map[string]time.Time{}
		werr error
	)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	send := func(pp PullProgress, force bool) {
		mu.Lock()
		defer mu.Unlock()
		if !stream || werr != nil {
			return
		}
		if !force && time.Since(last[pp.Digest]) < pullTick {
			return
		}
		last[pp.Digest] = time.Now()
		if werr = out.line(pp); werr != nil {
			cancel() // the client left: stop downloading for it
		}
	}
	send(PullProgress{Status: "pulling manifest"}, true)
	listed, err := p.Pull(ctx, name, func(pp PullProgress) { send(pp, pp.Completed == pp.Total) })
	if err != nil {
		info(r).err = err.Error()
		mu.Lock()
		defer mu.Unlock()
		if !out.started {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": redactPaths(err.Error())})
			return
		}
		_ = out.line(map[string]string{"error": redactPaths(err.Error())})
		return
	}
	send(PullProgress{Status: "verifying sha256 digest"}, true)
	send(PullProgress{Status: "writing manifest"}, true)
	mu.Lock()
	defer mu.Unlock()
	if werr == nil {
		_ = out.line(map[string]string{"status": "success", "model": listed})
	}
}

// Scanner is a Finder that can look through its stores for every model they hold (dflash
// list), so /api/tags and /v1/models list them, not only the configured and requested ones.
// ScanStores must be cheap to call on every listing: it reads no weights and may answer from a
// recent scan.
type Scanner interface {
	ScanStores()
}

// scanStores lets a Scanner backend add what its stores hold before a listing.
func (s *Server) scanStores() {
	if sc, ok := s.b.(Scanner); ok {
		sc.ScanStores()
	}
}
