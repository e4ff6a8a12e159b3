package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
)

// stories loads stories260K, its tokenizer and the held-out corpus, or skips.
func stories(t *testing.T) (model.Target, tokenizer.Tokenizer, string) {
	t.Helper()
	tg, err := transformer.LoadLlama2C(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(shareddata.Path(t, "stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return tg, tok, shareddata.Path(t, "corpora/tinystories_val_800K.txt")
}

// TestSampledData: continuations sampled at a mix of temperatures are reproducible for a seed,
// split the sequences across the temperatures, keep the greedy sequences exactly the greedy
// data's and make the sampled ones differ from them, and carry soft targets that are the
// target's top candidates in order (the greedy token is the first).
func TestSampledData(t *testing.T) {
	tg, tok, text := stories(t)
	ctx := context.Background()
	const k = 6
	opt := DataOptions{N: 8, Length: 40, Lower: true, Seed: 4, Temps: []float64{0, 1}, SoftTopK: k}
	a, err := GenerateTargetData(ctx, tg, tok, text, "", opt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateTargetData(ctx, tg, tok, text, "", opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same options and seed gave different data")
	}
	greedy, err := GenerateTargetData(ctx, tg, tok, text, "", DataOptions{N: 8, Length: 40, Lower: true, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if greedy.Sequences[0].SoftIDs != nil || greedy.SoftTopK != 0 {
		t.Error("greedy data without --soft-topk carries soft targets")
	}
	for i, s := range a.Sequences {
		g := greedy.Sequences[i]
		if want := float64(i % 2); s.Temp != want {
			t.Errorf("sequence %d sampled at %g, want %g", i, s.Temp, want)
		}
		if same := slices.Equal(s.Tokens, g.Tokens); same != (s.Temp == 0) {
			t.Errorf("sequence %d at temperature %g: equal to the greedy data %v", i, s.Temp, same)
		}
		if !slices.Equal(s.Tokens[:s.Start], g.Tokens[:g.Start]) {
			t.Errorf("sequence %d: the prompt differs from the greedy data's", i)
		}
		if n := (len(s.Tokens) - s.Start) * k; len(s.SoftIDs) != n || len(s.SoftP) != n {
			t.Fatalf("sequence %d: %d soft targets, want %d", i, len(s.SoftIDs), n)
		}
		for j := s.Start; j < len(s.Tokens); j++ {
			ids, p := s.SoftIDs[(j-s.Start)*k:(j-s.Start+1)*k], s.SoftP[(j-s.Start)*k:(j-s.Start+1)*k]
			var sum float64
			for c := range p {
				sum += float64(p[c])
				if c > 0 && p[c] > p[c-1] {
					t.Fatalf("sequence %d position %d: soft targets not descending: %v", i, j, p)
				}
			}
			if sum > 1+1e-5 || !(p[0] > 0) {
				t.Fatalf("sequence %d position %d: soft probabilities %v sum to %g", i, j, p, sum)
			}
			if s.Temp == 0 && int(ids[0]) != s.Tokens[j] {
				t.Fatalf("sequence %d position %d: greedy token %d is not the top soft target %d", i, j, s.Tokens[j], ids[0])
			}
		}
	}
	// The top soft target's probability is the target's softmax at temperature 1.
	s := a.Sequences[1]
	c := tg.NewCache(len(s.Tokens))
	res, err := tg.Forward(c, model.Request{Tokens: s.Tokens[:s.Start+3], Logits: model.LogitsLast})
	if err != nil {
		t.Fatal(err)
	}
	var z float64
	for _, v := range res.Logits {
		z += math.Exp(float64(v))
	}
	id := s.SoftIDs[3*k]
	if want := math.Exp(float64(res.Logits[id])) / z; math.Abs(float64(s.SoftP[3*k])-want) > 1e-6 {
		t.Errorf("soft probability of %d is %g, the target's softmax gives %g", id, s.SoftP[3*k], want)
	}
	// Another seed samples other continuations from the same prompts' stream of lines.
	opt.Seed = 5
	other, err := GenerateTargetData(ctx, tg, tok, text, "", opt)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(other.Sequences, a.Sequences) {
		t.Error("seeds 4 and 5 gave the same data")
	}
}

// TestDataCacheRecipe: a cache is reused for its own recipe, refused with the differing fields
// named for another, rebuilt when asked to, and a greedy cache written before recipes were
// recorded is still reused.
func TestDataCacheRecipe(t *testing.T) {
	tg, tok, text := stories(t)
	ctx := context.Background()
	cache := filepath.Join(t.TempDir(), "data.json")
	greedy := DataOptions{N: 4, Length: 24, Lower: true, Seed: 2}
	d, err := GenerateTargetData(ctx, tg, tok, text, cache, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if d.Recipe == nil || !d.Recipe.greedyOnly() {
		t.Fatalf("recipe %+v", d.Recipe)
	}
	sampled := greedy
	sampled.Temps, sampled.TopP, sampled.SoftTopK = []float64{0.8}, 0.95, 4
	_, err = GenerateTargetData(ctx, tg, tok, text, cache, sampled)
	var mm *DataMismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("another recipe: err %v, want a DataMismatchError", err)
	}
	for _, field := range []string{"temps [0] (cached) vs [0.8] (asked)", "top-p 1 (cached) vs 0.95", "soft top-k 0 (cached) vs 4"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("refusal %q does not name %q", err, field)
		}
	}
	if strings.Contains(err.Error(), "seed") {
		t.Errorf("refusal %q names a field that did not change", err)
	}
	sampled.Regenerate = true
	if _, err := GenerateTargetData(ctx, tg, tok, text, cache, sampled); err != nil {
		t.Fatal(err)
	}
	sampled.Regenerate = false
	st1, _ := os.Stat(cache)
	again, err := GenerateTargetData(ctx, tg, tok, text, cache, sampled)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(cache)
	if !st1.ModTime().Equal(st2.ModTime()) || again.SoftTopK != 4 || !slices.Equal(again.Recipe.Temps, []float64{0.8}) {
		t.Error("the rebuilt cache was not reused for its own recipe")
	}

	// A cache from before recipes: the greedy description alone, reused for the same greedy run.
	d.Recipe = nil
	if err := d.Save(cache); err != nil {
		t.Fatal(err)
	}
	old, err := GenerateTargetData(ctx, tg, tok, text, cache, greedy)
	if err != nil || old.Recipe != nil || old.Tokens() != d.Tokens() {
		t.Errorf("a greedy cache without a recipe was not reused: err %v", err)
	}
	if _, err := GenerateTargetData(ctx, tg, tok, text, cache, sampled); !errors.As(err, &mm) {
		t.Errorf("a cache without a recipe for a sampled run: err %v, want a DataMismatchError", err)
	}
}
