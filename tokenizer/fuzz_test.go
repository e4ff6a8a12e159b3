package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// FuzzQwen3RoundTrip: for any bytes s that are already NFC (norm.NFC leaves them unchanged —
// invalid UTF-8 included, which NFC passes through), Decode(Encode(s)) == s, byte for byte. Text
// that is not NFC comes back NFC-normalized instead (TestQwen3Normalization), so the property is
// stated for NFC input only. Every id must lie inside the vocabulary.
func FuzzQwen3RoundTrip(f *testing.F) {
	tok := qwen3(f)
	for _, s := range []string{"", "Hello world", "<|im_start|>user\nhi<|im_end|>", "  \n\n\t x", "🦙\xff\xe4", "don't 123456"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		ids := tok.Encode(s)
		checkMinTokens(t, tok, s, len(ids))
		for _, id := range ids {
			if id < 0 || id >= tok.Vocab() {
				t.Fatalf("Encode(%q) produced id %d outside [0,%d)", s, id, tok.Vocab())
			}
		}
		if norm.NFC.String(s) != s {
			return
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	})
}

// FuzzLlama2cRoundTrip: for any bytes s, Decode([BOS] + Encode(s)) == s: the dummy-prefix space
// Encode adds is the one Decode drops after BOS, and byte fallback covers every byte.
func FuzzLlama2cRoundTrip(f *testing.F) {
	tok := tok512(f)
	for _, s := range []string{"", "Once upon a time", " leading space", "中\n🦙", "\x00\xff\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		ids := append([]int{tok.BOS()}, tok.Encode(s)...)
		checkMinTokens(t, tok, s, len(ids)-1)
		for _, id := range ids {
			if id < 0 || id >= tok.Vocab() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(BOS+Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	})
}

// FuzzSplitMatchesRegexp2: the hand-written pre-tokenizers cut any bytes exactly where regexp2
// running the same pattern does.
func FuzzSplitMatchesRegexp2(f *testing.F) {
	for _, s := range []string{"Hello world's 123", " \n\n  x\t\r\n", "\xff\xe4 'LL ½①"} {
		f.Add([]byte(s))
	}
	type pair struct{ fast, slow Splitter }
	var pairs []pair
	for _, p := range []string{PatternQwen2, patternLlama3, patternGPT2} {
		slow, err := regexSplitter(p)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{knownSplitter(p), slow})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		for i, p := range pairs {
			var a, b []string
			p.fast(s, func(w string) { a = append(a, w) })
			p.slow(s, func(w string) { b = append(b, w) })
			if !slices.Equal(a, b) {
				t.Fatalf("pattern %d text %q:\nhand-written %q\nregexp2      %q", i, s, a, b)
			}
		}
	})
}

// FuzzSentencePieceRoundTrip: with byte fallback every input encodes to in-range ids and, after
// BOS (which drops the dummy-prefix space again), decodes to exactly the input. The one exception
// is inherent to SentencePiece: U+2581 ("▁") is its space marker, so text that already holds it
// decodes with a space there; such inputs are skipped.
func FuzzSentencePieceRoundTrip(f *testing.F) {
	tok, err := LoadSentencePiece(writeSPM(f, testSPMPieces(), true, false))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "hello", " hello  world ", "中\n🦙", "\x00\xff\x80", "<tool>x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		if strings.Contains(s, "▁") {
			t.Skip("U+2581 is SentencePiece's space marker")
		}
		ids := append([]int{tok.BOS()}, tok.Encode(s)...)
		checkMinTokens(t, tok, s, len(ids)-1)
		for _, id := range ids {
			if id < 0 || id >= tok.Vocab() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(BOS+Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	})
}

// checkMinTokens: the cheap bound never exceeds the real count, or a server refusing by it would
// refuse a prompt that fits.
func checkMinTokens(t *testing.T, tok Tokenizer, s string, n int) {
	t.Helper()
	if b := MinTokens(tok, s); b > n {
		t.Fatalf("MinTokens(%q) = %d, but Encode gives %d ids", s, b, n)
	}
}
