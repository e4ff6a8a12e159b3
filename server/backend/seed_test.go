package backend_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/server"
)

// TestSeededRequestsReproduce: through the backend, as the server calls it, a seeded request at
// temperature 1 and top-p 0.9 gives the same tokens five times over on stories260K, plainly and
// with a DFlash draft whose adaptive controller learns from every request in between (on real
// wall time, which the seeded requests must not follow). The requests repeat the same prompt, so
// all but the first also reuse its cached rows.
func TestSeededRequestsReproduce(t *testing.T) {
	prompt := []int{1, 403, 407, 261, 378, 434, 267}
	opts := sample.Options{Temperature: 1, TopP: 0.9, RepeatPenalty: 1, PenaltyWindow: 64, Seed: 77}
	for _, withDraft := range []bool{false, true} {
		m := loadStories(t, withDraft)
		var want []int
		for run := range 5 {
			// An unseeded request between the seeded ones trains the controller differently each
			// time (its own seed and its own timings).
			if _, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 40,
				Options: sample.Options{Temperature: 1, TopP: 0.9, Seed: uint64(run)}}, func(server.Token) error { return nil }); err != nil {
				t.Fatal(err)
			}
			var c collected
			res, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 100, Options: opts, Seeded: true}, c.emit)
			if err != nil {
				t.Fatal(err)
			}
			if withDraft && res.Speculation.Drafted == 0 {
				t.Fatal("nothing was drafted: the draft case compared plain with plain")
			}
			if run == 0 {
				want = c.ids
				continue
			}
			if !slices.Equal(c.ids, want) {
				t.Fatalf("draft %v: seeded request %d differs:\n got %v\nwant %v", withDraft, run, c.ids, want)
			}
		}
	}
}

// TestCoupledRequestsIgnoreTheDraft: a coupled request (what the server makes of a seeded one by
// default) gives the same tokens from a model served with a draft as from one served without,
// though the drafted model's adaptive controller keeps choosing depths by wall time.
func TestCoupledRequestsIgnoreTheDraft(t *testing.T) {
	prompt := []int{1, 403, 407, 261, 378, 434, 267}
	opts := sample.Options{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1.1, PenaltyWindow: 64, Seed: 78, Coupled: true}
	var outs [2][]int
	for i, withDraft := range []bool{false, true} {
		m := loadStories(t, withDraft)
		var c collected
		res, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 100, Options: opts, Seeded: true}, c.emit)
		if err != nil {
			t.Fatal(err)
		}
		if withDraft && res.Speculation.Drafted == 0 {
			t.Fatal("nothing was drafted: the draft case compared plain with plain")
		}
		outs[i] = c.ids
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Fatalf("coupled output differs with the draft:\n got %v\nwant %v", outs[1], outs[0])
	}
}
