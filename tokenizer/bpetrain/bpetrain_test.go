package bpetrain

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

var specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"}

// storyText is a deterministic pseudo-story corpus: sentences drawn from a small vocabulary with
// capitals, punctuation, digits, newlines, non-ASCII words and an end-of-text marker between
// stories, so every pre-tokenizer branch is trained on.
func storyText(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	subj := []string{"Lily", "Ben", "the dog", "a little girl", "Tom", "the cat", "Zoë", "the bird"}
	verb := []string{"saw", "liked", "played with", "found", "wanted", "ran to", "smiled at", "shared"}
	obj := []string{"the ball", "a big tree", "the park", "her mom", "a red car", "the café", "his toy", "the sun"}
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("Once upon a time, ")
		for j := 0; j < 4; j++ {
			s := subj[rng.IntN(len(subj))]
			if j > 0 {
				s = strings.ToUpper(s[:1]) + s[1:]
			}
			b.WriteString(s + " " + verb[rng.IntN(len(verb))] + " " + obj[rng.IntN(len(obj))])
			switch rng.IntN(4) {
			case 0:
				b.WriteString("! ")
			case 1:
				b.WriteString(". They were 3 friends. ")
			default:
				b.WriteString(". ")
			}
		}
		b.WriteString("The end. 🙂\n\n<|endoftext|>")
	}
	return b.String()
}

