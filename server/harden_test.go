package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// logBuffer collects a server's log while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// smallBuffers makes every accepted connection's send buffer small, so a client that stops
// reading blocks the server's writes after a few kilobytes rather than megabytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// exposedAddr reports a wildcard address while listening on 127.0.0.1 only, so the server acts
// as if bound to every interface without the test leaving loopback.
type exposedAddr struct{ net.Listener }

func (l exposedAddr) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4zero, Port: l.Listener.Addr().(*net.TCPAddr).Port}
}

// serveReal runs s.Serve (the real http.Server, with its timeouts and shutdown) on 127.0.0.1.
// stop cancels Serve's context and returns what Serve returned.
func serveReal(t *testing.T, cfg server.Config, b server.Backend, wrap func(net.Listener) net.Listener) (
	s *server.Server, url string, logs *logBuffer, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url = "http://" + ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	logs = &logBuffer{}
	s = server.New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-errc:
			case <-time.After(20 * time.Second):
				serveErr = errors.New("Serve did not return within 20s of its context ending")
			}
		})
		return serveErr
	}
	t.Cleanup(func() { _ = stop() })
	return s, url, logs, stop
}

// rawRequest is an HTTP/1.1 request as bytes, for clients that misbehave below net/http.
func rawRequest(method, path, body string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, len(body), body)
}

