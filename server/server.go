package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultAddr is where the server listens unless DFLASH_HOST or Config.Addr says otherwise.
const DefaultAddr = "127.0.0.1:11434"

// Config controls a Server. Zero fields take the defaults documented on each.
type Config struct {
	Addr string // listen address; default AddrFromEnv()
	// Parallel is how many generations each model runs at once, decoded together in one batch
	// (ollama's OLLAMA_NUM_PARALLEL), unless the model's ModelInfo.Parallel says otherwise;
	// requests beyond it wait in the model's queue. Default 1.
	Parallel        int
	MaxQueue        int           // requests waiting for a slot; default 64, < 0 unlimited
	QueueTimeout    time.Duration // longest wait for a slot; default 2m, < 0 unlimited
	KeepAlive       time.Duration // idle time before a model unloads; default 5m, < 0 forever
	MaxLoaded       int           // idle models kept loaded at once; default 1, < 0 unlimited
	MaxBodyBytes    int64         // request body limit; default 8 MiB
	RetryAfter      time.Duration // Retry-After sent with 503 busy answers; default 5s
	ShutdownTimeout time.Duration // ListenAndServe's grace on ctx cancel; default 30s
	Version         string        // reported by /api/version; default "dev"

	// WriteTimeout bounds each single write of a response: a client that does not take its
	// bytes within it is cut and its generation ends. Default 30s, < 0 none.
	WriteTimeout time.Duration
	// ReadTimeout bounds receiving a request body. Default 60s, < 0 none.
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 2m, < 0 none.
	IdleTimeout time.Duration
	// APIKey, when set, is the bearer token every endpoint but /health requires.
	APIKey string
	// Origins are browser origins allowed besides the loopback ones (see OriginsFromEnv);
	// "*" matches any run of characters.
	Origins []string
	// Coupling says which requests sample by the coupled race (sample.Options.Coupled); the
	// zero value couples the requests that give a seed.
	Coupling Coupling
}

// Coupling is the policy choosing which requests sample coupled. Coupled output is the same with
// and without a draft at any depth, so a seeded request reproduces whatever the server's draft
// and depth controller do, and keeps the adaptive depth; rejection sampling accepts somewhat
// more (BENCHMARKS.md, coupled sampling) but reproduces only at a fixed depth.
type Coupling uint8

const (
	// CoupleSeeded couples requests that give a seed and no others (the default).
	CoupleSeeded Coupling = iota
	// CoupleAlways couples every sampled request.
	CoupleAlways
	// CoupleNever samples every request by rejection (a seeded one at a fixed depth).
	CoupleNever
)

// ParseCoupling reads a --coupled value: seeded, always or never.
func ParseCoupling(v string) (Coupling, error) {
	switch v {
	case "seeded", "":
		return CoupleSeeded, nil
	case "always":
		return CoupleAlways, nil
	case "never":
		return CoupleNever, nil
	}
	return 0, fmt.Errorf("coupling %q: want seeded, always or never", v)
}

// applies reports whether a request that gave a seed (or not) samples coupled.
func (c Coupling) applies(seeded bool) bool {
	return c == CoupleAlways || c == CoupleSeeded && seeded
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = AddrFromEnv()
	}
	if c.Parallel <= 0 {
		c.Parallel = 1
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 64
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 2 * time.Minute
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 5 * time.Minute
	}
	if c.MaxLoaded == 0 {
		c.MaxLoaded = 1
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 8 << 20
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = time.Minute
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	return c
}

// AddrFromEnv returns the listen address from DFLASH_HOST ("host", "host:port", ":port" or
// "http://host:port"), or DefaultAddr.
func AddrFromEnv() string {
	return ParseHost(os.Getenv("DFLASH_HOST"))
}

// ParseHost normalises a DFLASH_HOST-style value to host:port, filling 127.0.0.1 and 11434.
func ParseHost(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultAddr
	}
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	s = strings.TrimRight(s, "/")
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		host, port = s, ""
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "11434"
	}
	return net.JoinHostPort(host, port)
}

// Server serves the ollama and OpenAI APIs over one Backend.
type Server struct {
	cfg      Config
	b        Backend
	log      *slog.Logger
	met      *metrics
	sched    *schedulers
	mgr      *manager
	handler  http.Handler
	origins  []string    // allowed browser origins: defaultOrigins and Config.Origins
	loopback atomic.Bool // listening on loopback only: Host headers are checked

	base       context.Context // parent of every generation; cancelled when shutdown runs out of time
	cancelBase context.CancelFunc

	mu       sync.Mutex
	closing  bool
	inflight sync.WaitGroup // requests past the closing check
	httpSrv  *http.Server
}

