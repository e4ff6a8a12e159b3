package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// draftFlags say which drafter speculates for the target.
type draftFlags struct {
	draft  string
	depth  int
	stderr io.Writer // where the choice of --draft auto is told
}

func (d *draftFlags) register(fs *flag.FlagSet) {
	d.stderr = fs.Output()
	fs.StringVar(&d.draft, "draft", "", "DFlash or DFlash2 draft (a folder or a Hugging Face id) for speculative decoding, 'auto' (a fitting <target>-DFlash* draft in the hub cache), 'oracle' (drafts the target's own greedy continuation: the engine's ceiling), or 'none'")
	fs.IntVar(&d.depth, "depth", 0, "draft tokens per round, fixed (default: the drafter's own policy: the depth controller for DFlash, 7 for DFlash2, 15 for the oracle)")
}

// drafter builds the drafter for one run (nil: none), its depth policy fixed by --depth when
// given. The oracle needs the target's own greedy continuation of prompt, so it decodes it
// plainly first (greedy only: an oracle of a sampled run is no oracle). The caller opens and
// closes the sessions.
func (d *draftFlags) drafter(e *engine.Engine, prompt []int, opts sample.Options, n, capacity int) (runner.Drafter, error) {
	if d.depth < 0 {
		return nil, usagef("--depth %d: must be >= 0", d.depth)
	}
	var dr runner.Drafter
	switch d.draft {
	case "":
		return nil, nil
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
		limit := d.depth
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
	if d.depth > 0 {
		dr = runner.WithDepth(dr, runner.Fixed(d.depth))
	}
	return dr, nil
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
