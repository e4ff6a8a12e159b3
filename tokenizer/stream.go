package tokenizer

import "unicode/utf8"

// Stream decodes ids one at a time, as they are committed, into text. It holds back the bytes of
// a UTF-8 character that later tokens may still complete, so a character split across tokens is
// emitted once, whole. Bytes that can never become valid UTF-8 are emitted as they are: a Stream
// loses nothing, and the concatenation of everything Add and Flush return equals Decode of the ids
// (for SentencePiece-style tokenizers: of the ids preceded by text the stream has not seen, see
// Add).
type Stream struct {
	t       Tokenizer
	pd      pieceDecoder
	prev    int
	pending []byte
}

// NewStream returns a Stream over t.
func NewStream(t Tokenizer) *Stream {
	pd, _ := t.(pieceDecoder)
	return &Stream{t: t, pd: pd, prev: -2}
}

// Add appends the token id and returns the text completed so far that was not returned before.
// A Stream assumes it continues earlier text, so a SentencePiece dummy-prefix space is dropped
// only right after a BOS passed through the stream.
func (s *Stream) Add(id int) string {
	if s.pd != nil {
		s.pending = append(s.pending, s.pd.decodePiece(s.prev, id)...)
	} else {
		s.pending = append(s.pending, s.t.TokenBytes(id)...)
	}
	s.prev = id
	n := completePrefix(s.pending)
	if n == 0 {
		return ""
	}
	out := string(s.pending[:n])
	s.pending = append(s.pending[:0], s.pending[n:]...)
	return out
}

// Flush returns the bytes held back (an incomplete character at the end of the text).
func (s *Stream) Flush() string {
	out := string(s.pending)
	s.pending = s.pending[:0]
	return out
}

// completePrefix returns how many leading bytes of b can be emitted: all of b except a trailing
// start of a multi-byte character that is still missing continuation bytes.
func completePrefix(b []byte) int {
	// A character is at most 4 bytes, so only a start byte among the last 3 can be incomplete.
	for back := 1; back <= 3 && back <= len(b); back++ {
		c := b[len(b)-back]
		if c < 0x80 {
			return len(b)
		}
		if c&0xC0 == 0x80 {
			continue // continuation byte: look further back for its start
		}
		need := 0
		switch {
		case c&0xE0 == 0xC0:
			need = 2
		case c&0xF0 == 0xE0:
			need = 3
		case c&0xF8 == 0xF0:
			need = 4
		default:
			return len(b) // not a start byte: never completes
		}
		if need <= back {
			return len(b)
		}
		// Hold back only if what is there can still grow into a valid character; a start byte
		// followed by bytes that already make it invalid is emitted now.
		if utf8.FullRune(b[len(b)-back:]) {
			return len(b)
		}
		return len(b) - back
	}
	return len(b)
}
