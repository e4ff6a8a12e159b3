// Command loadgen is a bounded load test for a running `dflash serve` on this machine: it keeps
// -clients streaming requests in flight against one loopback address for -duration, cutting every
// -cut-th one after its first chunk, and prints how many streams completed, were cut, were refused
// (503/429) or failed, with the server's goroutines and resident memory (from /metrics) before and
// after. It is a measurement for BENCHMARKS.md, not a test; it refuses any address but loopback.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("url", "http://127.0.0.1:11434", "server address (loopback only)")
	model := flag.String("model", "stories260K", "model name")
	clients := flag.Int("clients", 16, "streams in flight")
	duration := flag.Duration("duration", 30*time.Second, "how long to keep starting streams")
	cut := flag.Int("cut", 3, "cut every n-th stream after its first chunk (0: never)")
	tokens := flag.Int("n", 64, "tokens per stream")
	flag.Parse()
	u, err := url.Parse(*addr)
	if err != nil {
		fail(err)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fail(fmt.Errorf("%s is not a loopback address", u.Hostname()))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	// One stream first, so the model is loaded and "before" is the idle served state.
	if _, err := stream(client, *addr, *model, *tokens, 0, false); err != nil {
		fail(fmt.Errorf("warm-up stream: %w", err))
	}
	client.CloseIdleConnections()
	time.Sleep(time.Second)
	g0, r0 := metrics(*addr)
	fmt.Printf("before (model loaded, idle): goroutines %.0f, resident %.1f MiB\n", g0, r0/(1<<20))

	var done, cutN, busy, failed atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(*duration)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1)
				outcome, err := stream(client, *addr, *model, *tokens, i, *cut > 0 && i%int64(*cut) == 0)
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case outcome == "busy":
					busy.Add(1)
					time.Sleep(20 * time.Millisecond)
				case outcome == "cut":
					cutN.Add(1)
				default:
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
	time.Sleep(2 * time.Second) // let the server finish the cut streams' bookkeeping
	g1, r1 := metrics(*addr)
	fmt.Printf("%d clients for %s: %d streams completed, %d cut, %d refused (busy), %d failed\n",
		*clients, *duration, done.Load(), cutN.Load(), busy.Load(), failed.Load())
	fmt.Printf("after: goroutines %.0f, resident %.1f MiB\n", g1, r1/(1<<20))
	if e := firstErr.Load(); e != nil {
		fmt.Printf("first failure: %s\n", e)
	}
}

// stream runs one streaming /api/generate and reads it to the end, or cuts it after one chunk.
func stream(c *http.Client, addr, model string, n int, i int64, cut bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time %d","options":{"num_predict":%d,"temperature":0}}`, model, i, n)
	req, _ := http.NewRequestWithContext(ctx, "POST", addr+"/api/generate", strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == 503 || resp.StatusCode == 429 {
		io.Copy(io.Discard, resp.Body)
		return "busy", nil
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	if cut {
		if _, err := br.ReadString('\n'); err != nil {
			return "", err
		}
		return "cut", nil
	}
	var last string
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			last = line
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if !strings.Contains(last, `"done":true`) {
		return "", fmt.Errorf("stream ended without done: %q", last)
	}
	return "complete", nil
}

// metrics reads the server's goroutine count and resident memory from /metrics.
func metrics(addr string) (goroutines, resident float64) {
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		fail(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var v float64
		if _, err := fmt.Sscanf(sc.Text(), "go_goroutines %g", &v); err == nil {
			goroutines = v
		}
		if _, err := fmt.Sscanf(sc.Text(), "process_resident_memory_bytes %g", &v); err == nil {
			resident = v
		}
	}
	return goroutines, resident
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}
