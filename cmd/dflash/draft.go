package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// draftFlags say which drafter speculates for the target.
type draftFlags struct {
	draft string
	depth int
}

func (d *draftFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.draft, "draft", "", "DFlash or DFlash2 draft folder for speculative decoding, 'oracle' (drafts the target's own greedy continuation: the engine's ceiling), or 'none'")
	fs.IntVar(&d.depth, "depth", 0, "draft tokens per round, fixed (default: chosen each round by the depth controller)")
}

// open builds the drafter for one run. The oracle needs the target's own greedy continuation of
// prompt, so it decodes it plainly first (greedy only: an oracle of a sampled run is no oracle).
func (d *draftFlags) open(e *engine.Engine, prompt []int, opts sample.Options, n, capacity int) (runner.Drafter, *runner.Depth, error) {
	if d.depth < 0 {
		return nil, nil, usagef("--depth %d: must be >= 0", d.depth)
	}
	depth := &runner.Depth{Fixed: d.depth}
	switch d.draft {
	case "":
		return nil, nil, nil
	case "oracle":
		if prompt == nil {
			return nil, nil, usagef("--draft oracle needs a fixed prompt (not --chat)")
		}
		if !opts.Greedy() {
			return nil, nil, usagef("--draft oracle drafts the greedy continuation: use --temp 0")
		}
		cont, err := greedyContinuation(e, prompt, n, capacity)
		if err != nil {
			return nil, nil, err
		}
		limit := d.depth
		if limit == 0 {
			limit = 15
		}
		return &runner.OracleDrafter{Tokens: append(append([]int(nil), prompt...), cont...), Depth: limit, Vocab: e.Target.Config().Vocab}, depth, nil
	}
	dr, err := e.LoadDraft(d.draft)
	if err != nil {
		return nil, nil, err
	}
	return dr.NewSession(capacity), depth, nil
}

func greedyContinuation(e *engine.Engine, prompt []int, n, capacity int) ([]int, error) {
	var cont []int
	seq := runner.NewSequence(e.Target, capacity)
	_, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: prompt, MaxTokens: n, Stop: e.Stop},
		func(t int) error { cont = append(cont, t); return nil })
	if err != nil {
		return nil, fmt.Errorf("oracle: plain greedy pass: %w", err)
	}
	return cont, nil
}
