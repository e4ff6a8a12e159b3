package train

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// charTok is a byte-per-token tokenizer over a fixed alphabet, id 0 being <|endoftext|>: enough
// for the trainer, which only needs Encode, TokenBytes and the special ids.
type charTok struct{ alphabet string }

func (c charTok) Encode(text string) []int {
	var ids []int
	for i := 0; i < len(text); i++ {
		if j := strings.IndexByte(c.alphabet, text[i]); j >= 0 {
			ids = append(ids, j+1)
		}
	}
	return ids
}

func (c charTok) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.Write(c.TokenBytes(id))
	}
	return b.String()
}

func (c charTok) TokenBytes(id int) []byte {
	switch {
	case id == 0:
		return []byte("<|endoftext|>")
	case id > 0 && id <= len(c.alphabet):
		return []byte{c.alphabet[id-1]}
	}
	return nil
}

func (c charTok) Vocab() int { return len(c.alphabet) + 1 }
func (c charTok) TokenID(s string) (int, bool) {
	if s == "<|endoftext|>" {
		return 0, true
	}
	if len(s) == 1 {
		if j := strings.IndexByte(c.alphabet, s[0]); j >= 0 {
			return j + 1, true
		}
	}
	return 0, false
}
func (c charTok) BOS() int     { return -1 }
func (c charTok) EOS() []int   { return []int{0} }
func (c charTok) AddBOS() bool { return false }

