package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"unicode/utf8"
)

// SentencePiece piece types (sentencepiece_model.proto).
const (
	spmNormal      = 1
	spmUnknown     = 2
	spmControl     = 3
	spmUserDefined = 4
	spmUnused      = 5
	spmByte        = 6
)

// spmSpace is SentencePiece's whitespace marker, U+2581.
const spmSpace = "\u2581"

// SentencePiece is a BPE tokenizer.model (Llama-2 style): pieces with scores, byte fallback, the
// ▁ space marker and a dummy prefix. The normalizer's precompiled character map is not applied
// (Llama 2's is the identity); remove_extra_whitespaces is.
type SentencePiece struct {
	pieces  []string
	scores  []float32
	types   []int32
	merge   map[string]int // NORMAL and USER_DEFINED pieces: what merges may produce
	byText  map[string]int
	byteIDs [256]int

	specials     *trieNode // CONTROL and USER_DEFINED pieces, matched in raw text
	specialFirst [256]bool

	unk, bos, eos  int
	byteFallback   bool
	addDummyPrefix bool
	removeExtraWS  bool
	escapeWS       bool
	maxPiece       int // the longest piece's length in bytes, at least 1
}

// LoadSentencePiece reads a SentencePiece tokenizer.model (a serialized ModelProto).
func LoadSentencePiece(path string) (*SentencePiece, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t, err := ParseSentencePiece(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return t, nil
}

// ParseSentencePiece decodes a serialized ModelProto. Only BPE models are accepted: a unigram
// model needs Viterbi segmentation, which this package does not implement.
func ParseSentencePiece(data []byte) (*SentencePiece, error) {
	t := &SentencePiece{
		merge: map[string]int{}, byText: map[string]int{},
		unk: 0, bos: 1, eos: 2,
		addDummyPrefix: true, removeExtraWS: true, escapeWS: true,
		specials: &trieNode{id: -1},
	}
	modelType := int64(1) // UNIGRAM is the proto default
	err := walkProto(data, func(field int, wire int, v uint64, b []byte) error {
		switch {
		case field == 1 && wire == 2:
			piece, score, typ := "", float32(0), int32(spmNormal)
			err := walkProto(b, func(f, w int, v uint64, b []byte) error {
				switch {
				case f == 1 && w == 2:
					piece = string(b)
				case f == 2 && w == 5:
					score = math.Float32frombits(uint32(v))
				case f == 3 && w == 0:
					typ = int32(v)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("piece %d: %w", len(t.pieces), err)
			}
			t.pieces = append(t.pieces, piece)
			t.scores = append(t.scores, score)
			t.types = append(t.types, typ)
		case field == 2 && wire == 2:
			return walkProto(b, func(f, w int, v uint64, _ []byte) error {
				if w != 0 {
					return nil
				}
				switch f {
				case 3:
					modelType = int64(v)
				case 35:
					t.byteFallback = v != 0
				case 40:
					t.unk = int(int32(v))
				case 41:
					t.bos = int(int32(v))
				case 42:
					t.eos = int(int32(v))
				}
				return nil
			})
		case field == 3 && wire == 2:
			return walkProto(b, func(f, w int, v uint64, _ []byte) error {
				if w != 0 {
					return nil
				}
				switch f {
				case 3:
					t.addDummyPrefix = v != 0
				case 4:
					t.removeExtraWS = v != 0
				case 5:
					t.escapeWS = v != 0
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sentencepiece model: %w", err)
	}
	if modelType != 2 {
		return nil, fmt.Errorf("sentencepiece model type %d (want BPE=2): %w", modelType, ErrUnsupported)
	}
	if len(t.pieces) == 0 {
		return nil, errors.New("sentencepiece model: no pieces")
	}
	for i := range t.byteIDs {
		t.byteIDs[i] = -1
	}
	for id, p := range t.pieces {
		t.maxPiece = max(t.maxPiece, len(p), 1)
		if _, dup := t.byText[p]; !dup {
			t.byText[p] = id
		}
		switch t.types[id] {
		case spmNormal, spmUserDefined:
			if _, dup := t.merge[p]; !dup {
				t.merge[p] = id
			}
		case spmByte:
			if b, ok := bytePiece(p); ok {
				t.byteIDs[b] = id
			}
		}
		if (t.types[id] == spmControl || t.types[id] == spmUserDefined) && p != "" {
			t.specials.insert(p, id)
			t.specialFirst[p[0]] = true
		}
	}
	for _, id := range []*int{&t.unk, &t.bos, &t.eos} {
		if *id >= len(t.pieces) {
			*id = -1
		}
	}
	return t, nil
}

// walkProto calls fn for each field of a protobuf message: v holds varint and fixed values, b the
// bytes of length-delimited ones.
func walkProto(data []byte, fn func(field, wire int, v uint64, b []byte) error) error {
	for len(data) > 0 {
		key, n := binary.Uvarint(data)
		if n <= 0 {
			return errors.New("bad field key")
		}
		data = data[n:]
		field, wire := int(key>>3), int(key&7)
		var v uint64
		var b []byte
		switch wire {
		case 0:
			v, n = binary.Uvarint(data)
			if n <= 0 {
				return fmt.Errorf("field %d: bad varint", field)
			}
			data = data[n:]
		case 1:
			if len(data) < 8 {
				return fmt.Errorf("field %d: truncated fixed64", field)
			}
			v, data = binary.LittleEndian.Uint64(data), data[8:]
		case 2:
			l, n := binary.Uvarint(data)
			if n <= 0 || l > uint64(len(data)-n) {
				return fmt.Errorf("field %d: bad length", field)
			}
			b, data = data[n:n+int(l)], data[n+int(l):]
		case 5:
			if len(data) < 4 {
				return fmt.Errorf("field %d: truncated fixed32", field)
			}
			v, data = uint64(binary.LittleEndian.Uint32(data)), data[4:]
		default:
			return fmt.Errorf("field %d: unsupported wire type %d", field, wire)
		}
		if err := fn(field, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}

// Encode implements Tokenizer. CONTROL and USER_DEFINED pieces written in the text (e.g. "<s>")
// are matched first, longest first; each text fragment at the start or after such a piece gets the
// dummy prefix, as llama.cpp does.
func (t *SentencePiece) Encode(text string) []int {
	var out []int
	last, afterSpecial := 0, true
	for i := 0; i < len(text); {
		if !t.specialFirst[text[i]] {
			i++
			continue
		}
		id, n := t.specials.longest(text[i:])
		if n == 0 {
			i++
			continue
		}
		if i > last {
			out = t.encodeFragment(text[last:i], afterSpecial, out)
		}
		out = append(out, id)
		i += n
		// Text after a control token starts a new segment with its own dummy prefix (as Hugging
		// Face's legacy Llama tokenizer and llama.cpp do); a user-defined piece is ordinary text
		// to SentencePiece, so what follows it continues the same segment.
		last, afterSpecial = i, t.types[id] == spmControl
	}
	if last < len(text) {
		out = t.encodeFragment(text[last:], afterSpecial, out)
	}
	return out
}

func (t *SentencePiece) encodeFragment(s string, dummyPrefix bool, out []int) []int {
	if t.removeExtraWS {
		s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' }), " ")
	}
	if s == "" {
		return out
	}
	if t.addDummyPrefix && dummyPrefix {
		s = " " + s
	}
	if t.escapeWS {
		s = strings.ReplaceAll(s, " ", spmSpace)
	}
	// Each symbol's text is a span of s, so the merge buffer is s again.
	scoreMerge(len(s), len(s), func(add func(string, int)) {
		for i := 0; i < len(s); {
			_, w := utf8.DecodeRuneInString(s[i:])
			ch := s[i : i+w]
			id, ok := t.merge[ch]
			if !ok {
				id = -1
			}
			add(ch, id)
			i += w
		}
	}, func(p []byte) (int, float32, bool) {
		id, ok := t.merge[string(p)]
		if !ok {
			return 0, 0, false
		}
		return id, t.scores[id], true
	}, float32(math.Inf(-1)), func(text []byte, id int) {
		switch {
		case id >= 0:
			out = append(out, id)
		case t.byteFallback:
			for _, c := range text {
				if id := t.byteIDs[c]; id >= 0 {
					out = append(out, id)
				} else if t.unk >= 0 {
					out = append(out, t.unk)
				}
			}
		case t.unk >= 0:
			out = append(out, t.unk)
		}
	})
	return out
}

// Decode implements Tokenizer as SentencePiece does: ▁ is a space, byte pieces are their byte,
// control pieces print nothing, and the dummy-prefix space is dropped from the first piece (at the
// start or after BOS).
func (t *SentencePiece) Decode(ids []int) string { return decodeWith(t, ids) }

func (t *SentencePiece) decodePiece(prev, id int) []byte {
	if id < 0 || id >= len(t.pieces) || t.types[id] == spmControl {
		return nil
	}
	b := t.TokenBytes(id)
	if t.addDummyPrefix && (prev == -1 || prev == t.bos) && len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

// TokenBytes implements Tokenizer: ▁ becomes a space, a byte piece its byte, the unknown piece
// SentencePiece's " ⁇ ", control pieces their text.
func (t *SentencePiece) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.pieces) {
		return nil
	}
	p := t.pieces[id]
	switch t.types[id] {
	case spmByte:
		if b, ok := bytePiece(p); ok {
			return []byte{b}
		}
	case spmUnknown:
		return []byte(" \u2047 ")
	case spmControl:
		return []byte(p)
	}
	return []byte(strings.ReplaceAll(p, spmSpace, " "))
}

// Vocab implements Tokenizer.
func (t *SentencePiece) Vocab() int { return len(t.pieces) }

// TokenID implements Tokenizer: s is looked up as the piece is stored (with ▁ for spaces).
func (t *SentencePiece) TokenID(s string) (int, bool) {
	id, ok := t.byText[s]
	return id, ok
}

// BOS implements Tokenizer.
func (t *SentencePiece) BOS() int { return t.bos }

// EOS implements Tokenizer.
func (t *SentencePiece) EOS() []int {
	if t.eos < 0 {
		return nil
	}
	return []int{t.eos}
}

// AddBOS implements Tokenizer: Llama-2 prompts start with BOS.
func (t *SentencePiece) AddBOS() bool { return t.bos >= 0 }