// New builds a Server. It does not listen: use Handler with your own listener, or
// ListenAndServe.
func New(cfg Config, b Backend, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, b: b, log: logger, met: newMetrics()}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	maxQueue := cfg.MaxQueue
	if maxQueue < 0 {
		maxQueue = 0
	}
	s.sched = newSchedulers(cfg.Parallel, maxQueue, func(n int) { s.met.queueDepth.Set(float64(n)) })
	maxLoaded := cfg.MaxLoaded
	if maxLoaded < 0 {
		maxLoaded = 0
	}
	s.mgr = newManager(s.base, b, logger, cfg.KeepAlive, maxLoaded, func(name string, d time.Duration, err error) {
		if err != nil {
			s.met.loadFailures.WithLabelValues(name).Inc()
			return
		}
		s.met.loadSeconds.WithLabelValues(name).Observe(d.Seconds())
	})
	s.mgr.onModel = func(name string, m Model) {
		if o, ok := m.(StepObserver); ok {
			o.ObserveSteps(s.met.stepObserver(name))
		}
	}
	s.origins = append(append([]string(nil), defaultOrigins...), cfg.Origins...)
	s.loopback.Store(isLoopback(cfg.Addr))
	s.handler = s.routes()
	return s
}

// Config returns the effective configuration (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// QueueDepth is the number of requests waiting for a generation slot.
func (s *Server) QueueDepth() int { return s.sched.depth() }

// Handler returns the HTTP handler for every endpoint.
func (s *Server) Handler() http.Handler { return s.handler }

// ListenAndServe listens on Config.Addr and serves until ctx is cancelled, then shuts down
// gracefully within Config.ShutdownTimeout.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is cancelled (then shuts down gracefully, returning nil) or the
// listener fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// The body's read deadline is set per request (see deadlineBody) and each write's by
	// statusWriter: http.Server's ReadTimeout and WriteTimeout bound whole requests and
	// responses, which would cut every long generation.
	headerTimeout := 30 * time.Second
	if t := s.cfg.ReadTimeout; t > 0 && t < headerTimeout {
		headerTimeout = t
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       max(s.cfg.IdleTimeout, 0),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	addr := ln.Addr().String()
	s.loopback.Store(isLoopback(addr))
	s.mu.Lock()
	s.httpSrv = srv
	s.mu.Unlock()
	s.log.Info("listening", "addr", addr)
	if msg := exposureWarning(addr, s.cfg.APIKey); msg != "" {
		s.log.Warn(msg)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		err := s.Shutdown(sctx)
		<-errc
		return err
	}
}

// Shutdown stops accepting requests, answers every queued one at once with ErrShuttingDown
// and lets the running ones finish until ctx ends. Past that, it cancels the remaining
// generations, which stop at their next token and end their answers with an error in their
// API's own format (a streamed one with a last error line or event); only once they did (or
// after a short bound) are the connections closed. Then it unloads every model. It returns nil
// for a clean drain and ctx.Err() when it had to cancel.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	srv := s.httpSrv
	s.mu.Unlock()
	attrs := []any{"running", s.sched.running(), "queued", s.sched.depth()}
	if d, ok := ctx.Deadline(); ok {
		attrs = append(attrs, "grace", time.Until(d).Round(time.Millisecond))
	}
	s.log.Info("shutting down", attrs...)
	s.sched.close()

	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	srvDone := make(chan error, 1)
	if srv != nil {
		go func() { srvDone <- srv.Shutdown(ctx) }()
	} else {
		srvDone <- nil
	}

	var err error
	select {
	case <-done:
		// Every handler returned; net/http still waits for their connections to go idle.
		if err = <-srvDone; err != nil {
			srv.Close()
		}
	case <-ctx.Done():
		err = ctx.Err()
		s.log.Warn("shutdown: grace period over, cancelling running generations", "running", s.sched.running())
		s.cancelBase()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.log.Warn("shutdown: generations still running after cancel")
		}
		if srv != nil {
			srv.Close()
			<-srvDone
		}
	}
	s.cancelBase()
	s.mgr.close()
	if err == nil {
		s.log.Info("shutdown complete")
	}
	return err
}

