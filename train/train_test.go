package train

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
)

func TestDefaultTaps(t *testing.T) {
	for _, c := range []struct {
		layers, n int
		want      []int
	}{
		{36, 5, []int{1, 9, 17, 25, 33}}, // DFLASH.md's Qwen3 example
		{28, 1, []int{14}},
		{5, 2, []int{1, 2}},
		{4, 3, []int{1, 2, 3}}, // the rule gives [1 1 1]; made ascending
	} {
		got := DefaultTaps(c.layers, c.n)
		if !slices.Equal(got, c.want) {
			t.Errorf("DefaultTaps(%d, %d) = %v, want %v", c.layers, c.n, got, c.want)
		}
	}
}

// randomData is sequences of a fixed chain t[i+1] = (5*t[i] + 3) mod vocab from a random start:
// the anchor alone determines the whole block, so a draft can learn it whatever the target.
func randomData(n, length, vocab int, seed uint64) *Data {
	rng := rand.New(rand.NewPCG(seed, 1))
	d := &Data{Source: "test"}
	for range n {
		toks := make([]int, length)
		toks[0] = rng.IntN(vocab)
		for i := 1; i < length; i++ {
			toks[i] = (5*toks[i-1] + 3) % vocab
		}
		d.Sequences = append(d.Sequences, Sequence{Tokens: toks, Start: 1})
	}
	return d
}

// cancelAt cancels a run once its progress line for step n has been written.
type cancelAt struct {
	n      string
	cancel func()
}

func (c *cancelAt) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "step "+c.n+"/") {
		c.cancel()
	}
	return len(p), nil
}

