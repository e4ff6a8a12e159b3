package tokenizer

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveScoreMerge is run.c's quadratic loop written out directly, the oracle for scoreMerge: scan
// every adjacent pair, take the first one with the strictly highest score above floor, merge it,
// and scan again from the start.
func naiveScoreMerge(texts []string, ids []int, lookup func([]byte) (int, float32, bool), floor float32) ([]string, []int) {
	texts, ids = slices.Clone(texts), slices.Clone(ids)
	for {
		best, bestID, bestIdx := floor, -1, -1
		for i := 0; i+1 < len(texts); i++ {
			id, score, ok := lookup([]byte(texts[i] + texts[i+1]))
			if ok && score > best {
				best, bestID, bestIdx = score, id, i
			}
		}
		if bestIdx < 0 {
			return texts, ids
		}
		texts[bestIdx] += texts[bestIdx+1]
		ids[bestIdx] = bestID
		texts = slices.Delete(texts, bestIdx+1, bestIdx+2)
		ids = slices.Delete(ids, bestIdx+1, bestIdx+2)
	}
}

// heapScoreMerge runs scoreMerge and returns the surviving symbols' texts and ids.
func heapScoreMerge(texts []string, ids []int, lookup func([]byte) (int, float32, bool), floor float32) ([]string, []int) {
	var gotT []string
	var gotI []int
	bound := 0
	for _, s := range texts {
		bound += len(s)
	}
	scoreMerge(len(texts), bound, func(add func(string, int)) {
		for i := range texts {
			add(texts[i], ids[i])
		}
	}, lookup, floor, func(text []byte, id int) {
		gotT, gotI = append(gotT, string(text)), append(gotI, id)
	})
	return gotT, gotI
}

// tiedVocab is a vocabulary over the letters a, b, c for differential testing: every string of
// 2 to 5 letters is a piece with probability 1/2, scored from only three values so that equal
// scores (where leftmost-first decides) are the common case. seed picks the vocabulary.
func tiedVocab(seed uint64) map[string]float32 {
	v := map[string]float32{}
	var grow func(s string)
	grow = func(s string) {
		if len(s) >= 2 {
			h := fnv.New64a()
			fmt.Fprintf(h, "%d/%s", seed, s)
			x := h.Sum64()
			if x&1 == 0 {
				v[s] = -float32(x>>1%3) - 1
			}
		}
		if len(s) < 5 {
			for _, c := range "abc" {
				grow(s + string(c))
			}
		}
	}
	grow("")
	return v
}

// checkScoreMergeMatchesNaive encodes letters (bytes folded onto a, b, c, with 'x' as a symbol
// that is no piece and never merges) under a tied vocabulary, by scoreMerge and by the oracle.
func checkScoreMergeMatchesNaive(t *testing.T, seed uint64, data []byte) {
	t.Helper()
	vocab := tiedVocab(seed)
	var pieces []string
	index := map[string]int{}
	for p := range vocab {
		pieces = append(pieces, p)
	}
	slices.Sort(pieces)
	for i, p := range pieces {
		index[p] = i + 10
	}
	lookup := func(b []byte) (int, float32, bool) {
		id, ok := index[string(b)]
		return id, vocab[string(b)], ok
	}
	var texts []string
	var ids []int
	for _, b := range data {
		switch c := b % 4; c {
		case 3:
			texts, ids = append(texts, "x"), append(ids, -1)
		default:
			texts, ids = append(texts, string(rune('a'+c))), append(ids, int(c))
		}
	}
	wantT, wantI := naiveScoreMerge(texts, ids, lookup, -2.5)
	gotT, gotI := heapScoreMerge(texts, ids, lookup, -2.5)
	if !slices.Equal(gotT, wantT) || !slices.Equal(gotI, wantI) {
		t.Fatalf("seed %d input %q:\nscoreMerge %q %v\nnaive      %q %v", seed, texts, gotT, gotI, wantT, wantI)
	}
}

// TestScoreMergeMatchesNaiveRandom: on random letter strings under random tied vocabularies the
// heap merge gives exactly the oracle's symbols, ties included. The floor (-2.5) keeps the -3
// pieces from ever merging, as llama2.c's floor does for scores at or below it.
func TestScoreMergeMatchesNaiveRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 14))
	for i := range 300 {
		data := make([]byte, r.IntN(200))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		checkScoreMergeMatchesNaive(t, uint64(i%7), data)
	}
}

func FuzzScoreMergeMatchesNaive(f *testing.F) {
	f.Add(uint8(0), []byte("abcabcabc"))
	f.Add(uint8(3), []byte("aaaaaaaaaaaaaaaa"))
	f.Fuzz(func(t *testing.T, seed uint8, data []byte) {
		if len(data) > 400 {
			data = data[:400]
		}
		checkScoreMergeMatchesNaive(t, uint64(seed%16), data)
	})
}
