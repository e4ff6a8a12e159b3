package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
)

// syncBuffer is a bytes.Buffer safe to write from the server while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `dflash serve args...` in-process on a free loopback port and returns its URL;
// the returned function stops it (as SIGTERM would) and returns the exit code and logs.
func startServe(t *testing.T, args ...string) (string, func() (int, string)) {
	t.Helper()
	sigs := make(chan os.Signal, 2)
	var once sync.Once
	cancel := func() { once.Do(func() { sigs <- syscall.SIGTERM }) }
	old := serveSignals
	serveSignals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	t.Cleanup(func() { serveSignals = old })
	addrFile := filepath.Join(t.TempDir(), "addr")
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli(append([]string{"serve", "--host", "127.0.0.1:0", "--addr-file", addrFile}, args...), strings.NewReader(""), &stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			stop := func() (int, string) {
				cancel()
				return <-done, stdout.String() + stderr.String()
			}
			t.Cleanup(func() { cancel() })
			return "http://" + string(b), stop
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d before listening: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not write its address: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestServe(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	url, stop := startServe(t, "--model", bin, "--name", "stories", "--log", "json")

	// Raw (no template), greedy, fixed length: the golden's first words after the prompt.
	code, body := postJSON(t, url+"/api/generate", `{"model":"stories","prompt":"Once upon a time","raw":true,"stream":false,"options":{"temperature":0,"num_predict":8}}`)
	var g struct {
		Response        string `json:"response"`
		Done            bool   `json:"done"`
		DoneReason      string `json:"done_reason"`
		PromptEvalCount int    `json:"prompt_eval_count"`
		EvalCount       int    `json:"eval_count"`
	}
	if err := json.Unmarshal(body, &g); err != nil || code != 200 {
		t.Fatalf("/api/generate: %d %s (%v)", code, body, err)
	}
	if want := ", there was a little girl named Lily"; !strings.HasPrefix(want, g.Response) || len(g.Response) < 20 {
		t.Errorf("response %q, want a prefix of %q", g.Response, want)
	}
	if !g.Done || g.DoneReason != "length" || g.EvalCount != 8 || g.PromptEvalCount != 5 {
		t.Errorf("counters %+v: want done, length, 8 generated, 5 prompt tokens", g)
	}

	code, body = postJSON(t, url+"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":16,"temperature":0}`)
	var c struct {
		Choices []struct {
			Message struct{ Role, Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil || code != 200 || len(c.Choices) != 1 {
		t.Fatalf("/v1/chat/completions: %d %s (%v)", code, body, err)
	}
	if c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content == "" || c.Usage.CompletionTokens == 0 {
		t.Errorf("chat completion %s", body)
	}

	exit, logs := stop()
	if exit != 0 {
		t.Fatalf("serve exited with %d: %s", exit, logs)
	}
	if !strings.Contains(logs, "listening on http://127.0.0.1:") || !strings.Contains(logs, `"msg":"listening"`) {
		t.Errorf("logs lack the listening address: %s", logs)
	}
}

func TestServeUsage(t *testing.T) {
	// Exit code 2 for usage errors; a flag the flag package refuses exits with 1 (cli's
	// convention for parse errors), so only a non-zero code is required there.
	cases := []struct {
		args []string
		want string
	}{
		{nil, "no models"},
		{[]string{"--draft", "d"}, "before any --model"},
		{[]string{"--model", "m", "--models", "f"}, "not both"},
		{[]string{"--model", "m", "--log", "xml"}, "--log"},
		{[]string{"--model", "m", "--parallel", "-1"}, "--parallel"}, // 0 is the per-model default
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, "", append([]string{"serve"}, c.args...)...)
		if code == 0 || (code != 2 && (len(c.args) == 0 || c.args[0] != "--draft")) || !strings.Contains(errs, c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// A broken model ends the start, naming it, with a non-zero exit; with --skip-broken the server
// starts, lists it with its error beside the good model, refuses it on use and stays ready.
func TestServeBrokenModel(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	dir := t.TempDir()
	broken := filepath.Join(dir, "stories260K.bin")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tok512.bin"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--host", "127.0.0.1:0", "--model", bin, "--name", "good", "--model", broken, "--name", "broken"}
	code, _, errs := runCLI(t, "", args...)
	if code == 0 || !strings.Contains(errs, "model broken:latest") || !strings.Contains(errs, "truncated") {
		t.Fatalf("serve with a truncated model: exit %d, stderr %q; want non-zero naming broken:latest and the truncation", code, errs)
	}

	url, stop := startServe(t, append(args[3:], "--skip-broken")...)
	resp, err := http.Get(url + "/api/tags")
	if err != nil {
		t.Fatal(err)
	}
	var tags struct {
		Models []struct{ Name, Digest, Error string } `json:"models"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tags)
	resp.Body.Close()
	if err != nil || len(tags.Models) != 2 || tags.Models[0].Error != "" || !strings.Contains(tags.Models[1].Error, "truncated") || len(tags.Models[1].Digest) != 64 {
		t.Fatalf("/api/tags with --skip-broken: %+v (%v); want good, and broken:latest with its error", tags.Models, err)
	}
	if code, body := postJSON(t, url+"/api/generate", `{"model":"broken","prompt":"hi","stream":false}`); code != 500 || !strings.Contains(string(body), "truncated") {
		t.Errorf("generate on the broken model: %d %s; want 500 with its error", code, body)
	}
	if code, body := postJSON(t, url+"/api/generate", `{"model":"good","prompt":"hi","stream":false,"options":{"num_predict":2}}`); code != 200 {
		t.Errorf("generate on the good model: %d %s", code, body)
	}
	if resp, err := http.Get(url + "/ready"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/ready with one model broken: %v %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	if exit, logs := stop(); exit != 0 || !strings.Contains(logs, "model unavailable") {
		t.Errorf("serve exited with %d; logs %s; want 0 and the unavailable model logged", exit, logs)
	}
}

// TestServeAPIKey: --api-key (or DFLASH_API_KEY) guards every endpoint but /health, and the
// key never appears in --help.
func TestServeAPIKey(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	get := func(url, key string) int {
		req, _ := http.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name string
		args []string
		env  string
	}{{"flag", []string{"--api-key", "k1"}, ""}, {"env", nil, "k1"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("DFLASH_API_KEY", c.env)
			url, stop := startServe(t, append([]string{"--model", bin}, c.args...)...)
			if got := get(url+"/api/tags", ""); got != 401 {
				t.Errorf("/api/tags without the key: %d, want 401", got)
			}
			if got := get(url+"/api/tags", "k1"); got != 200 {
				t.Errorf("/api/tags with the key: %d, want 200", got)
			}
			if got := get(url+"/health", ""); got != 200 {
				t.Errorf("/health without the key: %d, want 200", got)
			}
			if exit, logs := stop(); exit != 0 {
				t.Errorf("exit %d: %s", exit, logs)
			}
		})
	}
	t.Setenv("DFLASH_API_KEY", "do-not-print")
	_, _, errs := runCLI(t, "", "serve", "--help")
	if strings.Contains(errs, "do-not-print") {
		t.Errorf("serve --help printed the API key: %s", errs)
	}
}

// TestServeSignals: the first signal starts the drain, a second exits at once with the
// shell's code for that signal, and none after serving ended does anything.
func TestServeSignals(t *testing.T) {
	var exited []int
	old := exitNow
	exitNow = func(code int) { exited = append(exited, code) }
	t.Cleanup(func() { exitNow = old })
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() { onSignals(sigs, cancel, done, log, time.Second); close(ended) }()
	sigs <- os.Interrupt
	<-ctx.Done() // the drain started
	sigs <- os.Interrupt
	<-ended
	if len(exited) != 1 || exited[0] != 130 {
		t.Errorf("second Ctrl-C: exits %v, want one exit with 130 (128 + SIGINT)", exited)
	}
	if l := logs.String(); !strings.Contains(l, "shutting down") || !strings.Contains(l, "second signal") {
		t.Errorf("log lacks the two signals:\n%s", l)
	}

	// Serving ended on its own: the watcher returns and a late signal exits nothing.
	exited = nil
	sigs = make(chan os.Signal, 1)
	done = make(chan struct{})
	ended = make(chan struct{})
	go func() { onSignals(sigs, func() {}, done, log, time.Second); close(ended) }()
	close(done)
	<-ended
	sigs <- syscall.SIGTERM
	if len(exited) != 0 {
		t.Errorf("signal after serving ended: exits %v, want none", exited)
	}
}
