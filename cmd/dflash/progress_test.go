package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A step that outlasts the delay gets a line rewritten in place, naming it and counting the
// bytes allocated meanwhile, erased when it ends; a step quicker than the delay prints nothing.
func TestProgressLine(t *testing.T) {
	var w syncBuffer
	stop := startProgress(&w, "building random qwen3-0.6b weights", 0, time.Millisecond)
	var keep [][]byte
	for range 20 {
		keep = append(keep, make([]byte, 1<<20))
		time.Sleep(time.Millisecond)
	}
	stop()
	_ = keep
	out := w.String()
	if !strings.HasPrefix(out, "\r\x1b[K") || !strings.Contains(out, "building random qwen3-0.6b weights: ") ||
		!strings.Contains(out, " MB, ") || !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("progress output %q: want lines rewritten in place with the step, a byte count, erased at the end", out)
	}
	var quiet syncBuffer
	startProgress(&quiet, "loading", time.Hour, time.Millisecond)()
	if quiet.String() != "" {
		t.Errorf("a step quicker than the delay printed %q", quiet.String())
	}
	// In tests stderr is a buffer, never a terminal: no progress in logs or captured output.
	if f := terminalStderr(&cliStderr{Writer: &bytes.Buffer{}}); f != nil {
		t.Errorf("terminalStderr of a buffer = %v, want nil", f)
	}
}

// The bar fills in proportion and always keeps its width: 0 of 4 is an arrow alone, 4 of 4 a
// full bar, and a count past the end is held at the end.
func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		done, total int
		want        string
	}{
		{0, 4, "[>       ] 0/4"},
		{1, 4, "[==>     ] 1/4"},
		{3, 4, "[======> ] 3/4"},
		{4, 4, "[========] 4/4"},
		{9, 4, "[========] 4/4"},
		{0, 0, "[>       ] 0/1"},
	} {
		if got := progressBar(c.done, c.total, 8); got != c.want {
			t.Errorf("progressBar(%d, %d, 8) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}
