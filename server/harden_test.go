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
