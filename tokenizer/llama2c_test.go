package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
)

func tok512(tb testing.TB) *Llama2c {
	tb.Helper()
	t, err := LoadLlama2c(shareddata.Path(tb, "stories260K/tok512.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func TestLlama2cEncode(t *testing.T) {
	tok := tok512(t)
	if tok.Vocab() != 512 || tok.BOS() != 1 || !slices.Equal(tok.EOS(), []int{2}) || !tok.AddBOS() {
		t.Fatalf("Vocab %d BOS %d EOS %v AddBOS %v, want 512 1 [2] true", tok.Vocab(), tok.BOS(), tok.EOS(), tok.AddBOS())
	}
	tests := []struct {
		name string
		text string
		want []int
	}{
		// The greedy run from BOS (numpy_ref_greedy64.json) starts 403 407 261 378 = " Once",
		// " upon", " a", " time"; the dummy-prefix space merges into " Once", and encoding the
		// prompt gives the same pieces.
		{"once", "Once upon a time", []int{403, 407, 261, 378}},
		{"empty", "", nil},
		// "中" is not a piece of this 512-token vocabulary: its UTF-8 bytes E4 B8 AD fall back to
		// <0xXX> = byte+3, after the lone dummy-prefix space " " (410), which nothing merges with.
		{"byte fallback", "中", []int{410, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}},
		// "é" (C3 A9) is piece 485: a multi-byte character is looked up whole.
		{"multibyte piece", "é", []int{410, 485}},
		// A newline is not a piece either: <0x0A> = 13.
		{"newline", "\n", []int{410, 13}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tok.Encode(tc.text)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
	// The second golden prompt round-trips through BOS-prefixed decoding.
	p := "Lily and Ben went to the park."
	ids := append([]int{1}, tok.Encode(p)...)
	if got := tok.Decode(ids); got != p {
		t.Errorf("Decode(BOS+Encode(%q)) = %q", p, got)
	}
}

// naiveLlama2cMerge is run.c's quadratic merge loop written out directly, to check the heap
// version against it.
func naiveLlama2cMerge(tok *Llama2c, ids []int) []int {
	ids = slices.Clone(ids)
	for {
		best, bestID, bestIdx := float32(llama2cFloor), -1, -1
		for i := 0; i+1 < len(ids); i++ {
			id, ok := tok.byPiece[tok.pieces[ids[i]]+tok.pieces[ids[i+1]]]
			if ok && tok.scores[id] > best {
				best, bestID, bestIdx = tok.scores[id], id, i
			}
		}
		if bestIdx < 0 {
			return ids
		}
		ids[bestIdx] = bestID
		ids = slices.Delete(ids, bestIdx+1, bestIdx+2)
	}
}

func TestLlama2cMatchesNaiveMerge(t *testing.T) {
	tok := tok512(t)
	data, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, story := range strings.SplitN(string(data), "\n\n", 40)[:39] {
		got := tok.Encode(story)
		// The unmerged symbols: the dummy prefix, then each character's piece or its bytes+3.
		start := []int{tok.byPiece[" "]}
		for _, r := range story {
			if id, ok := tok.byPiece[string(r)]; ok {
				start = append(start, id)
			} else {
				for _, c := range []byte(string(r)) {
					start = append(start, int(c)+3)
				}
			}
		}
		if want := naiveLlama2cMerge(tok, start); !slices.Equal(got, want) {
			t.Fatalf("story %.40q: heap merge %v\nnaive merge %v", story, got, want)
		}
	}
}

// TestLlama2cDecodeGolden decodes the reference greedy ids and checks them against run.c's
// printed text for the same (no-prompt, greedy) run.
func TestLlama2cDecodeGolden(t *testing.T) {
	tok := tok512(t)
	raw, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/numpy_ref_greedy64.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Greedy []int `json:"greedy_ids"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/greedy_noprompt_n256.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := tok.Decode(ref.Greedy)
	if !strings.HasPrefix(text, "Once upon a time, there was a little girl named Lily.") {
		t.Errorf("decode starts %q", text[:min(60, len(text))])
	}
	if !strings.HasPrefix(string(golden), text) {
		t.Errorf("decode of reference ids is not a prefix of run.c's output:\n%q\n%q", text, golden[:min(len(golden), len(text)+20)])
	}
	// Streaming the same ids gives the same text.
	s := NewStream(tok)
	var b strings.Builder
	for _, id := range ref.Greedy {
		b.WriteString(s.Add(id))
	}
	b.WriteString(s.Flush())
	if b.String() != text {
		t.Errorf("stream %q, Decode %q", b.String(), text)
	}
}

func TestLlama2cTokenBytes(t *testing.T) {
	tok := tok512(t)
	tests := []struct {
		id   int
		want string
	}{
		{13, "\n"},          // <0x0A>
		{403, " Once"},      // a merged piece
		{1, "\n<s>\n"},      // BOS: its stored text
		{-1, ""}, {512, ""}, // outside the vocabulary
	}
	for _, tc := range tests {
		if got := string(tok.TokenBytes(tc.id)); got != tc.want {
			t.Errorf("TokenBytes(%d) = %q, want %q", tc.id, got, tc.want)
		}
	}
	if id, ok := tok.TokenID("<s>"); !ok || id != 1 {
		t.Errorf("TokenID(<s>) = %d %v", id, ok)
	}
	// Without BOS first the dummy-prefix space stays, as run.c prints pieces mid-text.
	if got := tok.Decode([]int{403, 407}); got != " Once upon" {
		t.Errorf("Decode without BOS = %q", got)
	}
}

func TestLlama2cBadFiles(t *testing.T) {
	for _, data := range [][]byte{nil, {7, 0, 0, 0, 1, 2}, {7, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 'a'}} {
		if _, err := parseLlama2c(data); err == nil {
			t.Errorf("parse %v succeeded", data)
		}
	}
}

func BenchmarkEncodeLlama2c(b *testing.B) {
	tok := tok512(b)
	data, err := os.ReadFile(shareddata.Path(b, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		b.Fatal(err)
	}
	text := string(data[:100_000])
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

// TestLoadPaths: Load picks the format from a file's name, and from the files in a folder.
func TestLoadPaths(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/tok512.bin")
	if tk, err := Load(bin); err != nil {
		t.Fatal(err)
	} else if _, ok := tk.(*Llama2c); !ok {
		t.Errorf("Load(%s) = %T, want *Llama2c", bin, tk)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/tokenizer.bin", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if tk, err := Load(dir); err != nil {
		t.Fatal(err)
	} else if _, ok := tk.(*Llama2c); !ok {
		t.Errorf("Load(folder with tokenizer.bin) = %T, want *Llama2c", tk)
	}
	if _, err := Load(dir + "/missing"); err == nil {
		t.Error("Load(missing path) succeeded")
	}
}