func dialRaw(t *testing.T, url string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func boundedClient() *http.Client { return &http.Client{Timeout: 20 * time.Second} }

// TestStalledClientIsCut: a client that asks for an endless stream and never reads fills its
// socket buffers, and the generation then blocks on its next write. With one generation slot,
// a plain request queued behind it can only run once the server cuts the stalled client at the
// write timeout and frees the slot; the log must say the server cut it (the client never
// closed anything).
func TestStalledClientIsCut(t *testing.T) {
	b := &fake.Backend{Length: 1 << 22, ContextLength: 1 << 23}
	cfg := server.Config{Parallel: 1, WriteTimeout: 200 * time.Millisecond, QueueTimeout: 10 * time.Second}
	_, url, logs, _ := serveReal(t, cfg, b, func(ln net.Listener) net.Listener { return smallBuffers{ln} })

	stalled := dialRaw(t, url)
	_ = stalled.SetReadBuffer(4096)
	if _, err := io.WriteString(stalled, rawRequest("POST", "/api/generate", `{"model":"fake","prompt":"a"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled stream to hold the slot", func() bool {
		return strings.Contains(string(do(t, "GET", url+"/metrics", "").body), "dflash_running_generations 1")
	})

	resp, err := boundedClient().Post(url+"/api/generate", "application/json",
		strings.NewReader(`{"model":"fake","prompt":"b","stream":false,"options":{"num_predict":3}}`))
	if err != nil {
		t.Fatalf("request behind the stalled stream: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"response":"The quick brown"`) {
		t.Fatalf("request behind the stalled stream: %d %s, want 200 with three words", resp.StatusCode, body)
	}
	waitFor(t, "the cut to be logged", func() bool { return strings.Contains(logs.String(), "client cut by the server") })
	if strings.Contains(logs.String(), "client closed request") {
		t.Errorf("the cut stream was logged as closed by its client:\n%s", logs)
	}
}

// TestSlowBodyAndIdleConnection: a body sent too slowly is answered (400) at the read
// timeout instead of holding the connection, and an idle keep-alive connection is closed at the
// idle timeout.
func TestSlowBodyAndIdleConnection(t *testing.T) {
	cfg := server.Config{ReadTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}
	_, url, _, _ := serveReal(t, cfg, &fake.Backend{}, nil)

	slow := dialRaw(t, url)
	req := rawRequest("POST", "/api/generate", `{"model":"fake","prompt":"a slow body that never arrives in full"}`)
	if _, err := io.WriteString(slow, req[:len(req)-20]); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("slow body: no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "read timeout") {
		t.Errorf("slow body: %d %s, want 400 naming the read timeout", resp.StatusCode, body)
	}

	idle := dialRaw(t, url)
	if _, err := io.WriteString(idle, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /health on the idle connection: %v %v", resp, err)
	}
	_, _ = io.ReadAll(resp.Body)
	// Nothing more is sent: the server must close the connection, which reads as EOF (a
	// timeout here means it was still open after 10 s).
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle keep-alive connection: read gave %v, want EOF (closed by the server)", err)
	}
}

func doWith(t *testing.T, method, url, body string, header map[string]string, host string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := boundedClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestCrossOriginRefused: a page on another site can send a "simple" POST (text/plain, so the
// browser sends no preflight) to the local server; it must be refused before it generates or
// unloads anything. Pages on loopback origins, and origins added by configuration, may call it
// and get their preflights answered.
func TestCrossOriginRefused(t *testing.T) {
	b := &fake.Backend{}
	_, url := startServer(t, server.Config{Origins: []string{"https://*.app.example"}}, b)
	evil := map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain"}
	for _, body := range []string{
		`{"model":"fake","prompt":"hi","stream":false}`, // generate
		`{"model":"fake","keep_alive":0}`,               // unload
	} {
		r := doWith(t, "POST", url+"/api/generate", body, evil, "")
		if r.status != 403 || !strings.Contains(string(r.body), "evil.example") {
			t.Errorf("cross-origin POST %s: %d %s, want 403 naming the origin", body, r.status, r.body)
		}
	}
	if r := doWith(t, "POST", url+"/v1/completions", `{"model":"fake","prompt":"x"}`, evil, ""); r.status != 403 ||
		!strings.Contains(string(r.body), `"error":{"message"`) {
		t.Errorf("cross-origin OpenAI POST: %d %s, want 403 in OpenAI's error shape", r.status, r.body)
	}
	if b.Loads() != 0 {
		t.Errorf("refused requests loaded the model %d times", b.Loads())
	}

	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, authorization"}
	for _, origin := range []string{"http://localhost:3000", "http://127.0.0.1:8080", "https://ui.app.example"} {
		h := map[string]string{"Origin": origin}
		for k, v := range preflight {
			h[k] = v
		}
		r := doWith(t, "OPTIONS", url+"/api/chat", "", h, "")
		if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != origin ||
			!strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "POST") ||
			!strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "authorization") {
			t.Errorf("preflight from %s: %d %v, want 204 allowing POST and its headers", origin, r.status, r.header)
		}
		r = doWith(t, "POST", url+"/api/generate", `{"model":"fake","prompt":"hi","stream":false}`, map[string]string{"Origin": origin}, "")
		if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("POST from %s: %d %v, want 200 readable by that origin", origin, r.status, r.header)
		}
	}
	h := map[string]string{"Origin": "https://evil.example"}
	for k, v := range preflight {
		h[k] = v
	}
	if r := doWith(t, "OPTIONS", url+"/api/chat", "", h, ""); r.status != 403 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from a foreign origin: %d %v, want 403 without CORS headers", r.status, r.header)
	}

	t.Setenv("DFLASH_ORIGINS", " https://a.example ,,chrome-extension://*")
	if got := server.OriginsFromEnv(); len(got) != 2 || got[0] != "https://a.example" || got[1] != "chrome-extension://*" {
		t.Errorf("OriginsFromEnv = %q", got)
	}
}

