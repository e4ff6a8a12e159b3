package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// protoBuf writes protobuf fields by hand, the way the ModelProto in a tokenizer.model is laid out.
type protoBuf []byte

func (p protoBuf) key(field, wire int) protoBuf {
	return binary.AppendUvarint(p, uint64(field)<<3|uint64(wire))
}
func (p protoBuf) varint(field int, v int64) protoBuf {
	return binary.AppendUvarint(p.key(field, 0), uint64(v))
}
func (p protoBuf) bytes(field int, b []byte) protoBuf {
	return append(binary.AppendUvarint(p.key(field, 2), uint64(len(b))), b...)
}
func (p protoBuf) float(field int, f float32) protoBuf {
	return binary.LittleEndian.AppendUint32(p.key(field, 5), math.Float32bits(f))
}

type testPiece struct {
	text  string
	score float32
	typ   int64
}

// testSPMPieces is a small Llama-2-style vocabulary: <unk>, <s>, </s>, the 256 byte pieces, then
// normal pieces whose scores fix the merge order: "lo" (-0.5) beats "ll" (-1), which beats "▁h"
// (-2), "el" (-3), "▁he" (-4).
func testSPMPieces() []testPiece {
	ps := []testPiece{{"<unk>", 0, spmUnknown}, {"<s>", 0, spmControl}, {"</s>", 0, spmControl}}
	for b := 0; b < 256; b++ {
		ps = append(ps, testPiece{fmt.Sprintf("<0x%02X>", b), 0, spmByte})
	}
	for _, p := range []testPiece{
		{"▁", -10, 1}, {"h", -10, 1}, {"e", -10, 1}, {"l", -10, 1}, {"o", -10, 1},
		{"lo", -0.5, 1}, {"ll", -1, 1}, {"▁h", -2, 1}, {"el", -3, 1}, {"▁he", -4, 1},
		{"<tool>", 0, spmUserDefined},
	} {
		ps = append(ps, p)
	}
	return ps
}

// writeSPM serializes a BPE ModelProto with byte fallback and the given normalizer flags.
func writeSPM(t testing.TB, pieces []testPiece, dummyPrefix, removeWS bool) string {
	t.Helper()
	var model protoBuf
	for _, p := range pieces {
		sp := protoBuf{}.bytes(1, []byte(p.text)).float(2, p.score).varint(3, p.typ)
		model = model.bytes(1, sp)
	}
	b2i := map[bool]int64{false: 0, true: 1}
	trainer := protoBuf{}.varint(3, 2).varint(35, 1).varint(40, 0).varint(41, 1).varint(42, 2).varint(43, -1)
	normalizer := protoBuf{}.bytes(1, []byte("identity")).varint(3, b2i[dummyPrefix]).varint(4, b2i[removeWS])
	model = model.bytes(2, trainer).bytes(3, normalizer)
	path := filepath.Join(t.TempDir(), "tokenizer.model")
	if err := os.WriteFile(path, model, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSentencePieceEncode(t *testing.T) {
	pieces := testSPMPieces()
	id := func(s string) int {
		for i, p := range pieces {
			if p.text == s {
				return i
			}
		}
		t.Fatalf("no piece %q", s)
		return -1
	}
	dir := filepath.Dir(writeSPM(t, pieces, true, false))
	tk, err := Load(dir) // a folder with only tokenizer.model
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := tk.(*SentencePiece)
	if !ok {
		t.Fatalf("Load = %T, want *SentencePiece", tk)
	}
	byteID := func(b byte) int { return 3 + int(b) }
	tests := []struct {
		name string
		in   string
		want []int
	}{
		// "▁hello": "lo" merges first (-0.5), then "▁h" (-2, "ll" is gone), then "el" (-3);
		// "▁he" never forms because "e" was taken by "el".
		{"merge order", "hello", []int{id("▁h"), id("el"), id("lo")}},
		// "i" is no piece: byte fallback <0x69>.
		{"byte fallback", "hi", []int{id("▁h"), byteID('i')}},
		// A multi-byte character with no piece falls back to its UTF-8 bytes.
		{"utf8 fallback", "é", []int{id("▁"), byteID(0xC3), byteID(0xA9)}},
		// Control pieces in the text are matched, and text after them gets the dummy prefix again.
		{"control in text", "<s>hello", []int{1, id("▁h"), id("el"), id("lo")}},
		// A user-defined piece is ordinary text to SentencePiece: "▁h<tool>h" has no second prefix.
		{"user-defined", "h<tool>h", []int{id("▁h"), id("<tool>"), id("h")}},
		// Spaces become ▁; with remove_extra_whitespaces off they are all kept.
		{"spaces", " h  h", []int{id("▁"), id("▁h"), id("▁"), id("▁h")}},
		{"empty", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tok.Encode(tc.in)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	// Decode drops control pieces and the dummy-prefix space, so plain text round-trips.
	for _, s := range []string{"hello", " hello  world", "hé\n🦙", "\xff"} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
		if got := tok.Decode(append([]int{tok.BOS()}, tok.Encode(s)...)); got != s {
			t.Errorf("Decode(BOS+Encode(%q)) = %q", s, got)
		}
	}
	if tok.BOS() != 1 || !slices.Equal(tok.EOS(), []int{2}) || !tok.AddBOS() {
		t.Errorf("BOS %d EOS %v AddBOS %v", tok.BOS(), tok.EOS(), tok.AddBOS())
	}
	if got := string(tok.TokenBytes(id("▁he"))); got != " he" {
		t.Errorf("TokenBytes(▁he) = %q", got)
	}
}

// TestSentencePieceRemoveExtraWhitespace: the SentencePiece default trims and collapses spaces.
func TestSentencePieceRemoveExtraWhitespace(t *testing.T) {
	pieces := testSPMPieces()
	tok, err := LoadSentencePiece(writeSPM(t, pieces, true, true))
	if err != nil {
		t.Fatal(err)
	}
	a, b := tok.Encode("  h   h  "), tok.Encode("h h")
	if !slices.Equal(a, b) {
		t.Errorf("Encode(\"  h   h  \") = %v, want as \"h h\" %v", a, b)
	}
}

func TestSentencePieceBadModels(t *testing.T) {
	unigram := protoBuf{}.bytes(1, protoBuf{}.bytes(1, []byte("a"))).bytes(2, protoBuf{}.varint(3, 1))
	tests := []struct {
		name string
		data []byte
	}{
		{"unigram", unigram},
		{"truncated", unigram[:len(unigram)-1]},
		{"no pieces", protoBuf{}.bytes(2, protoBuf{}.varint(3, 2))},
		{"group wire type", []byte{0x0b}},
	}
	for _, tc := range tests {
		if _, err := ParseSentencePiece(tc.data); err == nil {
			t.Errorf("%s: parse succeeded", tc.name)
		}
	}
}
