// Package tokenizer owns the conversion between text and token ids: byte-level BPE read from a
// Hugging Face tokenizer.json (Qwen2/Qwen3, Llama-3, GPT-2), llama2.c's tokenizer.bin, and
// SentencePiece's tokenizer.model (BPE with byte fallback), plus a streaming decoder that emits text
// only once its UTF-8 characters are complete. Chat templates live in tokenizer/chat.
//
// It must never know about models, weights or sampling, never add BOS itself (callers ask AddBOS),
// and never panic on any text or id it is given: unknown ids decode to nothing, and every input
// string, valid UTF-8 or not, encodes to some ids.
package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Tokenizer turns text into token ids and back. Implementations are safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text without BOS; special and added tokens written in the text
	// (e.g. "<|im_end|>") are matched as single ids.
	Encode(text string) []int
	// Decode returns the bytes the ids stand for, as a string that may hold invalid UTF-8 when
	// the ids split a character: decoding never loses bytes.
	Decode(ids []int) string
	// TokenBytes returns the raw bytes a token stands for (a special token: its text), or nil for
	// an id outside the vocabulary.
	TokenBytes(id int) []byte
	// Vocab is one more than the largest id the tokenizer can produce.
	Vocab() int
	// TokenID looks a token up by its text (e.g. "<|im_end|>").
	TokenID(s string) (int, bool)
	// BOS is the beginning-of-sequence id, or -1 when the tokenizer has none.
	BOS() int
	// EOS lists the ids that end generation.
	EOS() []int
	// AddBOS says whether prompts start with BOS by default (llama2.c: yes; Qwen3: no).
	AddBOS() bool
}

// pieceDecoder is implemented by tokenizers whose decoding of a token depends on the token before
// it (SentencePiece-style: the dummy-prefix space is dropped after BOS). prev is -1 at the start
// of a Decode call and -2 when the text continues earlier text the decoder has not seen.
type pieceDecoder interface {
	decodePiece(prev, id int) []byte
}

// ErrNoTokenizer says a folder holds none of the tokenizer files Load understands.
var ErrNoTokenizer = errors.New("no tokenizer.json, tokenizer.model or tokenizer.bin")

// Load reads a tokenizer from a model folder (tokenizer.json, else tokenizer.model, else
// tokenizer.bin) or from a file path, choosing the format by name and content. A tokenizer.json
// whose model this package cannot run (e.g. a Metaspace/SentencePiece-style one) falls back to a
// tokenizer.model beside it.
func Load(path string) (Tokenizer, error) { return load(path, nil) }

// LoadWith is Load for a caller that has read the model folder's configuration already: a
// tokenizer.json takes its special-token facts from sp instead of the files beside it.
func LoadWith(path string, sp Specials) (Tokenizer, error) { return load(path, &sp) }

func load(path string, sp *Specials) (Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	if !st.IsDir() {
		return loadFile(path, sp)
	}
	var firstErr error
	for _, name := range []string{"tokenizer.json", "tokenizer.model", "tokenizer.bin"} {
		p := filepath.Join(path, name)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		t, err := loadFile(p, sp)
		if err == nil {
			return t, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("load tokenizer %s: %w", path, ErrNoTokenizer)
}

func loadFile(path string, sp *Specials) (Tokenizer, error) {
	switch {
	case filepath.Ext(path) == ".json" && sp != nil:
		return LoadHFWith(path, *sp)
	case filepath.Ext(path) == ".json":
		return LoadHF(path)
	case filepath.Ext(path) == ".model":
		return LoadSentencePiece(path)
	default:
		return LoadLlama2c(path)
	}
}

// decodeWith concatenates the pieces of ids, letting a pieceDecoder see each token's predecessor.
func decodeWith(t Tokenizer, ids []int) string {
	pd, _ := t.(pieceDecoder)
	var out []byte
	prev := -1
	for _, id := range ids {
		if pd != nil {
			out = append(out, pd.decodePiece(prev, id)...)
		} else {
			out = append(out, t.TokenBytes(id)...)
		}
		prev = id
	}
	return string(out)
}