// tinyLM is a shape small enough for finite differences but with every feature on: two layers,
// grouped-query attention (4 heads over 2 kv heads), q/k norms, RoPE.
func tinyLM(t *testing.T, vocab int) TargetConfig {
	t.Helper()
	c, err := TargetConfig{Layers: 2, Hidden: 16, Heads: 4, KVHeads: 2, HeadDim: 8, Intermediate: 24,
		SeqLen: 7, RMSEps: 1e-5, InitStd: 0.5, Steps: 1, Threads: 1}.WithDefaults(vocab, 1)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// perturbNorms moves every norm weight off one, so a norm applied to the wrong rows or missing
// changes the outputs.
func perturbNorms(specs []spec, flat []float32, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, s := range specs {
		if !s.matrix {
			for i := s.off; i < s.off+s.n; i++ {
				flat[i] = 0.7 + 0.6*float32(rng.Float64())
			}
		}
	}
}

// The analytic gradient of the whole LM (every tensor: embedding/head, norms, q/k/v/o with
// q/k norms and RoPE, causal attention, SwiGLU) matches central finite differences of the loss.
// For each tensor we check the entry with the largest gradient and two random ones; the tolerance
// covers float32 rounding of a loss of ~15 nats divided by 2h.
func TestLMGradient(t *testing.T) {
	const V = 13
	c := tinyLM(t, V)
	tr := newLMTrainer(c, nil, nil)
	perturbNorms(tr.specs, tr.params, 3)
	tr.p.refresh()
	tokens := []int{1, 5, 2, 12, 7, 7, 3, 9}
	grad := make([]float32, len(tr.params))
	g := lmBind(tr.specs, grad, c.Layers)
	var w lmWork
	w.window(tr.p, g, c, tr.rp, tokens, 1, nil)
	loss := func() float64 {
		tr.p.refresh()
		var w2 lmWork
		return w2.window(tr.p, nil, c, tr.rp, tokens, 1, nil)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const h = 1e-2
	checked := 0
	for _, s := range tr.specs {
		best := s.off
		for i := s.off; i < s.off+s.n; i++ {
			if math.Abs(float64(grad[i])) > math.Abs(float64(grad[best])) {
				best = i
			}
		}
		for _, i := range []int{best, s.off + rng.IntN(s.n), s.off + rng.IntN(s.n)} {
			orig := tr.params[i]
			tr.params[i] = orig + h
			lp := loss()
			tr.params[i] = orig - h
			lm := loss()
			tr.params[i] = orig
			num := (lp - lm) / (2 * h)
			ana := float64(grad[i])
			if d := math.Abs(num - ana); d > 2e-3+0.03*math.Abs(ana) {
				t.Errorf("%s[%d]: analytic %.6f, finite differences %.6f", s.name, i-s.off, ana, num)
			}
			checked++
		}
	}
	tr.p.refresh()
	if checked != 3*len(tr.specs) {
		t.Fatalf("checked %d entries", checked)
	}
}

// writeTiny writes the trainer's current weights as a Hugging Face folder and loads it back
// with the engine's loader.
func writeTiny(t *testing.T, tr *lmTrainer, tok charTok) *transformer.Model {
	t.Helper()
	dir := t.TempDir()
	if err := writeTarget(dir, tr.cfg, tr.specs, tr.params, tok); err != nil {
		t.Fatal(err)
	}
	m, err := transformer.LoadHF(dir, transformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The training forward and the engine's inference forward (model/transformer on the written
// folder) are the same function: logits of every row agree to 1e-4. This is what makes the
// trained loss mean something for the model the engine runs.
func TestLMMatchesInference(t *testing.T) {
	tok := charTok{alphabet: "abcdefghijkl"}
	c := tinyLM(t, tok.Vocab())
	c.SeqLen = 40 // longer than the engine's chunk of 32 rows
	tr := newLMTrainer(c, nil, nil)
	perturbNorms(tr.specs, tr.params, 5)
	tr.p.refresh()
	m := writeTiny(t, tr, tok)
	if got := m.Config(); got.Arch != transformer.ArchQwen3 || !got.TiedEmbeddings || got.Layers != 2 || got.KVHeads != 2 {
		t.Fatalf("loaded config %+v", got)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	tokens := make([]int, c.SeqLen+1)
	for i := range tokens {
		tokens[i] = rng.IntN(tok.Vocab())
	}
	V := c.Vocab
	want := make([]float32, c.SeqLen*V)
	var w lmWork
	w.window(tr.p, nil, c, tr.rp, tokens, 1, want)
	cc := m.NewCache(c.SeqLen)
	res, err := m.Forward(cc, model.Request{Tokens: tokens[:c.SeqLen], Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, v := range res.Logits {
		worst = max(worst, math.Abs(float64(v-want[i])))
	}
	if worst > 1e-4 {
		t.Fatalf("training and inference logits differ by up to %g", worst)
	}
	t.Logf("max |logit difference| %.2g over %d rows", worst, c.SeqLen)
}

// A few seconds of training on a repeated sentence: the loss falls far below the uniform
// log(vocab), the written folder loads with the engine's loader, greedy decoding continues the
// sentence, and bits per byte on the same text is small.
func TestTrainTargetLearnsPattern(t *testing.T) {
	// One paragraph, so windows start every SeqLen tokens, at every phase of the sentence.
	const sentence = "the cat sat on the mat. "
	tok := charTok{alphabet: "the casonm.\n"}
	dir := t.TempDir()
	text := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat(sentence, 60)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "model")
	cfg := TargetConfig{Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, SeqLen: 32, Steps: 80, LR: 1e-2, BatchSeqs: 4, Seed: 1}
	var log bytes.Buffer
	res, err := TrainTarget(context.Background(), tok, text, cfg, out, &log)
	if err != nil {
		t.Fatal(err)
	}
	uniform := math.Log(float64(tok.Vocab()))
	if res.Loss > 0.25*uniform {
		t.Fatalf("final loss %.3f, want below a quarter of the uniform %.3f\n%s", res.Loss, uniform, log.String())
	}
	if !strings.Contains(log.String(), "step 80/80 loss") {
		t.Errorf("no final progress line in\n%s", log.String())
	}
	m, err := transformer.LoadHF(out, transformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("the cat s")
	got, err := Greedy(m, m.NewCache(64), prompt, 14)
	if err != nil {
		t.Fatal(err)
	}
	if s := tok.Decode(got); s != "the cat sat on the mat." {
		t.Errorf("greedy output %q, want %q", s, "the cat sat on the mat.")
	}
	// Windows of the trained length: positions past it were never trained.
	r, err := EvalBPB(m, tok, text, BPBOptions{Window: cfg.SeqLen})
	if err != nil {
		t.Fatal(err)
	}
	// One byte per token here, so bits per byte is the mean loss in bits: far below log2(13).
	if r.BitsPerByte <= 0 || r.BitsPerByte > 0.5 {
		t.Errorf("bits per byte %.3f, want in (0, 0.5]", r.BitsPerByte)
	}
}

// EvalBPB scores every token but the first with the context of its window: on a text of exactly
// one window its bits are the training forward's summed loss over ln 2.
func TestEvalBPBMatchesTrainingLoss(t *testing.T) {
	tok := charTok{alphabet: "abcdefghijkl"}
	c := tinyLM(t, tok.Vocab())
	c.SeqLen = 12
	tr := newLMTrainer(c, nil, nil)
	perturbNorms(tr.specs, tr.params, 11)
	tr.p.refresh()
	m := writeTiny(t, tr, tok)
	text := "abcabdlkjiggf"
	ids := tok.Encode(text)
	var w lmWork
	loss := w.window(tr.p, nil, c, tr.rp, ids, 1, nil)
	r, err := evalBPBText(m, tok, text, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	if r.Predicted != len(ids)-1 || r.Bytes != len(text) {
		t.Fatalf("predicted %d tokens of %d bytes, want %d of %d", r.Predicted, r.Bytes, len(ids)-1, len(text))
	}
	if want := loss / math.Ln2; math.Abs(r.Bits-want) > 1e-3 {
		t.Fatalf("bits %.5f, training loss gives %.5f", r.Bits, want)
	}
	// Shorter windows (overlapping by one token) still score every token once.
	r2, err := evalBPBText(m, tok, text, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Predicted != len(ids)-1 {
		t.Fatalf("windows of 4 scored %d tokens, want %d", r2.Predicted, len(ids)-1)
	}
}

// A run interrupted after step 3 and resumed from its checkpoint ends with bitwise the weights of
// an uninterrupted run; a checkpoint of another config is refused.
func TestTrainTargetResumeBitwise(t *testing.T) {
	tok := charTok{alphabet: "abcdefgh .\n"}
	dir := t.TempDir()
	text := filepath.Join(dir, "text.txt")
	var b strings.Builder
	rng := rand.New(rand.NewPCG(4, 4))
	for range 40 {
		for range 10 {
			b.WriteByte("abcdefgh ."[rng.IntN(10)])
		}
		b.WriteString("\n\n")
	}
	if err := os.WriteFile(text, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := TargetConfig{Layers: 1, Hidden: 16, Heads: 2, KVHeads: 1, SeqLen: 16, Steps: 6, BatchSeqs: 3,
		Threads: 2, CheckpointEvery: 2, ProgressEvery: 1, Seed: 5}
	full := filepath.Join(dir, "full")
	if _, err := TrainTarget(context.Background(), tok, text, cfg, full, nil); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, "part")
	ctx, cancel := context.WithCancel(context.Background())
	stopper := writerFunc(func(p []byte) (int, error) {
		if strings.HasPrefix(string(p), "step 3/") {
			cancel()
		}
		return len(p), nil
	})
	if _, err := TrainTarget(ctx, tok, text, cfg, part, stopper); err != context.Canceled {
		t.Fatalf("interrupted run returned %v, want context.Canceled", err)
	}
	res, err := TrainTarget(context.Background(), tok, text, cfg, part, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 3 {
		t.Fatalf("resumed at step %d, want 3", res.Resumed)
	}
	a, err := os.ReadFile(filepath.Join(full, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(filepath.Join(part, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, bb) {
		t.Fatal("resumed run's weights differ from the uninterrupted run's")
	}
	cfg.Hidden = 32
	if _, err := TrainTarget(context.Background(), tok, text, cfg, part, nil); err == nil || !strings.Contains(err.Error(), "written with config") {
		t.Fatalf("resume with another config: %v, want a refusal", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Windows start at 0 or at a paragraph start (a token after a newline) unless none lies within
// reach, step forward by at most SeqLen (so no token is skipped between windows) and fit the
// text.
func TestLMWindows(t *testing.T) {
	tok := charTok{alphabet: "ab\n"}
	rng := rand.New(rand.NewPCG(2, 3))
	for _, seqLen := range []int{3, 8, 30} {
		var b strings.Builder
		for range 50 {
			for range 1 + rng.IntN(20) {
				b.WriteByte("ab"[rng.IntN(2)])
			}
			b.WriteString("\n\n")
		}
		ids, starts := lmWindows(tok, b.String(), seqLen)
		if len(starts) == 0 || starts[0] != 0 {
			t.Fatalf("seq %d: starts %v", seqLen, starts)
		}
		for i, s := range starts {
			if s+seqLen+1 > len(ids) {
				t.Fatalf("seq %d: window at %d runs past %d tokens", seqLen, s, len(ids))
			}
			if i == 0 {
				continue
			}
			d := s - starts[i-1]
			if d <= 0 || d > seqLen {
				t.Fatalf("seq %d: start %d follows %d", seqLen, s, starts[i-1])
			}
			if d < seqLen && ids[s-1] != 3 {
				t.Fatalf("seq %d: start %d is neither a paragraph start nor %d past the previous", seqLen, s, seqLen)
			}
		}
		if last := starts[len(starts)-1]; len(ids)-(last+seqLen+1) > seqLen {
			t.Fatalf("seq %d: %d tokens left after the last window", seqLen, len(ids)-(last+seqLen+1))
		}
	}
}

// BenchmarkLMWindow is one forward and backward of a 256-token window at the default shape
// (6 layers, hidden 192); tokens/s of training is 256 / (ns/op) per thread.
func BenchmarkLMWindow(b *testing.B) {
	c, err := TargetConfig{Threads: 1}.WithDefaults(4096, 1)
	if err != nil {
		b.Fatal(err)
	}
	tr := newLMTrainer(c, nil, nil)
	rng := rand.New(rand.NewPCG(1, 1))
	tokens := make([]int, c.SeqLen+1)
	for i := range tokens {
		tokens[i] = rng.IntN(c.Vocab)
	}
	w := tr.workers[0]
	b.ResetTimer()
	for b.Loop() {
		w.w.window(tr.p, w.g, c, tr.rp, tokens, 1/float32(c.SeqLen), nil)
	}
	b.ReportMetric(float64(c.SeqLen*b.N)/b.Elapsed().Seconds(), "tok/s")
}
