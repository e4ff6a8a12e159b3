package qwen35

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/model"
)

// TestHiddenIsWhatTheHeadReads: as for the transformer, Request.Hidden is the final-normed state
// the head multiplies, with or without logits, across chunks, through linear and full layers.
func TestHiddenIsWhatTheHeadReads(t *testing.T) {
	m, err := Synthetic(Config{
		Config: model.Config{Arch: ArchCausalLM, Layers: 2, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
			HeadDim: 16, Vocab: 40, MaxSeq: 256, RMSEps: 1e-6, RopeTheta: 1e7, BOS: -1},
		LayerTypes: []LayerType{Linear, Full},
		KeyHeads:   2, ValueHeads: 4, KeyDim: 8, ValueDim: 8, ConvKernel: 4, RotaryDim: 8,
	}, 5)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config()
	tokens := make([]int, 70)
	for i := range tokens {
		tokens[i] = (i * 11) % cfg.Vocab
	}
	res, err := m.Forward(m.NewCache(256), model.Request{Tokens: tokens, Logits: model.LogitsAll, Hidden: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hidden) != len(tokens)*cfg.Hidden {
		t.Fatalf("hidden of %d floats, want %d", len(res.Hidden), len(tokens)*cfg.Hidden)
	}
	hidden, logits := slices.Clone(res.Hidden), slices.Clone(res.Logits)
	y := make([]float32, len(tokens)*cfg.Vocab)
	m.Head().MatMul(y, hidden, len(tokens))
	if !slices.Equal(y, logits) {
		t.Fatal("head(hidden) differs from the forward's logits")
	}
	res, err = m.Forward(m.NewCache(256), model.Request{Tokens: tokens, Hidden: true})
	if err != nil || !slices.Equal(res.Hidden, hidden) {
		t.Fatalf("hidden without logits differs from hidden with them (%v)", err)
	}
}
