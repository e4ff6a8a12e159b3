package tokenizer

import (
	"os"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
)

// TestMinTokens: on each tokenizer the bound stays at or below the real count on texts built to
// shrink under normalization or whitespace removal, and on ordinary prose it is a useful fraction
// of it (a bound of 0 would be correct and useless). The fraction is 1/K of the bytes, K the
// longest token: 7 bytes in tok512, but 128 in Qwen3 (runs of spaces and dashes), whose bound is
// about 1/31 of the real count on prose.
func TestMinTokens(t *testing.T) {
	story, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	prose := string(story[:20000])
	spm, err := LoadSentencePiece(writeSPM(t, testSPMPieces(), true, true))
	if err != nil {
		t.Fatal(err)
	}
	toks := []struct {
		name string
		tok  Tokenizer
	}{{"tok512", tok512(t)}, {"qwen3", qwen3(t)}, {"spm", spm}}
	hostile := []string{
		"",
		strings.Repeat("e\u0301", 500),           // NFC composes 3 bytes into the 2 of "é"
		strings.Repeat("\u212a", 500),            // the Kelvin sign: 3 bytes, NFC "K", 1 byte
		strings.Repeat("\u1100\u1161\u11a8", 99), // Hangul jamo: 9 bytes compose into 3
		"a" + strings.Repeat(" ", 3000) + "b",    // removed extra whitespace
		strings.Repeat("<|im_end|><s><tool>", 50),
		strings.Repeat("\xff\x80", 300),
	}
	for _, tc := range toks {
		for _, s := range hostile {
			if b, n := MinTokens(tc.tok, s), len(tc.tok.Encode(s)); b > n {
				t.Errorf("%s: MinTokens(%.30q) = %d > %d ids", tc.name, s, b, n)
			}
		}
		b, n := MinTokens(tc.tok, prose), len(tc.tok.Encode(prose))
		if b > n || b*40 < n {
			t.Errorf("%s: prose MinTokens %d, Encode %d ids: want a bound within 40x", tc.name, b, n)
		}
		t.Logf("%s: prose of %d bytes: bound %d, real %d ids", tc.name, len(prose), b, n)
	}
}
