package tokenizer

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
)

var (
	qwenOnce sync.Once
	qwenTok  *BPE
	qwenErr  error
)

// qwen3 loads the shared Qwen3 tokenizer once per test binary (it takes ~1 s to parse).
func qwen3(tb testing.TB) *BPE {
	tb.Helper()
	p := shareddata.Path(tb, "tokenizers/qwen3/tokenizer.json")
	qwenOnce.Do(func() { qwenTok, qwenErr = LoadHF(p) })
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

// readVocabTests reads llama.cpp's tokenizer test pair: the .inp inputs are separated by lines
// "__ggml_vocab_test__" (the separator also ends the file), so each input is the text between
// "\n__ggml_vocab_test__\n" markers, keeping its own leading and trailing newlines; the .out has
// one line of ids per input (an empty line for the empty input).
func readVocabTests(t *testing.T, base string) ([]string, [][]int) {
	t.Helper()
	inp, err := os.ReadFile(shareddata.Path(t, base+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(shareddata.Path(t, base+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	body, ok := strings.CutSuffix(string(inp), sep)
	if !ok {
		t.Fatalf("%s.inp does not end with the separator", base)
	}
	inputs := strings.Split(body, sep)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(inputs) != len(lines) {
		t.Fatalf("%d inputs but %d expected-id lines", len(inputs), len(lines))
	}
	want := make([][]int, len(lines))
	for i, l := range lines {
		for _, f := range strings.Fields(l) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			want[i] = append(want[i], id)
		}
	}
	return inputs, want
}

// TestQwen2VocabCases checks all of llama.cpp's Qwen2 encoder cases (ids produced by HF's
// tokenizer), and that each decodes back to its input (all inputs are NFC already).
func TestQwen2VocabCases(t *testing.T) {
	tok := qwen3(t)
	inputs, want := readVocabTests(t, "tokenizer-tests/ggml-vocab-qwen2.gguf")
	if len(inputs) != 46 {
		t.Fatalf("%d cases, want 46", len(inputs))
	}
	for i, in := range inputs {
		got := tok.Encode(in)
		if !slices.Equal(got, want[i]) && !(len(got) == 0 && len(want[i]) == 0) {
			t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
		}
		if dec := tok.Decode(got); dec != in {
			t.Errorf("case %d: decode %q, want %q", i, dec, in)
		}
	}
}

func TestQwen3Specials(t *testing.T) {
	tok := qwen3(t)
	tests := []struct {
		name string
		text string
		want []int
	}{
		// <|im_start|>=151644, "user"=872, "\n"=198, "hi"=6023, <|im_end|>=151645.
		{"chat turn", "<|im_start|>user\nhi<|im_end|>", []int{151644, 872, 198, 6023, 151645}},
		// Non-special added tokens (<think>=151667) are matched too.
		{"think", "<think>\n</think>", []int{151667, 198, 151668}},
		// A broken marker is plain text: "<|im_end" is not a token, so it is split by BPE.
		{"partial marker", "<|im_end", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tok.Encode(tc.text)
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
			if slices.Contains(got, 151645) != strings.Contains(tc.text, "<|im_end|>") {
				t.Errorf("Encode(%q) = %v: <|im_end|> matched wrongly", tc.text, got)
			}
			if dec := tok.Decode(got); dec != tc.text {
				t.Errorf("Decode = %q, want %q", dec, tc.text)
			}
		})
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d, %v", id, ok)
	}
	// Raw text and tokenizer.json spelling name the same token: " the" is spelled "Ġthe".
	a, okA := tok.TokenID(" the")
	b, okB := tok.TokenID("Ġthe")
	if !okA || !okB || a != b {
		t.Errorf("TokenID(\" the\") = %d,%v; TokenID(\"Ġthe\") = %d,%v", a, okA, b, okB)
	}
	// Qwen3 has no BOS (bos_token null), is not prompted with one, and stops on <|im_end|>
	// (tokenizer_config eos_token) or <|endoftext|>.
	if tok.BOS() != -1 || tok.AddBOS() {
		t.Errorf("BOS = %d AddBOS = %v, want -1 false", tok.BOS(), tok.AddBOS())
	}
	if eos := tok.EOS(); !slices.Equal(eos, []int{151645, 151643}) {
		t.Errorf("EOS = %v, want [151645 151643]", eos)
	}
	// 151,643 vocabulary tokens plus 26 added ones.
	if tok.Vocab() != 151669 {
		t.Errorf("Vocab = %d, want 151669", tok.Vocab())
	}
	if !tok.IsSpecial(151644) || tok.IsSpecial(151667) {
		t.Error("IsSpecial: <|im_start|> is special, <think> is not")
	}
}

// TestQwen3Normalization: NFC folds a decomposed "e"+U+0301 into "é", so Decode(Encode(s)) is
// NFC(s), not s.
func TestQwen3Normalization(t *testing.T) {
	tok := qwen3(t)
	dec := tok.Decode(tok.Encode("cafe\u0301"))
	if dec != "caf\u00e9" {
		t.Errorf("round trip of decomposed text = %q, want NFC %q", dec, "caf\u00e9")
	}
}

// TestSplitKnownMatchesRegexp2 checks that the hand-written pre-tokenizers give exactly regexp2's
// matches for the same patterns, on text that exercises every alternative.
func TestSplitKnownMatchesRegexp2(t *testing.T) {
	texts := []string{
		"Hello world, it's 2024!  I'VE been   here\n\n\t  ok\r\n x",
		"   leading and trailing   ",
		"\n\n\n",
		" \n \n  a",
		"ab12345cd 6789 ½ ① x²",
		"don't 'S 'Re 'lL 'd' ''",
		"... !!! ??? ```\"\"\"\n\n",
		"\u00a0\u3000nbsp\u2028line",
		"\xff\xfe broken \xe2\x82 utf8",
		"Ελληνικά 中文字 🦙🦙 emoji",
		"tab\tsep\vvert\ffeed",
	}
	for _, pattern := range []string{PatternQwen2, patternLlama3, patternGPT2} {
		fast := knownSplitter(pattern)
		slow, err := regexSplitter(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			var a, b []string
			fast(s, func(w string) { a = append(a, w) })
			slow(s, func(w string) { b = append(b, w) })
			if !slices.Equal(a, b) {
				t.Errorf("pattern %.20q text %q:\nhand-written %q\nregexp2      %q", pattern, s, a, b)
			}
		}
	}
}

// TestBPEMergeOrder builds a tiny byte-level tokenizer to pin the merge rule: the lowest rank
// wins, and among equal ranks the leftmost pair merges first ("aaa" -> "aa"+"a", not "a"+"aa").
func TestBPEMergeOrder(t *testing.T) {
	dir := t.TempDir()
	js := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"aa":3,"bc":4,"abc":5,"Ġ":6,"aaa":7},
	  "merges":[["b","c"],"a a",["a","bc"]]},
	  "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
	  "decoder":{"type":"ByteLevel"},
	  "added_tokens":[{"id":8,"content":"<x>","special":true},{"id":9,"content":"<xy>","special":true}]}`
	if err := os.WriteFile(dir+"/tokenizer.json", []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want []int
	}{
		{"aaa", []int{3, 0}},             // "a a" twice in a row: the left pair merges first
		{"abc", []int{5}},                // "b c" (rank 0) before "a a"; then "a bc" (rank 2)
		{"aabc", []int{3, 4}},            // "b c" first, then "a a"; "a bc" has no "a" left of "bc"
		{"a<xy>b<x>", []int{0, 9, 1, 8}}, // longest added token first
		{"a a", []int{0, 6, 0}},          // GPT-2 split: "a", " a"; " a" is not a token
	}
	for _, tc := range tests {
		if got := tk.Encode(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestLoadFolder: a folder with tokenizer.json loads the BPE tokenizer; an empty folder is an
// error naming what is missing.
func TestLoadFolder(t *testing.T) {
	p := shareddata.Path(t, "tokenizers/qwen3")
	tk, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tk.(*BPE); !ok {
		t.Errorf("Load(%s) = %T, want *BPE", p, tk)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load(empty folder) succeeded")
	}
}

// BenchmarkEncodeQwen3 reports MB/s of Encode over the TinyStories validation text.
func BenchmarkEncodeQwen3(b *testing.B) {
	tok := qwen3(b)
	data, err := os.ReadFile(shareddata.Path(b, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		b.Fatal(err)
	}
	text := string(data)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
}

// TestBPESpecialsFromConfig: a Llama-3-style tokenizer.json whose post-processor template starts
// with <|begin_of_text|> gets that BOS and AddBOS; tokenizer_config.json names the EOS and
// generation_config.json adds more; ignore_merges takes a whole-word vocabulary hit directly.
func TestBPESpecialsFromConfig(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"tokenizer.json": `{"model":{"type":"BPE","ignore_merges":true,
		    "vocab":{"a":0,"b":1,"ab":2,"abb":3,"bb":4},"merges":["a b","b b"]},
		  "pre_tokenizer":{"type":"Sequence","pretokenizers":[
		    {"type":"Split","pattern":{"Regex":"` + strings.ReplaceAll(patternLlama3, `\`, `\\`) + `"},"behavior":"Isolated","invert":false},
		    {"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},
		  "post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel"},
		    {"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]}]},
		  "decoder":{"type":"ByteLevel"},
		  "added_tokens":[{"id":5,"content":"<|begin_of_text|>","special":true},
		    {"id":6,"content":"<|end_of_text|>","special":true},{"id":7,"content":"<|eot_id|>","special":true},
		    {"id":8,"content":"<|eom_id|>","special":true}]}`,
		"tokenizer_config.json":  `{"bos_token":"<|begin_of_text|>","eos_token":{"content":"<|eot_id|>"}}`,
		"generation_config.json": `{"eos_token_id":[7,8]}`,
	}
	for name, body := range files {
		if err := os.WriteFile(dir+"/"+name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.BOS() != 5 || !tk.AddBOS() {
		t.Errorf("BOS %d AddBOS %v, want 5 true", tk.BOS(), tk.AddBOS())
	}
	if s := tk.(*BPE).Suffix(); s != nil {
		t.Errorf("Suffix %v of a template that ends with the text, want none", s)
	}
	// eot (config), eom (generation_config), then end_of_text (a known terminator).
	if eos := tk.EOS(); !slices.Equal(eos, []int{7, 8, 6}) {
		t.Errorf("EOS %v, want [7 8 6]", eos)
	}
	// "abb" is in the vocabulary, so ignore_merges returns it whole; merging would give "ab"+"b"
	// ("a b" has the lower rank).
	if got := tk.Encode("abb"); !slices.Equal(got, []int{3}) {
		t.Errorf("Encode(abb) = %v, want [3]", got)
	}
	if got := tk.Encode("abbb"); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Encode(abbb) = %v, want [2 4]", got)
	}
}

// TestBPETemplateSuffix: a post-processor template that appends a special token after the text
// (Qwen3-Embedding's "$A <|endoftext|>") gives it as Suffix, and Encode still leaves it out.
func TestBPETemplateSuffix(t *testing.T) {
	dir := t.TempDir()
	tj := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},
	  "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":false},
	  "post_processor":{"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}}],
	    "pair":[],"special_tokens":{}},
	  "decoder":{"type":"ByteLevel"},
	  "added_tokens":[{"id":3,"content":"<|endoftext|>","special":true}]}`
	if err := os.WriteFile(dir+"/tokenizer.json", []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s := tk.(*BPE).Suffix(); !slices.Equal(s, []int{3}) {
		t.Errorf("Suffix %v, want [3]", s)
	}
	if got := tk.Encode("ab"); !slices.Equal(got, []int{2}) {
		t.Errorf("Encode(ab) = %v, want [2] (no suffix)", got)
	}
	if tk.AddBOS() {
		t.Error("a template that starts with the text adds no BOS")
	}
}
