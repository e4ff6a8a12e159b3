package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dflash/dflash/engine/ref"
)

func cmdPull(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("pull", stderr)
	parallel := fs.Int("parallel", 4, "files downloaded at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one Hugging Face id: dflash pull Org/Name[@revision] (env HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE)")
	}
	repo, rev, err := ref.ParseHubID(fs.Arg(0))
	if err != nil {
		return usagef("%v (an ollama name is pulled with: ollama pull NAME)", err)
	}
	o := ref.PullOptionsFromEnv(repo, rev)
	o.Parallel = *parallel
	p := newPullPrinter(stderr, terminalStderr(stderr) != nil)
	o.Progress = p.update
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := ref.Pull(ctx, o)
	p.finish(err == nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", fs.Arg(0), r.Path)
	return nil
}

// pullPrinter shows a pull's progress: on a terminal, a line per file under way and a total line,
// redrawn in place at most every tick; elsewhere (a log, a pipe) one line per file as it is
// finished and a total at the end, so a log holds no carriage returns. Written here rather than
// taken from a progress library: it is some eighty lines and the CLI has no other use for one.
type pullPrinter struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu       sync.Mutex
	files    map[string]ref.Progress
	order    []string
	drawn    int // lines of the last redraw, to move back over
	lastDraw time.Time
	base     map[string]int64
}

func newPullPrinter(w io.Writer, tty bool) *pullPrinter {
	return &pullPrinter{w: w, tty: tty, start: time.Now(), files: map[string]ref.Progress{}, base: map[string]int64{}}
}

func (p *pullPrinter) update(u ref.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, seen := p.files[u.File]
	if !seen {
		p.order = append(p.order, u.File)
		slices.Sort(p.order)
	}
	if u.Attempt > 0 && u.Resumed > 0 && (!seen || prev.Attempt != u.Attempt) {
		p.base[u.File] = u.Resumed
	}
	p.files[u.File] = u
	if !p.tty {
		if u.Finished {
			how := "fetched"
			if u.Cached {
				how = "cached"
			} else if p.base[u.File] > 0 {
				how = fmt.Sprintf("resumed from %s", humanBytes(p.base[u.File]))
			}
			fmt.Fprintf(p.w, "%-36s %10s  %s\n", u.File, humanBytes(u.Size), how)
		}
		return
	}
	if u.Finished || time.Since(p.lastDraw) >= 100*time.Millisecond {
		p.drawLocked()
	}
}

func (p *pullPrinter) totalsLocked() (done, size int64, nfiles, finished int) {
	for _, f := range p.files {
		done += f.Done
		if f.Finished {
			finished++
		}
		size, nfiles = f.TotalSize, f.TotalFiles
	}
	return done, size, nfiles, finished
}

func (p *pullPrinter) drawLocked() {
	p.lastDraw = time.Now()
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	b.WriteString("\r\x1b[J")
	lines := 0
	for _, n := range p.order {
		f := p.files[n]
		if f.Finished {
			continue
		}
		fmt.Fprintf(&b, "%-36s %s\n", n, bar(f.Done, f.Size))
		lines++
	}
	done, size, nfiles, finished := p.totalsLocked()
	fmt.Fprintf(&b, "%-36s %s  %d/%d files, %s\n", "total", bar(done, size), finished, nfiles, pullRate(done, time.Since(p.start)))
	p.drawn = lines + 1
	io.WriteString(p.w, b.String())
}

func (p *pullPrinter) finish(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.drawLocked()
		return
	}
	done, _, nfiles, finished := p.totalsLocked()
	if ok {
		fmt.Fprintf(p.w, "%d/%d files, %s in %.1fs\n", finished, nfiles, humanBytes(done), time.Since(p.start).Seconds())
	}
}

func bar(done, size int64) string {
	const width = 24
	frac := 1.0
	if size > 0 {
		frac = float64(done) / float64(size)
	}
	n := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%% %9s/%-9s", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, humanBytes(done), humanBytes(size))
}

func pullRate(n int64, d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return humanBytes(int64(float64(n)/d.Seconds())) + "/s"
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
