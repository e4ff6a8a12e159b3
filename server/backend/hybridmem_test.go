package backend

import (
	"context"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
)

// TestSequenceBytesHybrid: for a tiny random Qwen3.5 target, SequenceBytes is exactly what one
// sequence allocates, measured from its buffers after a generation that fills them: the target
// cache (keys and values of the one full-attention layer, the three linear layers' live states),
// the runner's default number of checkpoints, and, with a draft of block 8 attached the way the
// server attaches it (runner.NewSequence and Drafter.Open at the context length), the snapshot
// slots its verify enables and the draft's own cache. The draft's heads (2 of 8 over 1) differ
// from the target's, so its cache is laid out for its own shape.
func TestSequenceBytesHybrid(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{})
	plain, err := engine.Describe(engine.Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	fit := dflash.ConfigFor(plain.Config, 1, 8)
	fit.Heads, fit.KVHeads, fit.HeadDim = 2, 1, 8
	ddir := t.TempDir()
	if err := dflash.WriteRandom(ddir, fit, 7, kernel.F32); err != nil {
		t.Fatal(err)
	}
	drafted, err := engine.Describe(engine.Options{Model: dir, Drafts: []string{ddir}})
	if err != nil {
		t.Fatal(err)
	}
	const ctxLen = 200
	prompt := make([]int, 60)
	for i := range prompt {
		prompt[i] = (7*i + 3) % plain.Config.Vocab
	}
	for _, d := range []*engine.Description{plain, drafted} {
		e, err := d.Load(transformer.KeepDType)
		if err != nil {
			t.Fatal(err)
		}
		seq := runner.NewSequence(e.Target, ctxLen)
		// Checkpoints every 8 rows, so that the prompt fills as many as the default keeps.
		seq.SetCheckpoints(runner.CheckpointPolicy{Every: 8, Max: runner.DefaultCheckpoints.Max})
		req := runner.Request{Prompt: prompt, MaxTokens: 20}
		var draftBytes int64
		if len(d.Drafts) > 0 {
			dr, err := e.OpenDraft(d.Drafts[0])
			if err != nil {
				t.Fatal(err)
			}
			s := dr.Drafter.Open(ctxLen)
			defer s.Close()
			req.Session, req.Depth = s, runner.Fixed(3)
			dc := s.(interface{ Cache() cache.Cache }).Cache()
			draftBytes = dc.(interface{ Bytes() int64 }).Bytes()
		}
		if _, err := runner.Generate(context.Background(), seq, req, func(runner.Token) error { return nil }); err != nil {
			t.Fatal(err)
		}
		h := seq.Cache().(*cache.Hybrid)
		if n := len(seq.Checkpoints()); n != runner.DefaultCheckpoints.Max {
			t.Fatalf("the sequence holds %d checkpoints, want the %d the test fills", n, runner.DefaultCheckpoints.Max)
		}
		if want := len(d.Drafts) > 0; (h.SnapshotRows() > 0) != want {
			t.Fatalf("snapshot rows %d with %d drafts", h.SnapshotRows(), len(d.Drafts))
		}
		var live int64
		for l := range h.Conv {
			live += 4 * int64(cap(h.Conv[l])+cap(h.State[l]))
		}
		kv := h.KV.(interface{ Bytes() int64 }).Bytes()
		got := kv + live + h.SnapshotBytes() + seq.CheckpointBytes() + draftBytes
		if want := SequenceBytes(d, ctxLen); got != want {
			t.Errorf("%d drafts: the sequence holds %d bytes (K/V %d, state %d, snapshots %d, checkpoints %d, draft %d), SequenceBytes says %d",
				len(d.Drafts), got, kv, live, h.SnapshotBytes(), seq.CheckpointBytes(), draftBytes, want)
		}
	}
}
