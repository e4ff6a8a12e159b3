package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
	"github.com/dflash/dflash/server/fake"
)

// backendCase is one backend the HTTP tests run against. The fake is always here; the real
// backend's tests add a small real model (skipping when its weights are absent) by appending to
// backendCases.
type backendCase struct {
	name string
	// new builds a fresh backend; ctxLen and delay are hints a real backend may ignore.
	new func(t *testing.T) server.Backend
	// model is a configured model name; draftModel one that speculates ("" if none).
	model, draftModel string
	// text is the exact unconstrained answer, or "" when it is not known in advance (real
	// models): tests then check only that some text came.
	text string
	// words is the exact token texts in order, or nil when unknown.
	words []string
	// runsLong says the model may fill its context before choosing to stop (a sampled real
	// model): an unconstrained answer may then end with "length" instead of "stop".
	runsLong bool
}

// ended reports whether reason is how an unconstrained answer of this backend may end.
func (bc backendCase) ended(reason any) bool {
	return reason == "stop" || (bc.runsLong && reason == "length")
}

var backendCases = []backendCase{{
	name:       "fake",
	new:        func(t *testing.T) server.Backend { return &fake.Backend{} },
	model:      "fake:latest",
	draftModel: "fake-draft:latest",
	text:       fake.Text,
	words:      fake.Words,
}, {
	// stories260K through the real engine, plain and with a random DFlash draft (its proposals
	// are mostly rejected, so the answers are the target's own); skipped when the data is absent.
	name: "stories260K",
	new: func(t *testing.T) server.Backend {
		bin := shareddata.Path(t, "stories260K/stories260K.bin")
		e, err := engine.Open(engine.Options{Model: bin})
		if err != nil {
			t.Fatal(err)
		}
		draft := t.TempDir()
		if err := dflash.WriteRandom(draft, dflash.ConfigFor(e.Target.Config(), 1, 8), 7, kernel.F32); err != nil {
			t.Fatal(err)
		}
		b, err := backend.New(backend.Options{Models: []backend.Spec{
			{Name: "stories260K", Path: bin}, {Name: "stories260K-dflash", Path: bin, Draft: draft}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	},
	model:      "stories260K:latest",
	draftModel: "stories260K-dflash:latest",
	runsLong:   true,
}}

// eachBackend runs f once per backend case.
func eachBackend(t *testing.T, f func(t *testing.T, bc backendCase, url string)) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			_, url := startServer(t, server.Config{}, bc.new(t))
			f(t, bc, url)
		})
	}
}

// startServer serves b on a loopback listener until the test ends.
func startServer(t *testing.T, cfg server.Config, b server.Backend) (*server.Server, string) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(&testWriter{t}, nil))
	}
	s := server.New(cfg, b, logger)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	return s, ts.URL
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func post(t *testing.T, url, body string) response { return do(t, "POST", url, body) }

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, b, err)
	}
	return v
}

func decodeInto(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, b, err)
	}
}

// ndjsonLines splits an NDJSON body into objects.
func ndjsonLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, decode[map[string]any](t, sc.Bytes()))
	}
	return out
}

// sseEvents splits an SSE body into data payloads (including the final "[DONE]").
func sseEvents(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(string(b), "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasPrefix(ev, "data: ") {
			t.Fatalf("SSE event without data prefix: %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}
