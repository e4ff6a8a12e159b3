package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/runner/depthcache"
)

// saveInterval is how often, at most, a model saves its controller's learned costs after a
// request, besides at Close: a server that is killed rather than stopped loses at most that much
// learning, and a busy one writes the small file once a minute, not per request.
const saveInterval = time.Minute

// learned is where one loaded model pair's adaptive controller keeps what it learns: a file of
// runner/depthcache keyed by the target's and draft's files, the kernel path, the thread count
// and "serving". The last stands in for `dflash run`'s temperature: one controller serves the
// requests of every temperature, so what it learns is the mix the server sees, kept apart from
// the runs'. The zero value (no cache folder, a fixed-depth draft, no files) does nothing.
type learned struct {
	ctl             *runner.Controller
	dir, key, about string
	saved           time.Time
}

// openLearned warm-starts dr's controller from the cache in dir and returns where to save it.
// Problems are logged, never fatal: the cache only saves a cold start's rounds.
func openLearned(dir string, d *engine.Description, dr *engine.Draft) learned {
	ctl := dr.Drafter.Depth().Controller()
	if dir == "" || ctl == nil || d.Path == "" {
		return learned{}
	}
	key, about, err := depthcache.Key([]string{d.Path, dr.Dir}, "draft "+dr.Dir, "kernel "+kernel.Path(),
		"threads "+strconv.Itoa(runtime.GOMAXPROCS(0)), "serving")
	if err != nil {
		slog.Warn("depth controller starts cold", "model", d.Path, "err", err)
		return learned{}
	}
	l := learned{ctl: ctl, dir: dir, key: key, about: about, saved: time.Now()}
	switch w, err := depthcache.Load(dir, key); {
	case err == nil:
		ctl.Warm(w)
	case !errors.Is(err, os.ErrNotExist):
		slog.Warn("depth controller starts cold (the file will be rewritten)", "model", d.Path, "err", err)
	}
	return l
}

// save writes what the controller learned.
func (l *learned) save() {
	if l.ctl == nil {
		return
	}
	l.saved = time.Now()
	if err := depthcache.Save(l.dir, l.key, l.about, l.ctl.Learned()); err != nil {
		slog.Warn("depth controller's costs not kept", "err", fmt.Errorf("%s: %w", l.about, err))
	}
}

// saveEvery saves when the last save is at least d old.
func (l *learned) saveEvery(d time.Duration) {
	if l.ctl != nil && time.Since(l.saved) >= d {
		l.save()
	}
}
