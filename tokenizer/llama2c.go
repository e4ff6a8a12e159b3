package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

// Llama2c is llama2.c's tokenizer.bin: pieces with scores, encoded and decoded exactly as run.c's
// encode and decode do. Ids 0, 1, 2 are <unk>, BOS, EOS; byte-fallback pieces "<0xXX>" sit at id
// byte+3.
type Llama2c struct {
	pieces   []string
	scores   []float32
	byPiece  map[string]int
	maxToken int
	maxPiece int // the longest piece's length in bytes, at least 1
}

const (
	llama2cBOS = 1
	llama2cEOS = 2
)

// llama2cFloor is run.c's initial best score: a merge must score above it to happen.
const llama2cFloor = -1e10

// LoadLlama2c reads a tokenizer.bin: int32 max_token_length, then per token a float32 score, an
// int32 length and the bytes, until the end of the file.
func LoadLlama2c(path string) (*Llama2c, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t, err := parseLlama2c(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return t, nil
}

func parseLlama2c(data []byte) (*Llama2c, error) {
	if len(data) < 4 {
		return nil, fmt.Errorf("llama2.c tokenizer: %d bytes, want a 4-byte header", len(data))
	}
	t := &Llama2c{maxToken: int(int32(binary.LittleEndian.Uint32(data))), byPiece: map[string]int{}}
	for off := 4; off < len(data); {
		if off+8 > len(data) {
			return nil, fmt.Errorf("llama2.c tokenizer: token %d: truncated header at byte %d", len(t.pieces), off)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		n := int(int32(binary.LittleEndian.Uint32(data[off+4:])))
		off += 8
		if n < 0 || off+n > len(data) {
			return nil, fmt.Errorf("llama2.c tokenizer: token %d: length %d past the end", len(t.pieces), n)
		}
		p := string(data[off : off+n])
		off += n
		// run.c's bsearch over a sorted vocabulary finds some match; with the unique pieces of real
		// tokenizers that is the only one, and keeping the first makes duplicates deterministic.
		if _, dup := t.byPiece[p]; !dup {
			t.byPiece[p] = len(t.pieces)
		}
		t.pieces = append(t.pieces, p)
		t.maxPiece = max(t.maxPiece, len(p), 1)
		t.scores = append(t.scores, score)
	}
	if len(t.pieces) < 3+256 {
		return nil, fmt.Errorf("llama2.c tokenizer: %d tokens, want at least <unk>, BOS, EOS and 256 byte pieces", len(t.pieces))
	}
	return t, nil
}

// Encode implements Tokenizer as run.c's encode without BOS/EOS: a dummy-prefix " " piece for
// non-empty text, each UTF-8 character looked up as a piece (its bytes as <0xXX> pieces when it is
// not one), then score merges. Unlike run.c, a NUL byte does not end the text: it is byte 0.
func (t *Llama2c) Encode(text string) []int {
	if text == "" {
		return nil
	}
	// Each input byte adds at most one symbol, the dummy prefix one more, and a symbol's text is a
	// piece.
	out := make([]int, 0, len(text)/4+1)
	scoreMerge(len(text)+1, mulSat(len(text)+1, t.maxPiece), func(add func(string, int)) {
		if id, ok := t.byPiece[" "]; ok {
			add(t.pieces[id], id)
		}
		start := 0
		for i := 0; i < len(text); i++ {
			// run.c groups a byte with the continuation bytes that follow it, at most 4 in all.
			if i+1 < len(text) && text[i+1]&0xC0 == 0x80 && i+1-start < 4 {
				continue
			}
			ch := text[start : i+1]
			if id, ok := t.byPiece[ch]; ok {
				add(t.pieces[id], id)
			} else {
				for j := 0; j < len(ch); j++ {
					add(t.pieces[int(ch[j])+3], int(ch[j])+3)
				}
			}
			start = i + 1
		}
	}, func(s []byte) (int, float32, bool) {
		id, ok := t.byPiece[string(s)]
		if !ok {
			return 0, 0, false
		}
		return id, t.scores[id], true
	}, llama2cFloor, func(_ []byte, id int) { out = append(out, id) })
	return out
}

// Decode implements Tokenizer as run.c prints tokens: a piece after BOS loses its leading space,
// <0xXX> pieces are their byte, and BOS and EOS print nothing.
func (t *Llama2c) Decode(ids []int) string { return decodeWith(t, ids) }

func (t *Llama2c) decodePiece(prev, id int) []byte {
	if id == llama2cBOS || id == llama2cEOS {
		return nil
	}
	b := t.TokenBytes(id)
	if prev == llama2cBOS && len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

// TokenBytes implements Tokenizer: a <0xXX> piece is its byte, any other piece its text.
func (t *Llama2c) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.pieces) {
		return nil
	}
	p := t.pieces[id]
	if b, ok := bytePiece(p); ok {
		return []byte{b}
	}
	return []byte(p)
}

// bytePiece parses a byte-fallback piece "<0xXX>".
func bytePiece(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(p[3])
	lo, ok2 := hexDigit(p[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Vocab implements Tokenizer.
func (t *Llama2c) Vocab() int { return len(t.pieces) }

// TokenID implements Tokenizer; "<unk>", "<s>" and "</s>" name ids 0, 1, 2 whatever their stored
// text (stories260K stores BOS as "\n<s>\n").
func (t *Llama2c) TokenID(s string) (int, bool) {
	if id, ok := t.byPiece[s]; ok {
		return id, true
	}
	switch s {
	case "<unk>":
		return 0, true
	case "<s>":
		return llama2cBOS, true
	case "</s>":
		return llama2cEOS, true
	}
	return 0, false
}

// Score returns a piece's merge score (0 for an id outside the vocabulary).
func (t *Llama2c) Score(id int) float32 {
	if id < 0 || id >= len(t.scores) {
		return 0
	}
	return t.scores[id]
}

// BOS implements Tokenizer.
func (t *Llama2c) BOS() int { return llama2cBOS }

// EOS implements Tokenizer.
func (t *Llama2c) EOS() []int { return []int{llama2cEOS} }

// AddBOS implements Tokenizer: llama2.c prompts start with BOS.
func (t *Llama2c) AddBOS() bool { return true }