// TestHostChecked: bound to loopback, the server answers only local host names, so a page
// whose own name was rebound to 127.0.0.1 cannot read its answers. Bound to every interface,
// the name a client used is its own business.
func TestHostChecked(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	if r := doWith(t, "GET", url+"/api/tags", "", nil, "rebind.evil.example:11434"); r.status != 403 ||
		!strings.Contains(string(r.body), "rebind.evil.example") {
		t.Errorf("foreign Host on loopback: %d %s, want 403 naming it", r.status, r.body)
	}
	for _, host := range []string{"localhost:11434", "127.0.0.1", "[::1]:11434", "app.localhost"} {
		if r := doWith(t, "GET", url+"/api/tags", "", nil, host); r.status != 200 {
			t.Errorf("Host %s on loopback: %d %s, want 200", host, r.status, r.body)
		}
	}
	_, url = startServer(t, server.Config{Addr: "0.0.0.0:11434"}, &fake.Backend{})
	if r := doWith(t, "GET", url+"/api/tags", "", nil, "dflash.lan.example"); r.status != 200 {
		t.Errorf("Host on a wildcard bind: %d %s, want 200", r.status, r.body)
	}
}

// TestAPIKey: with an API key every endpoint but /health wants it as a bearer token.
func TestAPIKey(t *testing.T) {
	_, url := startServer(t, server.Config{APIKey: "s3cret"}, &fake.Backend{})
	for _, auth := range []string{"", "Bearer wrong", "s3cret", "Basic czNjcmV0"} {
		h := map[string]string{}
		if auth != "" {
			h["Authorization"] = auth
		}
		for _, path := range []string{"/api/tags", "/metrics", "/ready", "/"} {
			r := doWith(t, "GET", url+path, "", h, "")
			if r.status != 401 || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s with Authorization %q: %d %v, want 401 asking for a bearer token", path, auth, r.status, r.header)
			}
		}
		r := doWith(t, "POST", url+"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}]}`, h, "")
		if r.status != 401 || !strings.Contains(string(r.body), `"code":"invalid_api_key"`) {
			t.Errorf("OpenAI request with Authorization %q: %d %s, want 401 invalid_api_key", auth, r.status, r.body)
		}
	}
	ok := map[string]string{"Authorization": "Bearer s3cret"}
	if r := doWith(t, "POST", url+"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}]}`, ok, ""); r.status != 200 {
		t.Errorf("request with the key: %d %s", r.status, r.body)
	}
	if r := doWith(t, "GET", url+"/health", "", nil, ""); r.status != 200 {
		t.Errorf("/health without the key: %d, want 200 (liveness probes carry no secrets)", r.status)
	}
}

// TestExposureWarning: listening beyond loopback without an API key is logged as a warning.
func TestExposureWarning(t *testing.T) {
	for _, c := range []struct {
		key     string
		exposed bool
		warn    bool
	}{{"", true, true}, {"k", true, false}, {"", false, false}} {
		var wrap func(net.Listener) net.Listener
		if c.exposed {
			wrap = func(ln net.Listener) net.Listener { return exposedAddr{ln} }
		}
		_, url, logs, stop := serveReal(t, server.Config{APIKey: c.key}, &fake.Backend{}, wrap)
		doWith(t, "GET", url+"/health", "", nil, "")
		_ = stop()
		if got := strings.Contains(logs.String(), "without an API key"); got != c.warn {
			t.Errorf("key %q exposed %v: warned %v, want %v:\n%s", c.key, c.exposed, got, c.warn, logs)
		}
	}
}

// failingLoad fails every load with an error that names a file on the server's disk.
type failingLoad struct{ fake.Backend }

func (*failingLoad) Load(context.Context, string) (server.Model, error) {
	return nil, errors.New("open /home/operator/models/secret-project/model.safetensors: permission denied")
}

// TestInternalErrorHidesPaths: a 500 names the file at fault but not where it lives; the log
// keeps the whole error for the operator.
func TestInternalErrorHidesPaths(t *testing.T) {
	b := &failingLoad{}
	logs := &logBuffer{}
	s := server.New(server.Config{}, b, slog.New(slog.NewTextHandler(logs, nil)))
	for _, path := range []string{"/api/generate", "/v1/completions"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "http://localhost"+path, strings.NewReader(`{"model":"fake","prompt":"x","stream":false}`)))
		if rec.Code != 500 || strings.Contains(rec.Body.String(), "/home") || strings.Contains(rec.Body.String(), "secret-project") ||
			!strings.Contains(rec.Body.String(), "model.safetensors: permission denied") {
			t.Errorf("%s: %d %s, want 500 naming model.safetensors without its directory", path, rec.Code, rec.Body)
		}
	}
	if !strings.Contains(logs.String(), "/home/operator/models/secret-project/model.safetensors") {
		t.Errorf("the log lost the full error:\n%s", logs)
	}
}