// TestResumeBitwise interrupts a run after step 7 and resumes it: the draft written at the end
// must equal, byte for byte, the one of an uninterrupted run with the same seed (two workers, so
// the gradient summation order is covered too).
func TestResumeBitwise(t *testing.T) {
	tg := tinyTarget(t)
	data := randomData(12, 40, 40, 5)
	cfg := DraftConfig{Layers: 2, BlockSize: 4, Steps: 12, BatchSeqs: 3, AnchorsPerSeq: 5, Seed: 9,
		Threads: 2, ProgressEvery: 1, CheckpointEvery: 5}
	full := t.TempDir()
	if _, err := TrainDraft(context.Background(), tg, data, cfg, full, nil); err != nil {
		t.Fatal(err)
	}
	part := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := TrainDraft(ctx, tg, data, cfg, part, &cancelAt{n: "7", cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: err %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(part, "model.safetensors")); err == nil {
		t.Fatal("an interrupted run wrote a final draft")
	}
	res, err := TrainDraft(context.Background(), tg, data, cfg, part, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 7 || res.Steps != 12 {
		t.Errorf("resumed at %d, ended at %d; want 7 and 12", res.Resumed, res.Steps)
	}
	a, err := os.ReadFile(filepath.Join(full, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(part, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("resumed run's weights differ from the uninterrupted run's")
	}
	// A different configuration must not silently continue from this checkpoint.
	other := cfg
	other.LR = 1e-2
	if _, err := TrainDraft(context.Background(), tg, data, other, part, nil); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("resume with another config: err %v, want a config mismatch", err)
	}
}

// TestTrainLearnsPattern trains on a deterministic token chain, which a draft can continue
// from the anchor: the loss must fall well below its start and the written folder must load through
// model/dflash.
func TestTrainLearnsPattern(t *testing.T) {
	tg := tinyTarget(t)
	data := randomData(40, 48, 40, 6)
	cfg := DraftConfig{Layers: 2, BlockSize: 4, Steps: 400, BatchSeqs: 4, AnchorsPerSeq: 8, Seed: 2,
		LR: 1e-2, ProgressEvery: 40}
	dir := t.TempDir()
	res, err := TrainDraft(context.Background(), tg, data, cfg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, last := res.Losses[0], res.Losses[len(res.Losses)-1]
	t.Logf("loss %.3f -> %.3f, acc %v", first, last, res.Acc[1:])
	// The synthetic target's head is N(0, 0.02), so even a perfect draft's logits stay flat:
	// the loss can only fall so far, while the argmax must become right at every position.
	if last > first-0.5 {
		t.Errorf("loss fell from %.3f only to %.3f", first, last)
	}
	for k := 1; k < cfg.BlockSize; k++ {
		if res.Acc[k] < 0.9 {
			t.Errorf("accuracy at block position %d is %.3f, want >= 0.9", k, res.Acc[k])
		}
	}
	if _, err := dflash.Load(dir, tg, dflash.Options{}); err != nil {
		t.Errorf("model/dflash cannot load the trained draft: %v", err)
	}
}

// greedyTau runs greedy speculative decoding of prompts with the draft in dir through the
// engine (runner.Generate with a drafting session at full depth) and returns Stats.Tau().
func greedyTau(t *testing.T, tg model.Target, dir string, prompts [][]int, n int) float64 {
	t.Helper()
	d, err := dflash.Load(dir, tg, dflash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all runner.Stats
	for _, p := range prompts {
		seq := runner.NewSequence(tg, len(p)+n+d.BlockSize())
		s := runner.NewBlockSession(d, len(p)+n+d.BlockSize())
		st, err := runner.Generate(context.Background(), seq, runner.Request{
			Prompt: p, Options: sample.Options{}, MaxTokens: n, Session: s,
			Depth: runner.Fixed(d.BlockSize() - 1),
		}, func(runner.Token) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		all.Add(st)
	}
	return all.Tau()
}

// TestStoriesDraftAccepts is the end-to-end check on a real target: distil a small draft for
// stories260K from its own continuations (cached: the second build must reuse the file), then
// the engine's greedy speculative decoding with the trained draft must accept more than with
// the untrained one on held-out prompts.
func TestStoriesDraftAccepts(t *testing.T) {
	ckpt := shareddata.Path(t, "stories260K/stories260K.bin")
	tok, err := tokenizer.Load(shareddata.Path(t, "stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	text := shareddata.Path(t, "corpora/tinystories_4MB.txt")
	val := shareddata.Path(t, "corpora/tinystories_val_800K.txt")
	tg, err := transformer.LoadLlama2C(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cache := filepath.Join(tmp, "data.json")
	opt := DataOptions{N: 60, Length: 64, Lower: true, Seed: 1}
	data, err := GenerateTargetData(context.Background(), tg, tok, text, cache, opt)
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(cache)
	again, err := GenerateTargetData(context.Background(), tg, tok, text, cache, opt)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(cache)
	if !st1.ModTime().Equal(st2.ModTime()) || again.Tokens() != data.Tokens() {
		t.Error("second data build did not reuse the cache file")
	}

	cfg := DraftConfig{Layers: 1, BlockSize: 8, Steps: 150, BatchSeqs: 4, AnchorsPerSeq: 12, Seed: 1, LR: 5e-3, ProgressEvery: 25}
	trained := filepath.Join(tmp, "trained")
	res, err := TrainDraft(context.Background(), tg, data, cfg, trained, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Losses[len(res.Losses)-1] >= res.Losses[0] {
		t.Errorf("loss did not fall: %v", res.Losses)
	}
	// The untrained draft: the same config's initial weights.
	full, _ := cfg.WithDefaults(tg.Config())
	tr, err := newTrainer(tg, full, data)
	if err != nil {
		t.Fatal(err)
	}
	untrained := filepath.Join(tmp, "untrained")
	if err := writeDraft(untrained, full, tg.Config(), tr.specs, tr.params); err != nil {
		t.Fatal(err)
	}
	prompts, err := Prompts(tok, val, DataOptions{N: 6, Lower: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	before := greedyTau(t, tg, untrained, prompts, 48)
	after := greedyTau(t, tg, trained, prompts, 48)
	t.Logf("losses %v; engine tau untrained %.3f, trained %.3f", res.Losses, before, after)
	if after <= before {
		t.Errorf("trained draft tau %.3f is not above the untrained %.3f", after, before)
	}
}

// TestForwardMatchesInference checks that the training forward is the engine's: for a real
// target and a trained-shape draft (random weights written and loaded back through
// model/dflash), the block probabilities of one anchor agree with softmax of
// dflash.Draft.Forward's logits for the same context rows and block.
func TestForwardMatchesInference(t *testing.T) {
	tg, err := transformer.LoadLlama2C(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	toks := make([]int, 60)
	toks[0] = 1
	for i := 1; i < len(toks); i++ {
		toks[i] = 3 + rng.IntN(500)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: 8, Seed: 5, Init: 3}.WithDefaults(tg.Config())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTrainer(tg, cfg, &Data{Sequences: []Sequence{{Tokens: toks, Start: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.params { // norms away from one so a misplaced norm shows
		if tr.params[i] == 1 {
			tr.params[i] = float32(0.7 + 0.6*rng.Float64())
		}
	}
	tr.p.refresh()
	dir := t.TempDir()
	if err := writeDraft(dir, cfg, tg.Config(), tr.specs, tr.params); err != nil {
		t.Fatal(err)
	}
	d, err := dflash.Load(dir, tg, dflash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	taps, err := tr.tapsOf(0, toks)
	if err != nil {
		t.Fatal(err)
	}
	const a = 37
	B := cfg.BlockSize
	w := tr.workers[0]
	var st stats
	st.reset(B)
	w.w.step(tr.p, nil, tr.fz, cfg, tr.rp, &example{tokens: toks, taps: taps, anchors: []int{a}}, 1, &st, nil)
	mine := w.w.logits[:(B-1)*512]

	block := []int{toks[a]}
	for range B - 1 {
		block = append(block, cfg.MaskID)
	}
	c := d.NewCache(a + B)
	logits, err := d.Forward(c, taps[:a*len(cfg.Taps)*64], a, block)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for k := 1; k < B; k++ {
		p := append([]float32(nil), logits[k*512:(k+1)*512]...)
		softmaxCE(p, 0)
		for j, v := range p {
			diff := float64(v - mine[(k-1)*512+j])
			worst = max(worst, diff*diff)
		}
	}
	if worst > 1e-8 {
		t.Errorf("training and inference block probabilities differ: max squared difference %.3g", worst)
	}
}

// TestRawTextData cuts text into BOS-led chunks of the requested length.
func TestRawTextData(t *testing.T) {
	tok, err := tokenizer.Load(shareddata.Path(t, "stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := RawTextData(tok, shareddata.Path(t, "corpora/tinystories_val_800K.txt"), DataOptions{N: 5, Length: 50, Lower: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sequences) != 5 {
		t.Fatalf("%d sequences, want 5", len(d.Sequences))
	}
	for i, s := range d.Sequences {
		if len(s.Tokens) != 50 || s.Tokens[0] != tok.BOS() || s.Start != 1 {
			t.Errorf("sequence %d: %d tokens, first %d, start %d; want 50, BOS %d, 1", i, len(s.Tokens), s.Tokens[0], s.Start, tok.BOS())
		}
	}
	if txt := tok.Decode(d.Sequences[0].Tokens[1:]); strings.ToLower(txt) != txt {
		t.Errorf("Lower did not lower-case: %q", txt)
	}
}
