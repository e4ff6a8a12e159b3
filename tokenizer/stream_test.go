package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStreamEmojiSplit feeds the llama emoji U+1F999 (F0 9F A6 99) as four byte-fallback tokens
// of llama2.c's tokenizer (byte+3 each): nothing is emitted until the fourth byte completes it.
func TestStreamEmojiSplit(t *testing.T) {
	tok := tok512(t)
	s := NewStream(tok)
	ids := []int{0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x99 + 3}
	want := []string{"", "", "", "🦙"}
	for i, id := range ids {
		if got := s.Add(id); got != want[i] {
			t.Errorf("Add(byte %d) = %q, want %q", i, got, want[i])
		}
	}
	if got := s.Flush(); got != "" {
		t.Errorf("Flush = %q, want nothing left", got)
	}
}

// TestStreamQwen3Emoji: Qwen3 splits "🦙" into byte-level tokens; the stream emits every piece of
// text as valid UTF-8 and the emoji exactly once, whole, in one Add.
func TestStreamQwen3Emoji(t *testing.T) {
	tok := qwen3(t)
	text := "hi 🦙🦙 ok"
	ids := tok.Encode(text)
	s := NewStream(tok)
	var all strings.Builder
	whole := 0
	for _, id := range ids {
		out := s.Add(id)
		if !utf8.ValidString(out) {
			t.Errorf("Add(%d) = %q: invalid UTF-8 emitted", id, out)
		}
		whole += strings.Count(out, "🦙")
		all.WriteString(out)
	}
	all.WriteString(s.Flush())
	if all.String() != text || whole != 2 {
		t.Errorf("stream gave %q with %d whole emoji, want %q with 2", all.String(), whole, text)
	}
	split := false
	for _, id := range ids {
		if b := tok.TokenBytes(id); len(b) > 0 && !utf8.Valid(b) {
			split = true
		}
	}
	if !split {
		t.Error("no token split a character: the test no longer exercises holding back")
	}
}

// TestStreamInvalidBytes: bytes that can never complete a character are emitted at once, and
// Flush returns a dangling start byte; nothing is lost.
func TestStreamInvalidBytes(t *testing.T) {
	tok := tok512(t)
	tests := []struct {
		name  string
		bytes []byte
		adds  []string
		flush string
	}{
		{"lone continuation", []byte{0x80}, []string{"\x80"}, ""},
		{"0xFF", []byte{0xFF}, []string{"\xff"}, ""},
		{"start then ASCII", []byte{0xE4, 'A'}, []string{"", "\xe4A"}, ""},
		{"dangling start", []byte{'a', 0xE4, 0xB8}, []string{"a", "", ""}, "\xe4\xb8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(tok)
			for i, b := range tc.bytes {
				if got := s.Add(int(b) + 3); got != tc.adds[i] {
					t.Errorf("Add(byte %#x) = %q, want %q", b, got, tc.adds[i])
				}
			}
			if got := s.Flush(); got != tc.flush {
				t.Errorf("Flush = %q, want %q", got, tc.flush)
			}
		})
	}
}