// enter registers an in-flight request unless the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, h) }
	handle("GET /{$}", s.handleRoot)
	handle("HEAD /{$}", s.handleRoot)
	handle("GET /health", s.handleHealth)
	handle("GET /ready", s.handleReady)
	handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}).ServeHTTP)

	handle("POST /api/generate", s.handleOllamaGenerate)
	handle("POST /api/chat", s.handleOllamaChat)
	handle("GET /api/tags", s.handleTags)
	handle("POST /api/show", s.handleShow)
	handle("GET /api/ps", s.handlePS)
	handle("POST /api/pull", s.handlePull)
	handle("POST /api/embed", s.handleOllamaEmbed)
	handle("POST /api/embeddings", s.handleOllamaEmbeddings)
	handle("GET /api/version", s.handleVersion)
	handle("HEAD /api/version", s.handleVersion)

	handle("POST /v1/chat/completions", s.handleOpenAIChat)
	handle("POST /v1/completions", s.handleOpenAICompletion)
	handle("POST /v1/embeddings", s.handleOpenAIEmbeddings)
	handle("GET /v1/models", s.handleOpenAIModels)
	handle("GET /v1/models/{model...}", s.handleOpenAIModel)

	handle("/", s.handleNotFound)
	return s.middleware(mux)
}

// reqInfo collects what the request log line and metrics report; handlers fill it.
type reqInfo struct {
	model        string
	promptTokens int
	evalTokens   int
	err          string
	cut          bool // a write missed its deadline: the server ended the response
}

type ctxKey struct{}

func info(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &reqInfo{}
		sw := newStatusWriter(w, ri, s.cfg.WriteTimeout)
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, ri))
		if r.ContentLength != 0 && s.cfg.ReadTimeout > 0 {
			// Set from the request's start, so a body sent byte by byte cannot hold the
			// connection (or, once parsed, a queue place) longer than ReadTimeout.
			if sw.rc.SetReadDeadline(start.Add(s.cfg.ReadTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: sw.rc, timeout: s.cfg.ReadTimeout}
			}
		}
		r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		defer func() {
			// A handler panic is a bug, but one request must not take the server down.
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
				if !sw.wrote {
					writeJSON(sw, http.StatusInternalServerError, map[string]string{"error": "internal error"})
				}
				sw.status = http.StatusInternalServerError
			}
			endpoint := r.Pattern
			if i := strings.IndexByte(endpoint, ' '); i >= 0 {
				endpoint = endpoint[i+1:]
			}
			if endpoint == "" || endpoint == "/" {
				endpoint = "other"
			}
			d := time.Since(start)
			s.met.requests.WithLabelValues(endpoint, strconv.Itoa(sw.status)).Inc()
			s.met.duration.WithLabelValues(endpoint).Observe(d.Seconds())
			attrs := []any{"method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", d}
			if ri.model != "" {
				attrs = append(attrs, "model", ri.model, "prompt_tokens", ri.promptTokens, "eval_tokens", ri.evalTokens)
			}
			if ri.cut && ri.err == "" {
				ri.err = cutMessage(s.cfg.WriteTimeout)
			}
			if ri.err != "" {
				attrs = append(attrs, "err", ri.err)
			}
			s.log.Info("request", attrs...)
		}()
		if !s.guard(sw, r) {
			return
		}
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
			next.ServeHTTP(sw, r)
			return
		}
		if !s.enter() {
			sw.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter.Seconds())))
			ri.err = ErrShuttingDown.Error()
			writeJSON(sw, http.StatusServiceUnavailable, map[string]string{"error": ErrShuttingDown.Error()})
			return
		}
		defer s.inflight.Done()
		next.ServeHTTP(sw, r)
	})
}

var knownPaths = map[string]string{
	"/api/generate": "POST", "/api/chat": "POST", "/api/tags": "GET", "/api/show": "POST",
	"/api/ps": "GET", "/api/pull": "POST", "/api/version": "GET, HEAD", "/v1/chat/completions": "POST",
	"/v1/completions": "POST", "/v1/models": "GET", "/health": "GET", "/ready": "GET",
	"/metrics": "GET", "/": "GET, HEAD",
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	openai := strings.HasPrefix(r.URL.Path, "/v1/")
	status, msg := http.StatusNotFound, fmt.Sprintf("%s %s: no such endpoint", r.Method, r.URL.Path)
	if allow, ok := knownPaths[r.URL.Path]; ok {
		w.Header().Set("Allow", allow)
		status, msg = http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, allow)
	}
	info(r).err = msg
	if openai {
		writeOpenAIError(w, &RequestError{Status: status, Msg: msg})
		return
	}
	writeJSON(w, status, map[string]string{"error": msg})
}

func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		fmt.Fprint(w, "dflash is running")
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady is ready while at least one configured model is available (one listed as
// unavailable does not count, and does not make the others unready).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	n := 0
	for _, mi := range s.b.Models() {
		if mi.Error == "" {
			n++
		}
	}
	if n == 0 {
		msg := "no models configured"
		if len(s.b.Models()) > 0 {
			msg = "no model is available"
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "error": msg})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "models": n})
}
