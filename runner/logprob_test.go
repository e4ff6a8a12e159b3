package runner_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// withLogprobs generates like generate and keeps every token's logprob and top alternatives.
func withLogprobs(t *testing.T, target model.Target, prompt []int, n, top int, opts sample.Options, d runner.Session, depth runner.Depth) []runner.Token {
	t.Helper()
	var out []runner.Token
	seq := runner.NewSequence(target, 512)
	req := runner.Request{Prompt: prompt, Options: opts, MaxTokens: n, Session: d, Depth: depth, Logprobs: true, TopLogprobs: top}
	if _, err := runner.Generate(context.Background(), seq, req, func(tok runner.Token) error { out = append(out, tok); return nil }); err != nil {
		t.Fatal(err)
	}
	if d != nil {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// directLogprobs scores out after prompt with one forward over the whole text on a fresh cache
// (every row's logits), the definition the runner's values must meet: row len(prompt)-1+i is the
// distribution out[i] was chosen from.
func directLogprobs(t *testing.T, target model.Target, prompt []int, out []runner.Token, top int) []runner.Token {
	t.Helper()
	text := slices.Clone(prompt)
	for _, tok := range out[:len(out)-1] {
		text = append(text, tok.ID)
	}
	res, err := target.Forward(target.NewCache(512), model.Request{Tokens: text, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	vocab := target.Config().Vocab
	want := make([]runner.Token, len(out))
	for i, tok := range out {
		row := res.Logits[(len(prompt)-1+i)*vocab : (len(prompt)+i)*vocab]
		want[i].ID = tok.ID
		want[i].Logprob, want[i].Top = sample.Logprobs(row, tok.ID, top, nil)
	}
	return want
}

// sameLogprobs fails unless got and want agree token by token, bitwise: a row of a forward does
// not depend on the other rows, so neither the draft nor a whole-text forward changes a bit.
func sameLogprobs(t *testing.T, what string, got, want []runner.Token) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tokens, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Logprob != w.Logprob || len(g.Top) != len(w.Top) {
			t.Fatalf("%s: token %d is %d logprob %v (%d alternatives), want %d logprob %v (%d)", what, i, g.ID, g.Logprob, len(g.Top), w.ID, w.Logprob, len(w.Top))
		}
		for k := range g.Top {
			if g.Top[k].ID != w.Top[k].ID || g.Top[k].Logprob != w.Top[k].Logprob {
				t.Fatalf("%s: token %d alternative %d is %v, want %v", what, i, k, g.Top[k], w.Top[k])
			}
		}
	}
}

// TestLogprobsDoNotDependOnSpeculation: greedy output's logprobs and top alternatives are the
// same with no draft, a random DFlash draft (mostly rejected: corrections) and an oracle (mostly
// accepted: drafts' rows), and equal the direct log-softmax of a whole-text forward. A sampled
// run's (its tokens differ with a draft) equal the direct computation for the tokens it chose.
func TestLogprobsDoNotDependOnSpeculation(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		const vocab, n, top = 97, 40, 5
		target := tinyQwen3(t, vocab, 11)
		prompt := []int{3, 14, 15, 92, 65}
		plain := withLogprobs(t, target, prompt, n, top, sample.Options{}, nil, runner.Depth{})
		if len(plain) != n {
			t.Fatalf("plain run emitted %d tokens, want %d", len(plain), n)
		}
		sameLogprobs(t, "plain vs direct", plain, directLogprobs(t, target, prompt, plain, top))
		for i, tok := range plain {
			// Greedy: the emitted token is the mode, the first alternative.
			if tok.Top[0].ID != tok.ID || tok.Top[0].Logprob != tok.Logprob {
				t.Fatalf("greedy token %d is %d (logprob %v) but the top alternative is %v", i, tok.ID, tok.Logprob, tok.Top[0])
			}
		}

		draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 4, kernel.F32)
		if err != nil {
			t.Fatal(err)
		}
		got := withLogprobs(t, target, prompt, n, top, sample.Options{}, runner.NewBlockSession(draft, 512), runner.Fixed(7))
		sameLogprobs(t, "random draft vs plain", got, plain)
		full := slices.Clone(prompt)
		for _, tok := range plain {
			full = append(full, tok.ID)
		}
		o := &runner.OracleDrafter{Tokens: full, Limit: 7, Vocab: vocab}
		sameLogprobs(t, "oracle vs plain", withLogprobs(t, target, prompt, n, top, sample.Options{}, o.Open(512), o.Depth()), plain)

		sampled := sample.Options{Temperature: 0.9, TopK: 20, Seed: 7}
		for _, d := range []runner.Session{nil, runner.NewBlockSession(draft, 512)} {
			got := withLogprobs(t, target, prompt, n, 0, sampled, d, runner.Fixed(7))
			sameLogprobs(t, "sampled vs direct", got, directLogprobs(t, target, prompt, got, 0))
		}
	})
}
