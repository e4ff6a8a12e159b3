package transformer

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/model"
)

// TestHiddenIsWhatTheHeadReads: Request.Hidden returns every row's state after the final norm,
// the very rows the head multiplies (head(hidden) == logits bitwise), the same whether or not
// logits are asked, across chunk boundaries; and nothing when not asked.
func TestHiddenIsWhatTheHeadReads(t *testing.T) {
	cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 8, Vocab: 50, MaxSeq: 256, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1}
	m, err := Synthetic(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int, 150) // more than one nn.ChunkRows chunk
	for i := range tokens {
		tokens[i] = (i * 7) % cfg.Vocab
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
	res, err = m.Forward(m.NewCache(256), model.Request{Tokens: tokens, Logits: model.LogitsNone, Hidden: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Hidden, hidden) {
		t.Fatal("hidden without logits differs from hidden with them")
	}
	res, err = m.Forward(m.NewCache(256), model.Request{Tokens: tokens[:3], Logits: model.LogitsLast})
	if err != nil || res.Hidden != nil {
		t.Fatalf("hidden not asked: got %d floats, %v", len(res.Hidden), err)
	}
}
