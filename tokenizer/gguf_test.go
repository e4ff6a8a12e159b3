package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/internal/shareddata"
)

// The Qwen3 tokenizer spelled as GGUF metadata and read back encodes llama.cpp's 46 Qwen2 cases
// to the ids HF gives, as the tokenizer.json does, with the same specials.
func TestGGUFRoundTripQwen3(t *testing.T) {
	hfTok := qwen3(t)
	const vocab = 151936 // Qwen3's embedding rows, more than the tokenizer's ids
	g, err := ToGGUF(hfTok, vocab)
	if err != nil {
		t.Fatal(err)
	}
	if g.Model != "gpt2" || g.Pre != "qwen2" || len(g.Tokens) != vocab || len(g.Merges) == 0 {
		t.Fatalf("model %q pre %q, %d tokens, %d merges", g.Model, g.Pre, len(g.Tokens), len(g.Merges))
	}
	if id, _ := hfTok.TokenID("<|im_end|>"); g.TokenTypes[id] != TokenControl {
		t.Errorf("<|im_end|> has token type %d, want control", g.TokenTypes[id])
	}
	if g.Tokens[vocab-1] != "[PAD151935]" || g.TokenTypes[vocab-1] != TokenUnused {
		t.Errorf("last row %q type %d, want an unused pad", g.Tokens[vocab-1], g.TokenTypes[vocab-1])
	}
	tok, err := FromGGUF(g)
	if err != nil {
		t.Fatal(err)
	}
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
	chat := "<|im_start|>user\nhi<think>\n</think><|im_end|>"
	if a, b := tok.Encode(chat), hfTok.Encode(chat); !slices.Equal(a, b) {
		t.Errorf("specials: GGUF %v, folder %v", a, b)
	}
	if tok.BOS() != hfTok.BOS() || tok.AddBOS() != hfTok.AddBOS() || !slices.Contains(tok.EOS(), hfTok.EOS()[0]) {
		t.Errorf("BOS %d add %v EOS %v, folder BOS %d add %v EOS %v", tok.BOS(), tok.AddBOS(), tok.EOS(), hfTok.BOS(), hfTok.AddBOS(), hfTok.EOS())
	}
}

// llama2.c's tokenizer spelled as a GGUF "llama" vocabulary (U+2581 spaces, byte and control
// types) and read back encodes and decodes as the tokenizer.bin does.
func TestGGUFRoundTripLlama2c(t *testing.T) {
	bin, err := LoadLlama2c(shareddata.Path(t, "stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ToGGUF(bin, 512)
	if err != nil {
		t.Fatal(err)
	}
	if g.Model != "llama" || g.TokenTypes[1] != TokenControl || g.TokenTypes[3+'a'] != TokenByte || g.Unknown != 0 {
		t.Fatalf("model %q, types %v", g.Model, g.TokenTypes[:5])
	}
	for _, s := range g.Tokens {
		if strings.Contains(s, " ") {
			t.Fatalf("token %q keeps a plain space; GGUF spells it U+2581", s)
		}
	}
	tok, err := FromGGUF(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Once upon a time", "Lily and Ben went to the park.", "", " x\n\ny ", "naïve 日本 🙂"} {
		a, b := tok.Encode(s), bin.Encode(s)
		if !slices.Equal(a, b) {
			t.Errorf("%q: GGUF %v, tokenizer.bin %v", s, a, b)
		}
		if x, y := tok.Decode(append([]int{1}, a...)), bin.Decode(append([]int{1}, b...)); x != y {
			t.Errorf("%q: decode %q vs %q", s, x, y)
		}
	}
	if tok.BOS() != 1 || !tok.AddBOS() || !slices.Equal(tok.EOS(), []int{2}) {
		t.Errorf("BOS %d add %v EOS %v", tok.BOS(), tok.AddBOS(), tok.EOS())
	}
}

func TestGGUFTokenizerRefusals(t *testing.T) {
	for _, c := range []struct {
		g    gguf.Tokenizer
		want string
	}{
		{gguf.Tokenizer{Model: "bert", Tokens: []string{"a"}, BOS: -1, EOS: -1}, `"bert"`},
		{gguf.Tokenizer{Model: "gpt2", Pre: "deepseek-llm", Tokens: []string{"a"}, BOS: -1, EOS: -1}, `"deepseek-llm"`},
		{gguf.Tokenizer{Model: "llama", Tokens: []string{"a"}, BOS: -1, EOS: -1}, "scores"},
	} {
		_, err := FromGGUF(c.g)
		if !errors.Is(err, ErrGGUFTokenizer) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s: error %v, want ErrGGUFTokenizer naming %s", c.g.Model, c.g.Pre, err, c.want)
		}
	}
}
