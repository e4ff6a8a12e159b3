package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// waitFor polls cond until it holds or 5 s pass; the bound keeps a broken server from hanging
// the test, and no assertion depends on how fast the condition became true.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stream starts a streaming generate and returns once its first line arrived, i.e. once the
// request holds a generation slot. cancel ends it from the client side.
func stream(t *testing.T, url, body string) (first string, rest *bufio.Reader, cancel func()) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/generate", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancelCtx()
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil {
		cancelCtx()
		resp.Body.Close()
		t.Fatalf("first line: %v", err)
	}
	return line, br, func() { cancelCtx(); resp.Body.Close() }
}

func TestQueueFullAndTimeout(t *testing.T) {
	b := &fake.Backend{TokenDelay: 20 * time.Millisecond}
	s, url := startServer(t, server.Config{Parallel: 1, MaxQueue: 1, QueueTimeout: -1, RetryAfter: 3 * time.Second}, b)
	_, _, cancelA := stream(t, url, `{"model":"fake","prompt":"a"}`)
	defer cancelA()

	// B waits in the queue (it cannot start while A streams).
	bDone := make(chan response, 1)
	go func() {
		bDone <- post(t, url+"/api/generate", `{"model":"fake","prompt":"b","stream":false}`)
	}()
	waitFor(t, "B to queue", func() bool { return s.QueueDepth() == 1 })

	// C finds the queue full.
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"c"}`)
	if r.status != 503 || r.header.Get("Retry-After") != "3" || !strings.Contains(string(r.body), "queue is full") {
		t.Errorf("C: %d Retry-After=%q %s, want 503 Retry-After=3 queue full", r.status, r.header.Get("Retry-After"), r.body)
	}
	r = post(t, url+"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}]}`)
	e := decode[server.OpenAIError](t, r.body)
	if r.status != 503 || e.Error.Code == nil || *e.Error.Code != "server_busy" {
		t.Errorf("OpenAI C: %d %s", r.status, r.body)
	}

	// A leaves; B then runs to completion.
	cancelA()
	if r := <-bDone; r.status != 200 || !strings.Contains(string(r.body), fake.Text) {
		t.Errorf("B after A left: %d %s", r.status, r.body)
	}
}

func TestQueueTimeout(t *testing.T) {
	b := &fake.Backend{TokenDelay: time.Hour} // A never finishes by itself
	_, url := startServer(t, server.Config{Parallel: 1, QueueTimeout: 30 * time.Millisecond}, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aStarted := make(chan struct{})
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/generate", strings.NewReader(`{"model":"fake","prompt":"a"}`))
		close(aStarted)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-aStarted
	waitFor(t, "A to load the model", func() bool { return b.Active() == 1 })
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"b"}`)
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "queue timeout") {
		t.Errorf("B: %d %s, want 503 with Retry-After (queue timeout)", r.status, r.body)
	}
}

func TestDisconnectCancelsGeneration(t *testing.T) {
	b := &fake.Backend{TokenDelay: 50 * time.Millisecond}
	_, url := startServer(t, server.Config{Parallel: 1}, b)
	_, _, cancel := stream(t, url, `{"model":"fake","prompt":"a"}`)
	cancel()
	waitFor(t, "the generation to see the cancel", func() bool { return b.Cancelled() == 1 })
	// The slot is free again: a new request completes.
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"b","stream":false,"options":{"num_predict":1}}`)
	if r.status != 200 {
		t.Errorf("after disconnect: %d %s", r.status, r.body)
	}
}

func TestKeepAlive(t *testing.T) {
	b := &fake.Backend{}
	_, url := startServer(t, server.Config{KeepAlive: 20 * time.Millisecond}, b)
	psNames := func() []string {
		var ps struct {
			Models []server.OllamaRunning `json:"models"`
		}
		decodeInto(t, do(t, "GET", url+"/api/ps", "").body, &ps)
		var out []string
		for _, m := range ps.Models {
			out = append(out, m.Name)
		}
		return out
	}

	// Default keep-alive (20ms here): loaded, then unloaded once idle.
	post(t, url+"/api/generate", `{"model":"fake","prompt":"x","stream":false}`)
	waitFor(t, "idle unload", func() bool { return b.Active() == 0 && len(psNames()) == 0 })
	if b.Loads() != 1 || b.Closes() != 1 {
		t.Errorf("loads %d closes %d, want 1 and 1", b.Loads(), b.Closes())
	}

	// keep_alive -1 keeps it; /api/ps lists it.
	post(t, url+"/api/generate", `{"model":"fake","prompt":"x","stream":false,"keep_alive":-1}`)
	if got := psNames(); len(got) != 1 || got[0] != "fake:latest" {
		t.Errorf("/api/ps after keep_alive -1: %v", got)
	}
	// A second model evicts the idle first one (MaxLoaded defaults to 1).
	post(t, url+"/api/generate", `{"model":"fake-draft","prompt":"x","stream":false,"keep_alive":"1h"}`)
	if got := psNames(); len(got) != 1 || got[0] != "fake-draft:latest" {
		t.Errorf("/api/ps after loading a second model: %v, want only fake-draft:latest", got)
	}
	// keep_alive 0 on a generation unloads right after it.
	post(t, url+"/api/generate", `{"model":"fake-draft","prompt":"x","stream":false,"keep_alive":"0s"}`)
	if b.Active() != 0 || len(psNames()) != 0 {
		t.Errorf("after keep_alive 0: %d active, ps %v", b.Active(), psNames())
	}
}

