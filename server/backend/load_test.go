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
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// loadTokens is how many tokens each streamed request generates (greedy, so every request of a
// run is the same and the numbers compare across client counts).
const loadTokens = 64

// BenchmarkServeLoad drives the real server over loopback HTTP with 1, 2, 4, 8 and 16 concurrent
// streaming clients (ollama /api/generate, raw prompt, greedy, num_predict 64), plain and with a
// random DFlash draft (mechanics only: a random draft's proposals are almost all rejected, so it
// shows the cost of speculation, not its gain). One op is one request from every client at once.
// Reported: tok/s (all clients' tokens over wall time), TPOT p50/p99 per request (time from its
// first to its last token over tokens-1) and TTFT p50/p99 (request sent to first token, queueing
// for the model included). The model decodes every client's generation together (Parallel is
// the client count).
//
//	go test ./server/backend -run '^$' -bench ServeLoad -benchtime 5x
//
// DFLASH_LOAD_MODEL serves another model instead (a folder or GGUF, e.g. a synthetic Qwen3-0.6B
// written by x/synthfolder) and DFLASH_LOAD_DRAFT gives its draft ("" runs the plain rows only).
func BenchmarkServeLoad(b *testing.B) {
	bin, draft := os.Getenv("DFLASH_LOAD_MODEL"), os.Getenv("DFLASH_LOAD_DRAFT")
	if bin == "" {
		bin = shareddata.Path(b, storiesRel)
		draft = randomDraft(b, bin)
	}
	for _, withDraft := range []bool{false, true} {
		if withDraft && draft == "" {
			continue
		}
		for _, clients := range []int{1, 2, 4, 8, 16} {
			name := fmt.Sprintf("%s/clients=%d", map[bool]string{false: "plain", true: "draft"}[withDraft], clients)
			b.Run(name, func(b *testing.B) {
				spec := backend.Spec{Name: "m", Path: bin}
				if withDraft {
					spec.Draft = draft
				}
				be, err := backend.New(backend.Options{Models: []backend.Spec{spec}, Parallel: clients})
				if err != nil {
					b.Fatal(err)
				}
				s := server.New(server.Config{Parallel: clients, KeepAlive: -1}, be, slog.New(slog.DiscardHandler))
				ts := httptest.NewServer(s.Handler())
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					s.Shutdown(ctx)
					ts.Close()
				}()
				body := fmt.Sprintf(`{"model":"m","prompt":"Once upon a time","raw":true,"options":{"temperature":0,"num_predict":%d}}`, loadTokens)
				// Load the model before timing.
				if _, err := stream(ts.URL, body); err != nil {
					b.Fatal(err)
				}
				var mu sync.Mutex
				var tpot, ttft []float64
				tokens := 0
				b.ResetTimer()
				start := time.Now()
				for b.Loop() {
					var wg sync.WaitGroup
					errs := make(chan error, clients)
					for range clients {
						wg.Go(func() {
							sent := time.Now()
							times, err := stream(ts.URL, body)
							if err != nil {
								errs <- err
								return
							}
							mu.Lock()
							defer mu.Unlock()
							tokens += len(times)
							if len(times) > 0 {
								ttft = append(ttft, times[0].Sub(sent).Seconds()*1e3)
							}
							if len(times) > 1 {
								tpot = append(tpot, times[len(times)-1].Sub(times[0]).Seconds()*1e3/float64(len(times)-1))
							}
						})
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						b.Fatal(err)
					}
				}
				wall := time.Since(start)
				b.ReportMetric(float64(tokens)/wall.Seconds(), "tok/s")
				b.ReportMetric(percentile(tpot, 0.5), "tpot-p50-ms")
				b.ReportMetric(percentile(tpot, 0.99), "tpot-p99-ms")
				b.ReportMetric(percentile(ttft, 0.5), "ttft-p50-ms")
				b.ReportMetric(percentile(ttft, 0.99), "ttft-p99-ms")
			})
		}
	}
}

// stream posts one streaming /api/generate and returns the arrival time of every token line.
func stream(url, body string) ([]time.Time, error) {
	resp, err := http.Post(url+"/api/generate", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var times []time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Done  bool   `json:"done"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Bytes(), err)
		}
		if line.Error != "" {
			return nil, fmt.Errorf("stream error: %s", line.Error)
		}
		if !line.Done {
			times = append(times, time.Now())
		}
	}
	return times, sc.Err()
}

// percentile is the nearest-rank percentile of xs (0 when empty).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
