package main

import (
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/dflash/dflash/kernel"
)

// progressDelay is how long a step runs before its progress line appears: a load that takes
// less needs no reassurance, and its output stays clean.
const progressDelay = 400 * time.Millisecond

// startProgress shows on w, a terminal, that a long step (loading weights, building random ones)
// is under way: one line rewritten in place every tick with the step's name, the bytes allocated
// since it began (weights land on the heap or, when large, in kernel's huge-page mappings as they
// are read or drawn, so the count of both grows with the work) and the time taken. stop erases the line. The engine gives no callbacks, so the line
// measures the process, not the loader: it promises movement, not a fraction.
func startProgress(w io.Writer, what string, delay, tick time.Duration) (stop func()) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64() + uint64(kernel.MappedBytes())
	}
	base := allocated()
	return startStatus(w, what, delay, tick, func() string { return formatBytes(allocated() - base) })
}

// startStatus is the progress line of a step that can say how far it is: status (called from
// the line's own goroutine, so it reads shared state safely) gives what follows the step's name.
// The line appears after delay, is rewritten every tick with the time taken, and stop erases it.
func startStatus(w io.Writer, what string, delay, tick time.Duration, status func() string) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait := time.NewTimer(delay)
		defer wait.Stop()
		select {
		case <-done:
			return
		case <-wait.C:
		}
		t := time.NewTicker(tick)
		defer t.Stop()
		spin := `|/-\`
		for i := 0; ; i++ {
			fmt.Fprintf(w, "\r\x1b[K%c %s: %s, %.1fs", spin[i%len(spin)], what, status(), time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// progressBar draws done of total as a bar width cells wide: "[=====>    ] 12/40".
func progressBar(done, total, width int) string {
	if total <= 0 {
		total, done = 1, 0
	}
	done = max(0, min(done, total))
	fill := done * width / total
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	return fmt.Sprintf("[%s] %d/%d", bar, done, total)
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kB", n>>10)
}

// terminalStderr returns the terminal behind a command's stderr, looking through the wrappers
// cli and newFlags put around it, or nil when stderr is not a terminal (a pipe, a file, a test's
// buffer): progress lines are for people, never for logs.
func terminalStderr(w io.Writer) *os.File {
	for {
		switch v := w.(type) {
		case *lastWrite:
			w = v.w
		case *cliStderr:
			w = v.Writer
		case *os.File:
			if isTerminal(v) {
				return v
			}
			return nil
		default:
			return nil
		}
	}
}