func train(t testing.TB, text string, cfg Config) *Result {
	t.Helper()
	r, err := Train(strings.NewReader(text), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// load writes r (with tokenizer_config.json when it has <|endoftext|>) and reads it back.
func load(t testing.TB, r *Result) *tokenizer.BPE {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	if r.Vocab() > 0 && string(r.Token(0)) == "<|endoftext|>" {
		if err := r.WriteFiles(dir, "<|endoftext|>"); err != nil {
			t.Fatal(err)
		}
	} else {
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.LoadHF(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestClassic trains on Wikipedia's BPE example "aaabdaaabac", one pre-token (all letters).
// Pair counts: aa 4 (overlapping pairs all count), ab 2, bd da ba ac 1.
//  1. aa (4) -> "aa": a a a b d a a a b a c becomes aa a b d aa a b a c (left to right, no
//     overlap). Now (aa,a) 2, (a,b) 2, the rest 1.
//  2. The tie between (a,b) and (aa,a) goes to the smaller pair of ids: a is byte 97 < "aa" id
//     256, so ab -> "ab": aa ab d aa ab a c. Now (aa,ab) 2, the rest 1.
//  3. (aa,ab) -> "aaab": aaab d aaab a c. Every pair is now seen once, below MinFrequency 2.
//
// So there are 3 merges, ids 256, 257, 258, and the word encodes as aaab d aaab a c.
func TestClassic(t *testing.T) {
	r := train(t, "aaabdaaabac", Config{VocabSize: 1000})
	want := [][3]int{{'a', 'a', 256}, {'a', 'b', 257}, {256, 257, 258}}
	if r.Merges() != len(want) || r.Vocab() != 259 {
		t.Fatalf("merges %d vocab %d, want 3 and 259", r.Merges(), r.Vocab())
	}
	for i, m := range want {
		if a, b, id := r.Merge(i); a != m[0] || b != m[1] || id != m[2] {
			t.Errorf("merge %d = (%d %d)->%d, want (%d %d)->%d", i, a, b, id, m[0], m[1], m[2])
		}
	}
	if got := string(r.Token(258)); got != "aaab" {
		t.Errorf("token 258 = %q, want aaab", got)
	}
	tok := load(t, r)
	got := tok.Encode("aaabdaaabac")
	wantIDs := []int{258, 'd', 258, 'a', 'c'}
	if !slices.Equal(got, wantIDs) {
		t.Errorf("Encode = %v, want %v", got, wantIDs)
	}
}

func TestRoundTripAndVocab(t *testing.T) {
	text := storyText(300)
	const vocab = 360
	r := train(t, text, Config{VocabSize: vocab, Special: specials})
	tok := load(t, r)
	// Full vocabulary: the text supports 384 entries (124 merges past specials and bytes) before
	// no pair is seen twice, so 360 is reached exactly.
	if r.Vocab() != vocab || tok.Vocab() != vocab {
		t.Fatalf("vocab: result %d, loaded %d, want %d", r.Vocab(), tok.Vocab(), vocab)
	}
	for i, s := range specials {
		if got := tok.Encode("x" + s + "y"); len(got) != 3 || got[1] != i {
			t.Errorf("Encode(x%sy) = %v, want the special as id %d in the middle", s, got, i)
		}
		if !tok.IsSpecial(i) {
			t.Errorf("id %d not special", i)
		}
	}
	if eos := tok.EOS(); len(eos) == 0 || eos[0] != 0 || tok.BOS() != -1 || tok.AddBOS() {
		t.Errorf("EOS %v BOS %d AddBOS %v, want [0 ...] -1 false", eos, tok.BOS(), tok.AddBOS())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := strings.Split(text, "\n")
	cases = append(cases, "", " ", "  leading spaces", "tabs\tand\r\nCRLF\n\n\n", "日本語のテキスト",
		"emoji 👩‍👩‍👧 family", "invalid \xff\xfe utf8 \xc3", "e\u0301 not NFC", "it's THEY'RE we'll",
		"12345 digits 3.14", strings.Repeat(" ", 300)+"x", strings.Repeat("ab", 500))
	for i := 0; i < 200; i++ {
		b := make([]byte, rng.IntN(40))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("round trip %q -> %q", s, got)
		}
	}

	// The most frequent pre-token is common enough to be learned whole.
	counts := map[string]int{}
	for _, seg := range strings.Split(text, "<|endoftext|>") {
		splitQwen2(seg, func(w string) { counts[w]++ })
	}
	best := ""
	for w, n := range counts {
		if n > counts[best] || n == counts[best] && w < best {
			best = w
		}
	}
	if ids := tok.Encode(best); len(ids) != 1 {
		t.Errorf("most frequent word %q (%d times) encodes as %v, want one token", best, counts[best], ids)
	}
}

func TestChatTemplate(t *testing.T) {
	r := train(t, storyText(20), Config{VocabSize: 300, Special: specials})
	dir := t.TempDir()
	if err := r.WriteFiles(dir, "<|endoftext|>"); err != nil {
		t.Fatal(err)
	}
	cfg, err := chat.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Template == nil || cfg.EOSToken != "<|endoftext|>" || cfg.BOSToken != "" {
		t.Fatalf("config: template %v eos %q bos %q", cfg.Template != nil, cfg.EOSToken, cfg.BOSToken)
	}
	got, err := cfg.Template.Render([]chat.Message{{Role: "user", Content: "hi"}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("render = %q, want %q", got, want)
	}
	// Without the ChatML tokens there is no template; an eos outside the specials is refused.
	r2 := train(t, "abc abc", Config{VocabSize: 300, Special: []string{"<|endoftext|>"}})
	dir2 := t.TempDir()
	if err := r2.WriteFiles(dir2, "<|endoftext|>"); err != nil {
		t.Fatal(err)
	}
	if cfg2, err := chat.LoadConfig(dir2); err != nil || cfg2.Template != nil {
		t.Errorf("no ChatML tokens: template %v err %v, want none", cfg2 != nil && cfg2.Template != nil, err)
	}
	if err := r2.WriteFiles(dir2, "</s>"); err == nil {
		t.Error("WriteFiles with eos not a special token: no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Error(err)
	}
}

func TestDeterminism(t *testing.T) {
	text := storyText(200)
	var out [2]bytes.Buffer
	for i, threads := range []int{1, 4} {
		r := train(t, text, Config{VocabSize: 500, Special: specials, Threads: threads})
		if err := r.WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Error("two trainings (1 and 4 threads) wrote different tokenizer.json")
	}
}

// TestCompression: more merges cover longer pieces, so the same text takes fewer tokens.
func TestCompression(t *testing.T) {
	text := storyText(200)
	perToken := func(vocab int) float64 {
		tok := load(t, train(t, text, Config{VocabSize: vocab, Special: specials}))
		return float64(len(text)) / float64(len(tok.Encode(text)))
	}
	small, large := perToken(300), perToken(380)
	t.Logf("bytes/token: vocab 300 %.2f, vocab 380 %.2f", small, large)
	if large <= small {
		t.Errorf("vocab 380 gives %.2f bytes/token, not more than vocab 300's %.2f", large, small)
	}
}

func TestRunsOutOfPairs(t *testing.T) {
	// "ab ab": pre-tokens "ab" and " ab"; pairs (a,b) 2, ( ,a) 1. One merge, then nothing is
	// seen twice: the vocabulary stops at 256+1 however large VocabSize is.
	r := train(t, "ab ab", Config{VocabSize: 4096})
	if r.Vocab() != 257 || r.Merges() != 1 {
		t.Errorf("vocab %d merges %d, want 257 and 1", r.Vocab(), r.Merges())
	}
	// MinFrequency 1 lets once-seen pairs merge too: (a,b) -> "ab", then ( ,ab) -> " ab".
	r = train(t, "ab ab", Config{VocabSize: 4096, MinFrequency: 1})
	if r.Merges() != 2 {
		t.Errorf("MinFrequency 1: merges %d, want 2", r.Merges())
	}
	// Empty text: bytes only.
	if r := train(t, "", Config{VocabSize: 300, Special: specials}); r.Vocab() != 260 {
		t.Errorf("empty text vocab %d, want 260", r.Vocab())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"vocab below bytes+specials", Config{VocabSize: 257, Special: []string{"<a>", "<b>"}}},
		{"empty special", Config{VocabSize: 300, Special: []string{""}}},
		{"duplicate special", Config{VocabSize: 300, Special: []string{"<a>", "<a>"}}},
		{"special spelled like a byte", Config{VocabSize: 300, Special: []string{"Ġ"}}},
		{"special a single byte", Config{VocabSize: 300, Special: []string{"\n"}}},
		{"bad pattern", Config{VocabSize: 300, Pattern: "("}},
	} {
		if _, err := Train(strings.NewReader("abc"), c.cfg, nil); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// splitQwen2 is the splitter Train uses by default (NewSplitter cannot fail on a known pattern).
var splitQwen2, _ = tokenizer.NewSplitter(PatternQwen2)

// TestSplitMatchesRegex checks the hand-written PatternQwen2 matcher training splits with against
// the regex itself, on random mixes of the classes the pattern distinguishes.
func TestSplitMatchesRegex(t *testing.T) {
	re, err := tokenizer.NewSplitter(PatternQwen2 + "|$^") // a different string forces the regexp2 path
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "B", "é", "日", "1", "٣", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'LL", "!", ".", "\xff", "🙂", "\u00a0", "-"}
	inputs := []string{"Hello world's end!!\n\n  x", "a  \n b", "it's 2024.\r\n\r\nOK", "   ", "x   "}
	for i := 0; i < 500; i++ {
		var b strings.Builder
		for j := rng.IntN(12); j >= 0; j-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		inputs = append(inputs, b.String())
	}
	for _, s := range inputs {
		var got, want []string
		splitQwen2(s, func(w string) { got = append(got, w) })
		re(s, func(w string) { want = append(want, w) })
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("split %q = %q, regex gives %q", s, got, want)
		}
	}
}

// BenchmarkTrainTinyStories trains VocabSize 4096 on the first 1 MB of the lower-cased corpus
// and reports bytes per token on the validation text (lower-cased, as the model would see it).
func BenchmarkTrainTinyStories(b *testing.B) {
	corpus := shareddata.Path(b, "corpora/tinystories_4MB.txt")
	valPath := shareddata.Path(b, "corpora/tinystories_val_800K.txt")
	val, err := os.ReadFile(valPath)
	if err != nil {
		b.Fatal(err)
	}
	var r *Result
	for b.Loop() {
		f, err := os.Open(corpus)
		if err != nil {
			b.Fatal(err)
		}
		r, err = Train(f, Config{VocabSize: 4096, Special: specials, MaxBytes: 1 << 20}, nil)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	tok := load(b, r)
	lower := strings.ToLower(string(val))
	b.ReportMetric(float64(len(lower))/float64(len(tok.Encode(lower))), "valbytes/token")
	b.ReportMetric(float64(r.Merges()), "merges")
}

// naiveMerges is the textbook trainer the incremental one must agree with: every step recounts
// all pairs of all words from scratch and merges the most frequent (ties: smallest ids).
func naiveMerges(text string, vocab, minFreq int) [][3]int {
	counts := map[string]int{}
	splitQwen2(text, func(w string) { counts[w]++ })
	type wd struct {
		syms []int
		n    int
	}
	var words []wd
	for w, n := range counts {
		s := make([]int, len(w))
		for i := range s {
			s[i] = int(w[i])
		}
		words = append(words, wd{s, n})
	}
	var tokens []string
	byText := map[string]int{}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string([]byte{byte(b)}))
		byText[tokens[b]] = b
	}
	var merges [][3]int
	for len(tokens) < vocab {
		pc := map[[2]int]int{}
		for _, w := range words {
			for j := 0; j+1 < len(w.syms); j++ {
				pc[[2]int{w.syms[j], w.syms[j+1]}] += w.n
			}
		}
		best, bn := [2]int{}, 0
		for p, n := range pc {
			if n > bn || n == bn && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bn = p, n
			}
		}
		if bn < minFreq || bn == 0 {
			break
		}
		s := tokens[best[0]] + tokens[best[1]]
		id, ok := byText[s]
		if !ok {
			id = len(tokens)
			tokens = append(tokens, s)
			byText[s] = id
		}
		merges = append(merges, [3]int{best[0], best[1], id})
		for i := range words {
			var out []int
			w := words[i].syms
			for j := 0; j < len(w); j++ {
				if j+1 < len(w) && w[j] == best[0] && w[j+1] == best[1] {
					out = append(out, id)
					j++
				} else {
					out = append(out, w[j])
				}
			}
			words[i].syms = out
		}
	}
	return merges
}

// TestMatchesNaive compares the incremental trainer's merge sequence with naiveMerges on text
// with overlapping runs (aaaa, long whitespace) and tokens reachable by two merge paths.
func TestMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pieces := []string{"a", "aa", "aaa", "b", "ab", "ba", "abc", "c", " ", "   ", "\n", "\n\n", "x", "y", "xy", "yx", "!", "1"}
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	for _, c := range []struct {
		name  string
		text  string
		vocab int
	}{
		{"stories", storyText(100), 380},
		{"runs", b.String(), 700},
		{"classic", "aaabdaaabac", 300},
	} {
		r := train(t, c.text, Config{VocabSize: c.vocab})
		want := naiveMerges(c.text, c.vocab, 2)
		t.Logf("%s: %d merges, vocab %d", c.name, r.Merges(), r.Vocab())
		if r.Merges() != len(want) {
			t.Errorf("%s: %d merges, naive %d", c.name, r.Merges(), len(want))
		}
		for i := 0; i < min(r.Merges(), len(want)); i++ {
			if a, b, id := r.Merge(i); [3]int{a, b, id} != want[i] {
				t.Errorf("%s: merge %d = %v, naive %v", c.name, i, [3]int{a, b, id}, want[i])
				break
			}
		}
	}
}

// TestSpecialSpellingCollision: the special token "Ġhi" is how tokenizer.json spells the learned
// token " hi", so that merge is dropped rather than written as a second "Ġhi" vocab key. In
// " hi hi hi" the word " hi" has ( ,h) 3 and (h,i) 3; the tie goes to ( ,h) (space id 2+32 <
// h id 2+104), leaving ( h,i) 3, which would spell "Ġhi" and is dropped: one merge in all.
func TestSpecialSpellingCollision(t *testing.T) {
	var log bytes.Buffer
	r, err := Train(strings.NewReader(" hi hi hi"), Config{VocabSize: 300, Special: []string{"<|endoftext|>", "Ġhi"}}, &log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "bpetrain:") {
		t.Errorf("progress log %q", log.String())
	}
	for id := 2; id < r.Vocab(); id++ {
		if string(r.Token(id)) == " hi" {
			t.Errorf("token %d is \" hi\", spelled like special Ġhi", id)
		}
	}
	if a, b, _ := r.Merge(0); r.Merges() != 1 || a != 2+' ' || b != 2+'h' {
		t.Errorf("merges %d, first (%d %d), want 1 merge (34 106)", r.Merges(), a, b)
	}
	tok := load(t, r)
	for _, s := range []string{" hi hi", "Ġhi", "hi"} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("round trip %q -> %q", s, got)
		}
	}
}

// TestTinyStories trains on the first 1 MB of the lower-cased corpus: 1 and 2 threads give the
// same tokenizer.json (chunking after newlines does not change the words), the vocabulary is
// full (the corpus has far more than 3836 pairs seen twice), and the original-case validation
// text round-trips.
func TestTinyStories(t *testing.T) {
	corpus, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_4MB.txt"))
	if err != nil {
		t.Fatal(err)
	}
	val, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out [2]bytes.Buffer
	var r *Result
	for i, threads := range []int{1, 2} {
		r = train(t, string(corpus), Config{VocabSize: 4096, Special: specials, MaxBytes: 1 << 20, Threads: threads})
		if err := r.WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Error("1 and 2 threads wrote different tokenizer.json")
	}
	if r.Vocab() != 4096 || r.TrainingBytes() != 1<<20 {
		t.Errorf("vocab %d bytes %d, want 4096 and 1 MiB", r.Vocab(), r.TrainingBytes())
	}
	tok := load(t, r)
	if got := tok.Decode(tok.Encode(string(val))); got != string(val) {
		t.Error("validation text does not round-trip")
	}
}

// BenchmarkTrainTinyStories4MB trains VocabSize 4096 on the whole lower-cased corpus.
func BenchmarkTrainTinyStories4MB(b *testing.B) {
	corpus, err := os.ReadFile(shareddata.Path(b, "corpora/tinystories_4MB.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(corpus)))
	for b.Loop() {
		if _, err := Train(bytes.NewReader(corpus), Config{VocabSize: 4096, Special: specials}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