// TestLoad drives 40 streaming requests, 16 at a time, a fifth of which disconnect after the
// first chunk. Every other request must end with the whole answer or a clean 503, and the
// server must leave no goroutine behind.
func TestLoad(t *testing.T) {
	b := &fake.Backend{TokenDelay: time.Millisecond}
	s := server.New(server.Config{Parallel: 2, MaxQueue: 64}, b, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	client := &http.Client{Transport: tr}
	// Goroutines are counted before Serve starts, so the listener's goroutines must be gone at
	// the end too, which Shutdown guarantees.
	base := runtime.NumGoroutine()
	go func() { served <- s.Serve(ctx, ln) }()

	const total, concurrent = 40, 16
	sem := make(chan struct{}, concurrent)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var complete, busy, dropped int
	var failures []string
	for i := range total {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			disconnect := i%5 == 4
			outcome, err := loadClient(client, url, i, disconnect)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("request %d: %v", i, err))
			case outcome == "complete":
				complete++
			case outcome == "busy":
				busy++
			case outcome == "dropped":
				dropped++
			}
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if dropped != total/5 || complete+busy != total-total/5 || complete == 0 {
		t.Errorf("complete %d, busy %d, dropped %d of %d", complete, busy, dropped, total)
	}
	tr.CloseIdleConnections()
	stop()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	waitFor(t, fmt.Sprintf("goroutines to return to %d", base), func() bool { return runtime.NumGoroutine() <= base })
	if b.Active() != 0 {
		t.Errorf("%d models still loaded after shutdown", b.Active())
	}
}

// loadClient runs one request of TestLoad, alternating the four generation endpoints'
// streaming forms. It returns "complete", "busy" (a clean 503) or "dropped" (disconnected on
// purpose), or an error describing what was wrong.
func loadClient(client *http.Client, url string, i int, disconnect bool) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var path, body string
	switch i % 4 {
	case 0:
		path, body = "/api/generate", `{"model":"fake","prompt":"p"}`
	case 1:
		path, body = "/api/chat", `{"model":"fake","messages":[{"role":"user","content":"p"}]}`
	case 2:
		path, body = "/v1/chat/completions", `{"model":"fake","stream":true,"messages":[{"role":"user","content":"p"}]}`
	case 3:
		path, body = "/v1/completions", `{"model":"fake","stream":true,"prompt":"p","max_tokens":50}`
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", url+path, strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == 503 {
		io.Copy(io.Discard, resp.Body)
		return "busy", nil
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	if disconnect {
		if _, err := br.ReadString('\n'); err != nil {
			return "", fmt.Errorf("%s: first chunk: %w", path, err)
		}
		cancel()
		return "dropped", nil
	}
	all, err := io.ReadAll(br)
	if err != nil {
		return "", fmt.Errorf("%s: read: %w", path, err)
	}
	text := string(all)
	switch {
	case strings.HasPrefix(path, "/v1/") && !strings.HasSuffix(text, "data: [DONE]\n\n"):
		return "", fmt.Errorf("%s: stream not terminated by [DONE]: %q", path, text)
	case !strings.HasPrefix(path, "/v1/") && !strings.Contains(text, `"done":true`):
		return "", fmt.Errorf("%s: stream without a done line: %q", path, text)
	case strings.Contains(text, `"error"`):
		return "", fmt.Errorf("%s: error in stream: %q", path, text)
	}
	// Every token of the fake's answer must have arrived, in order.
	last := 0
	for _, w := range fake.Words {
		j := strings.Index(text[last:], fmt.Sprintf("%q", w)[1:len(w)+1])
		if j < 0 {
			return "", fmt.Errorf("%s: token %q missing after byte %d", path, w, last)
		}
		last += j
	}
	return "complete", nil
}

func TestShutdown(t *testing.T) {
	t.Run("waits for in-flight", func(t *testing.T) {
		b := &fake.Backend{TokenDelay: 10 * time.Millisecond}
		s, url := startServer(t, server.Config{}, b)
		_, rest, cancel := stream(t, url, `{"model":"fake","prompt":"a"}`)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- s.Shutdown(context.Background()) }()
		all, _ := io.ReadAll(rest)
		if err := <-errc; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if !strings.Contains(string(all), `"done":true`) {
			t.Errorf("in-flight request did not finish: %q", all)
		}
		if r := post(t, url+"/api/generate", `{"model":"fake","prompt":"b"}`); r.status != 503 {
			t.Errorf("request after shutdown: %d, want 503", r.status)
		}
		if b.Active() != 0 {
			t.Errorf("%d models loaded after shutdown", b.Active())
		}
	})
	t.Run("cancels after deadline", func(t *testing.T) {
		b := &fake.Backend{TokenDelay: time.Hour}
		s, url := startServer(t, server.Config{}, b)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		got := make(chan response, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/generate", strings.NewReader(`{"model":"fake","prompt":"a","stream":false}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- response{}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got <- response{status: resp.StatusCode, body: body}
		}()
		waitFor(t, "the model to load", func() bool { return b.Active() == 1 })
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer scancel()
		if err := s.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want deadline exceeded", err)
		}
		if r := <-got; r.status != 503 || !strings.Contains(string(r.body), "shutting down") {
			t.Errorf("cancelled request: %d %s, want 503 shutting down", r.status, r.body)
		}
		if b.Cancelled() != 1 || b.Active() != 0 {
			t.Errorf("cancelled %d active %d, want 1 and 0", b.Cancelled(), b.Active())
		}
	})
}
