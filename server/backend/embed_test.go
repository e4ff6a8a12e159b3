package backend_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/runner"
)

// TestEmbedLeavesTheSequence: an embedding between two generations of the same prompt (with a
// draft) leaves the sequence and the drafting session as they were: the second generation
// reuses the first's rows and gives the same tokens. The vector is runner.Embed's, mean-pooled
// (stories260K's folder names no pooling).
func TestEmbedLeavesTheSequence(t *testing.T) {
	m := loadStories(t, true)
	prompt, err := m.Tokenize("Once upon a time")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := generate(t, m, prompt, 20)
	v, err := m.Embed(context.Background(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := generate(t, m, prompt, 20)
	if !slices.Equal(first.ids, second.ids) || m.LastStats().Reused != len(prompt)-1 {
		t.Errorf("after an embedding: tokens %v (before %v), %d rows reused, want %d", second.ids, first.ids, m.LastStats().Reused, len(prompt)-1)
	}
	e, err := engine.Open(engine.Options{Model: shareddata.Path(t, storiesRel)})
	if err != nil {
		t.Fatal(err)
	}
	want, err := runner.Embed(context.Background(), e.Target, prompt, runner.PoolMean, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v, want) {
		t.Errorf("backend embedding differs from runner.Embed's mean")
	}
	if _, err := m.Embed(context.Background(), []int{1, 1 << 20}); err == nil {
		t.Error("a token outside the vocabulary was embedded")
	}
}