// TestShutdownOrder: when shutdown starts, a queued request is answered 503 at once while the
// running streams go on; when the grace period runs out, each running stream ends with an error
// in its own framing (an ollama error line, an OpenAI error event) before the connection
// closes, and Serve reports that it had to cancel.
func TestShutdownOrder(t *testing.T) {
	b := &fake.Backend{TokenDelay: 5 * time.Millisecond, Length: 1 << 20, ContextLength: 1 << 21}
	cfg := server.Config{Parallel: 2, ShutdownTimeout: time.Second, QueueTimeout: time.Minute}
	s, url, logs, stop := serveReal(t, cfg, b, nil)

	_, ollama, cancelO := stream(t, url, `{"model":"fake","prompt":"a"}`)
	defer cancelO()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	resp, err := boundedClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	openai := bufio.NewReader(resp.Body)
	if _, err := openai.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	queued := make(chan response, 1)
	go func() {
		resp, err := boundedClient().Post(url+"/api/generate", "application/json", strings.NewReader(`{"model":"fake","prompt":"q","stream":false}`))
		if err != nil {
			queued <- response{body: []byte(err.Error())}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		queued <- response{status: resp.StatusCode, body: body}
	}()
	waitFor(t, "the third request to queue", func() bool { return s.QueueDepth() == 1 })

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	q := <-queued
	if q.status != 503 || !strings.Contains(string(q.body), "shutting down") {
		t.Errorf("queued request: %d %s, want 503 shutting down", q.status, q.body)
	}

	rest, _ := io.ReadAll(ollama)
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, `{"error":`) || !strings.Contains(last, "shutting down") {
		t.Errorf("ollama stream ended with %q, want an error line saying the server is shutting down", last)
	}
	rest, _ = io.ReadAll(openai)
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	if last := events[len(events)-1]; !strings.HasPrefix(last, `data: {"error":{"message":`) || !strings.Contains(last, "shutting down") {
		t.Errorf("OpenAI stream ended with %q, want an error event saying the server is shutting down", last)
	}
	if err := <-stopped; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve after a forced shutdown: %v, want deadline exceeded", err)
	}
	// In the server's own order of events: shutdown starts, the queued request is answered,
	// and only then does the grace period end for the running streams.
	l := logs.String()
	start, answered, over := strings.Index(l, "shutting down"), strings.Index(l, "status=503"), strings.Index(l, "grace period over")
	if start < 0 || answered < start || over < answered {
		t.Errorf("log does not show shutdown start < queued answer < end of grace:\n%s", l)
	}
	if b.Active() != 0 {
		t.Errorf("%d models loaded after shutdown", b.Active())
	}
}

// TestShutdownCleanDrain: a shutdown whose generations finish within the grace period returns
// nil (the CLI's exit code 0).
func TestShutdownCleanDrain(t *testing.T) {
	b := &fake.Backend{TokenDelay: 5 * time.Millisecond}
	_, url, logs, stop := serveReal(t, server.Config{ShutdownTimeout: 10 * time.Second}, b, nil)
	_, rest, cancel := stream(t, url, `{"model":"fake","prompt":"a"}`)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	all, _ := io.ReadAll(rest)
	if !strings.Contains(string(all), `"done":true`) {
		t.Errorf("stream did not finish during the drain: %q", all)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve after a clean drain: %v, want nil", err)
	}
	if !strings.Contains(logs.String(), "shutdown complete") {
		t.Errorf("log lacks the end of shutdown:\n%s", logs)
	}
}
