package backend_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// capture is a Backend that hands the test every model it loads.
type capture struct {
	*backend.Backend
	loaded chan *backend.Model
}

func (c capture) Load(ctx context.Context, name string) (server.Model, error) {
	m, err := c.Backend.Load(ctx, name)
	if err == nil {
		c.loaded <- m.(*backend.Model)
	}
	return m, err
}

// streamText posts one streaming /api/generate and returns the text of its token lines. With
// drop it reads the first line only and goes away.
func streamText(url, body string, drop bool) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/generate", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Response string `json:"response"`
			Done     bool   `json:"done"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return "", fmt.Errorf("line %q: %w", sc.Bytes(), err)
		}
		if line.Error != "" {
			return "", fmt.Errorf("stream error: %s", line.Error)
		}
		text.WriteString(line.Response)
		if drop {
			return text.String(), nil
		}
	}
	return text.String(), sc.Err()
}

// TestServerBatchesConcurrentStreams: streaming clients of one model are decoded together, each
// answer is the one the client gets alone, a client that disconnects mid-stream changes none of
// the others, and /metrics shows steps as wide as the batch. Plain and with a random draft.
// The model's steps are paused until every generation has joined, so the batch's width is
// known, not left to timing.
func TestServerBatchesConcurrentStreams(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	prompts := []string{"Once upon a time", "Lily and Ben went to the park.", "The cat", "One day, a little", "Tom had a big red ball."}
	serveBatched(t, bin, map[string]string{"plain": "", "draft": randomDraft(t, bin)}, prompts, 40)
}

// TestServerBatchesHybridStreams: the same on a tiny random Qwen3.5 folder (bf16, with the real
// Qwen3 tokenizer), whose steps run as one batched forward over the hybrid sequences: plain, and
// with a random DFlash draft (verify rows of every stream in each step, each restored to its own
// row snapshot). DFlash2 on batched hybrids is runner's TestBatchedHybridEqualsAlone: a random
// DFlash2 of the 248320-token vocabulary takes seconds to draw.
func TestServerBatchesHybridStreams(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Tokenizer: true})
	prompts := []string{"Once upon a time", "The weather today", "def main():", "Hello, world", "1, 2, 3,"}
	serveBatched(t, dir, map[string]string{"plain": "", "dflash": randomDraft(t, dir)}, prompts, 24)
}

// serveBatched serves the model at bin (with each of drafts in turn, "" for none) and checks
// that len(prompts) concurrent streams of n tokens, decoded in one batch, answer what each
// prompt gets alone, that the last client's disconnecting after its first token changes no other
// answer, and that the metrics saw a step of more than 4 streams (len(prompts) must be 5 or more).
func serveBatched(t *testing.T, bin string, drafts map[string]string, prompts []string, n int) {
	for name, draft := range drafts {
		t.Run(name, func(t *testing.T) {
			spec := backend.Spec{Name: "m", Path: bin, Draft: draft}
			be, err := backend.New(backend.Options{Models: []backend.Spec{spec}, Parallel: len(prompts)})
			if err != nil {
				t.Fatal(err)
			}
			c := capture{Backend: be, loaded: make(chan *backend.Model, 1)}
			s := server.New(server.Config{KeepAlive: -1}, c, slog.New(slog.DiscardHandler))
			ts := httptest.NewServer(s.Handler())
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s.Shutdown(ctx)
				ts.Close()
			}()
			body := func(p string, n int) string {
				return fmt.Sprintf(`{"model":"m","prompt":%q,"raw":true,"options":{"temperature":0,"num_predict":%d}}`, p, n)
			}
			alone := make([]string, len(prompts))
			for i, p := range prompts {
				if alone[i], err = streamText(ts.URL, body(p, n), false); err != nil {
					t.Fatal(err)
				}
			}
			m := <-c.loaded
			base := runtime.NumGoroutine()

			backend.PauseSteps(m)
			got := make([]string, len(prompts))
			errs := make([]error, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Go(func() {
					// The last client leaves after its first token; the others read to the end.
					got[i], errs[i] = streamText(ts.URL, body(p, n), i == len(prompts)-1)
				})
			}
			for backend.Running(m) < len(prompts) {
				runtime.Gosched()
			}
			backend.ResumeSteps(m)
			wg.Wait()
			for i := range prompts[:len(prompts)-1] {
				if errs[i] != nil || got[i] != alone[i] {
					t.Errorf("client %d: err %v\n got %q\nwant %q", i, errs[i], got[i], alone[i])
				}
			}
			if last := len(prompts) - 1; errs[last] != nil || !strings.HasPrefix(alone[last], got[last]) {
				t.Errorf("disconnecting client: err %v, first text %q, want a prefix of %q", errs[last], got[last], alone[last])
			}
			// The disconnected generation ends at its next step; then the batch is empty.
			for backend.Running(m) > 0 {
				runtime.Gosched()
			}
			http.DefaultClient.CloseIdleConnections()
			waitGoroutines(t, base)

			// The first step after the pause held all five; alone runs were steps of one.
			metrics := scrape(t, ts.URL)
			if w := metricValue(t, metrics, `dflash_batch_step_width_bucket{model="m:latest",le="4"}`); w >= metricValue(t, metrics, `dflash_batch_step_width_count{model="m:latest"}`) {
				t.Errorf("no decode step wider than 4 in the histogram:\n%s", grep(metrics, "dflash_batch"))
			}
		})
	}
}

// waitGoroutines waits, yielding, until the goroutines are back to base: a batched step may
// still be handing its last results over when the clients have their answers.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	for range 1000 {
		if runtime.NumGoroutine() <= base {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("%d goroutines, %d before the batch", runtime.NumGoroutine(), base)
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func metricValue(t *testing.T, metrics, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no %s in the metrics:\n%s", series, grep(metrics, "dflash_batch"))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
