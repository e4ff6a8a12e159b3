package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/runner/depthcache"
	"github.com/dflash/dflash/sample"
)

// draftFlags say which drafter speculates for the target.
type draftFlags struct {
	draft  string
	depth  depthFlag
	stderr io.Writer // where the choice of --draft auto is told
}

func (d *draftFlags) register(fs *flag.FlagSet) {
	d.stderr = fs.Output()
	fs.StringVar(&d.draft, "draft", "", "DFlash or DFlash2 draft (a folder, a draft GGUF from dflash convert, or a Hugging Face id) for speculative decoding, 'auto' (a fitting <target>-DFlash* draft in the hub cache), 'oracle' (drafts the target's own greedy continuation: the engine's ceiling), or 'none'")
	fs.Var(&d.depth, "depth", "draft tokens per round: N fixed, or auto (the depth controller, warm-started from what earlier runs of this pair learned on this machine) (default: the drafter's own policy: auto for DFlash, 7 for DFlash2, 15 for the oracle; 0 also means the drafter's own)")
}

// depthFlag is --depth: auto, a fixed N, or (unset or 0) the drafter's own policy.
type depthFlag struct {
	auto bool
	n    int
}

func (f *depthFlag) String() string {
	if f.auto {
		return "auto"
	}
	return strconv.Itoa(f.n)
}

func (f *depthFlag) Set(s string) error {
	if s == "auto" {
		*f = depthFlag{auto: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want auto or a number of draft tokens >= 0")
	}
	*f = depthFlag{n: n}
	return nil
}

// drafter builds the drafter for one run (nil: none), its depth policy fixed by --depth when
// given. The oracle needs the target's own greedy continuation of prompt, so it decodes it
// plainly first (greedy only: an oracle of a sampled run is no oracle). The caller opens and
// closes the sessions.
func (d *draftFlags) drafter(e *engine.Engine, prompt []int, opts sample.Options, n, capacity int) (runner.Drafter, error) {
	if d.draft == "" {
		return nil, nil
	}
	// Any drafter, the oracle too, needs a target whose cache can drop rejected rows (by
	// rewinding, or by restoring a row snapshot on a hybrid target).
	if err := e.Desc.CheckSpeculation(); err != nil {
		return nil, err
	}
	var dr runner.Drafter
	switch d.draft {
	case "oracle":
		if prompt == nil {
			return nil, usagef("--draft oracle needs a fixed prompt (not --chat)")
		}
		if !opts.Greedy() {
			return nil, usagef("--draft oracle drafts the greedy continuation: use --temp 0")
		}
		cont, err := greedyContinuation(e, prompt, n, capacity)
		if err != nil {
			return nil, err
		}
		limit := d.depth.n
		if limit == 0 {
			limit = 15
		}
		dr = &runner.OracleDrafter{Tokens: append(append([]int(nil), prompt...), cont...), Limit: limit, Vocab: e.Target.Config().Vocab}
	default:
		loaded, err := e.LoadDraft(d.draft)
		if err != nil {
			return nil, err
		}
		if d.draft == "auto" {
			fmt.Fprintf(d.stderr, "draft auto: %s (%s, block %d)\n", loaded.Name, loaded.Arch, loaded.BlockSize)
		}
		dr = loaded.Drafter
	}
	switch {
	case d.depth.n > 0:
		dr = runner.WithDepth(dr, runner.Fixed(d.depth.n))
	case d.depth.auto && dr.Depth().Controller() == nil:
		dr = runner.WithDepth(dr, runner.Adaptive(nil))
	}
	return dr, nil
}

// learnedCache is where one run's adaptive controller starts from and saves to (the user cache,
// runner/depthcache): its key names the target and draft files, the kernel path, the thread
// count and the temperature. The zero value (no adaptive controller, or no usable cache) does
// nothing.
type learnedCache struct {
	dir, key, about string
	warm            runner.Learned
}

// openLearned loads what earlier runs of this setting learned and warm-starts dr's controller
// with it. A drafter without a controller, a model with no files (synthetic) or an oracle has no
// cache. Problems are warnings: the cache only saves a cold start's rounds.
func openLearned(e *engine.Engine, draft string, dr runner.Drafter, opts sample.Options, stderr io.Writer) *learnedCache {
	if dr == nil || dr.Depth().Controller() == nil || e.Desc.Path == "" {
		return &learnedCache{}
	}
	paths := []string{e.Desc.Path}
	if draft != "oracle" {
		paths = append(paths, draft)
	}
	dir, err := depthcache.Dir()
	if err != nil {
		fmt.Fprintf(stderr, "warning: depth controller starts cold: %v\n", err)
		return &learnedCache{}
	}
	parts := []string{"draft " + draft, "kernel " + kernel.Path(), "threads " + strconv.Itoa(runtime.GOMAXPROCS(0)), "temperature " + strconv.FormatFloat(float64(opts.Temperature), 'g', -1, 32)}
	if opts.Race() {
		// Coupled verification accepts a little less than rejection sampling's at the same
		// temperature, so its rates are learned apart.
		parts = append(parts, "sampling coupled")
	}
	key, about, err := depthcache.Key(paths, parts...)
	if err != nil {
		fmt.Fprintf(stderr, "warning: depth controller starts cold: %v\n", err)
		return &learnedCache{}
	}
	c := &learnedCache{dir: dir, key: key, about: about}
	switch l, err := depthcache.Load(dir, key); {
	case err == nil:
		c.warm = l
		dr.Depth().Controller().Warm(l)
	case !errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "warning: depth controller starts cold (the file will be rewritten): %v\n", err)
	}
	return c
}

// fresh is p as a new process would start it: an adaptive policy gets a new controller warmed
// with what was loaded, a fixed one is itself.
func (c *learnedCache) fresh(p runner.Depth) runner.Depth {
	p = p.Fresh()
	if ctl := p.Controller(); ctl != nil {
		ctl.Warm(c.warm)
	}
	return p
}

// save writes what ctl learned for the next run (nothing without a cache or a controller).
func (c *learnedCache) save(ctl *runner.Controller, stderr io.Writer) {
	if c.key == "" || ctl == nil {
		return
	}
	if err := depthcache.Save(c.dir, c.key, c.about, ctl.Learned()); err != nil {
		fmt.Fprintf(stderr, "warning: depth controller's costs not kept: %v\n", err)
	}
}

// generate runs one request on seq, speculating with a session of dr (nil: plain decoding)
// under depth. It opens the session and closes it: a `dflash run` sequence serves one request.
func generate(ctx context.Context, seq *runner.Sequence, dr runner.Drafter, depth runner.Depth, req runner.Request, emit func(runner.Token) error) (runner.Stats, error) {
	if dr == nil {
		return runner.Generate(ctx, seq, req, emit)
	}
	s := dr.Open(seq.Capacity())
	req.Session, req.Depth = s, depth
	st, err := runner.Generate(ctx, seq, req, emit)
	if cerr := s.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close drafting session: %w", cerr)
	}
	return st, err
}

func greedyContinuation(e *engine.Engine, prompt []int, n, capacity int) ([]int, error) {
	var cont []int
	seq := runner.NewSequence(e.Target, capacity)
	_, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: prompt, MaxTokens: n, Stop: e.Stop},
		func(t runner.Token) error { cont = append(cont, t.ID); return nil })
	if err != nil {
		return nil, fmt.Errorf("oracle: plain greedy pass: %w", err)
	}
	return cont, nil
}
