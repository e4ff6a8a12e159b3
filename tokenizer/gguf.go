package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
)

// ErrGGUFTokenizer is returned for a GGUF tokenizer (tokenizer.ggml.model or .pre) this package
// cannot run; the error names it.
var ErrGGUFTokenizer = errors.New("unsupported GGUF tokenizer")

// GGUF token types (llama.cpp's llama_token_type, stored in tokenizer.ggml.token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// ggufNFC is the normalizer of the families whose nfc is set, as a compact tokenizer.json entry.
const ggufNFC = `{"type":"NFC"}`

// The pre-tokenizer names llama.cpp writes in tokenizer.ggml.pre that this package splits as
// the Hugging Face tokenizer.json of the same family does.
var ggufPre = map[string]struct {
	pattern      string
	nfc          bool // Qwen2's tokenizer.json normalizes NFC first
	ignoreMerges bool // Llama 3's tokenizer.json takes whole-word vocabulary hits before merging
}{
	"qwen2":     {PatternQwen2, true, false},
	"llama-bpe": {patternLlama3, false, true},
	"gpt2":      {patternGPT2, false, false},
	"default":   {patternGPT2, false, false},
}

// FromGGUF builds the tokenizer a GGUF file's tokenizer.ggml.* metadata describes: model "gpt2"
// as byte-level BPE (tokens in ByteLevel spelling, merges, control and user-defined tokens matched
// in text, the split pattern named by .pre) and model "llama" as a SentencePiece-style score
// merge (the llama2.c tokenizer: pieces, scores, byte pieces <0xXX> at ids 3..258, BOS 1, EOS 2).
// Any other model or pre-tokenizer is refused by name.
func FromGGUF(g gguf.Tokenizer) (Tokenizer, error) {
	switch g.Model {
	case "gpt2":
		return bpeFromGGUF(g)
	case "llama":
		return llamaFromGGUF(g)
	}
	return nil, fmt.Errorf("tokenizer.ggml.model %q: %w (dflash runs gpt2 and llama)", g.Model, ErrGGUFTokenizer)
}

func tokenType(g gguf.Tokenizer, id int) int32 {
	if g.TokenTypes == nil {
		return TokenNormal
	}
	return g.TokenTypes[id]
}

func bpeFromGGUF(g gguf.Tokenizer) (*BPE, error) {
	pre := g.Pre
	if pre == "" {
		pre = "default"
	}
	p, ok := ggufPre[pre]
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.pre %q: %w (dflash splits %s)", g.Pre, ErrGGUFTokenizer, strings.Join(slices.Sorted(mapKeys(ggufPre)), ", "))
	}
	// The same road as a tokenizer.json: an hfFile in memory, so both readers share every rule.
	var f hfFile
	f.Model.Type = "BPE"
	f.Model.IgnoreMerges = p.ignoreMerges
	f.Model.Vocab = make(map[string]int, len(g.Tokens))
	for id, s := range g.Tokens {
		switch tokenType(g, id) {
		case TokenControl, TokenUserDefined:
			f.AddedTokens = append(f.AddedTokens, struct {
				ID      int    `json:"id"`
				Content string `json:"content"`
				Special bool   `json:"special"`
			}{id, s, tokenType(g, id) == TokenControl})
		case TokenUnused:
			// Padding rows of the embedding ("[PAD151669]"): never produced, never matched.
		default:
			if _, dup := f.Model.Vocab[s]; !dup {
				f.Model.Vocab[s] = id
			}
		}
	}
	f.Model.Merges = make([]json.RawMessage, len(g.Merges))
	for i, m := range g.Merges {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.ggml.merges[%d]: %w", i, err)
		}
		f.Model.Merges[i] = b
	}
	split, err := json.Marshal(map[string]any{
		"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": p.pattern}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel", "use_regex": false},
		},
	})
	if err != nil {
		return nil, err
	}
	f.PreTokenizer = split
	f.Decoder = json.RawMessage(`{"type":"ByteLevel"}`)
	if p.nfc {
		f.Normalizer = json.RawMessage(ggufNFC)
	}
	if g.Normalizer != "" {
		// Written by ToGGUF in place of what the pre-tokenizer implies (gguf.KeyNormalizer).
		f.Normalizer = json.RawMessage(g.Normalizer)
	}
	t, err := newBPE(&f)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	var sp Specials
	if g.BOS >= 0 {
		sp.BOSToken = g.Tokens[g.BOS]
	}
	if g.EOS >= 0 {
		sp.EOSIDs = []int{g.EOS}
	}
	sp.AddBOS = g.AddBOS
	if sp.AddBOS == nil {
		no := false // llama.cpp's default for gpt2 vocabularies
		sp.AddBOS = &no
	}
	t.readSpecials(&f, sp)
	if g.BOS >= 0 {
		t.bos = g.BOS // by id: a BOS that is a normal token is not found by TokenID's added map
		t.addBOS = *sp.AddBOS
	}
	return t, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func llamaFromGGUF(g gguf.Tokenizer) (*Llama2c, error) {
	if g.Scores == nil {
		return nil, fmt.Errorf("tokenizer.ggml.model \"llama\" without tokenizer.ggml.scores: %w", ErrGGUFTokenizer)
	}
	if (g.BOS >= 0 && g.BOS != llama2cBOS) || (g.EOS >= 0 && g.EOS != llama2cEOS) {
		return nil, fmt.Errorf("llama vocabulary with BOS %d and EOS %d: %w (dflash's SentencePiece-style tokenizer has BOS 1, EOS 2)", g.BOS, g.EOS, ErrGGUFTokenizer)
	}
	t := &Llama2c{byPiece: map[string]int{}}
	for id, s := range g.Tokens {
		p := strings.ReplaceAll(s, spmSpace, " ")
		if id >= 3 && id < 3+256 {
			if b, ok := bytePiece(p); !ok || int(b) != id-3 {
				return nil, fmt.Errorf("llama vocabulary: token %d is %q, want the byte piece <0x%02X>: %w", id, s, id-3, ErrGGUFTokenizer)
			}
		}
		if _, dup := t.byPiece[p]; !dup {
			t.byPiece[p] = id
		}
		t.pieces = append(t.pieces, p)
		t.maxToken = max(t.maxToken, len(p))
		t.maxPiece = max(t.maxPiece, len(p), 1)
	}
	if len(t.pieces) < 3+256 {
		return nil, fmt.Errorf("llama vocabulary of %d tokens, want at least <unk>, BOS, EOS and 256 byte pieces: %w", len(t.pieces), ErrGGUFTokenizer)
	}
	t.scores = slices.Clone(g.Scores)
	return t, nil
}

// ToGGUF is the tokenizer.ggml.* description of tok as llama.cpp writes it, for a converter:
// a BPE as model "gpt2" (pre-tokenizer named by its split pattern: qwen2, llama-bpe or gpt2),
// llama2.c's tokenizer as model "llama" (spaces spelled as SentencePiece's U+2581). vocab pads
// the token list to the model's embedding rows with unused "[PADn]" tokens, as llama.cpp does.
// Tokenizers with no GGUF spelling are refused. A BPE normalizer other than the one the
// pre-tokenizer name implies goes into Normalizer (gguf.KeyNormalizer), which only dflash reads.
func ToGGUF(tok Tokenizer, vocab int) (gguf.Tokenizer, error) {
	g := gguf.Tokenizer{BOS: tok.BOS(), EOS: -1, Unknown: -1, Padding: -1}
	if eos := tok.EOS(); len(eos) > 0 {
		g.EOS = eos[0]
	}
	addBOS := tok.AddBOS()
	g.AddBOS = &addBOS
	switch t := tok.(type) {
	case *BPE:
		g.Model = "gpt2"
		switch {
		case slices.Equal(t.patterns, []string{PatternQwen2}):
			g.Pre = "qwen2"
		case slices.Equal(t.patterns, []string{patternLlama3}):
			g.Pre = "llama-bpe"
		case slices.Equal(t.patterns, []string{patternGPT2}) && !t.prefixSpace:
			g.Pre = "gpt2"
		default:
			return gguf.Tokenizer{}, fmt.Errorf("tokenizer split patterns %q: %w (no GGUF pre-tokenizer name)", t.patterns, ErrGGUFTokenizer)
		}
		implied := ""
		if ggufPre[g.Pre].nfc {
			implied = ggufNFC
		}
		if string(t.normalizer) != implied {
			g.Normalizer = string(t.normalizer)
			if g.Normalizer == "" {
				// No normalizer where the name implies NFC: an explicit null overrides it.
				g.Normalizer = "null"
			}
		}
		n := max(vocab, len(t.tokens))
		g.Tokens = make([]string, n)
		g.TokenTypes = make([]int32, n)
		for s, id := range t.bySpelling {
			g.Tokens[id], g.TokenTypes[id] = s, TokenNormal
		}
		for s, id := range t.added {
			g.Tokens[id], g.TokenTypes[id] = s, TokenUserDefined
			if t.special[id] {
				g.TokenTypes[id] = TokenControl
			}
		}
		for id := range g.Tokens {
			if g.TokenTypes[id] == 0 {
				g.Tokens[id], g.TokenTypes[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
			}
		}
		type rankedMerge struct {
			rank int32
			a, b int
		}
		ms := make([]rankedMerge, 0, len(t.merges))
		for key, r := range t.merges {
			ms = append(ms, rankedMerge{r.rank, int(key >> 32), int(uint32(key))})
		}
		slices.SortFunc(ms, func(x, y rankedMerge) int { return int(x.rank) - int(y.rank) })
		g.Merges = make([]string, len(ms))
		for i, m := range ms {
			g.Merges[i] = g.Tokens[m.a] + " " + g.Tokens[m.b]
		}
		return g, nil
	case *Llama2c:
		g.Model, g.Unknown = "llama", 0
		g.Tokens = make([]string, len(t.pieces))
		g.TokenTypes = make([]int32, len(t.pieces))
		for id, p := range t.pieces {
			g.Tokens[id] = strings.ReplaceAll(p, " ", spmSpace)
			switch {
			case id == 0:
				g.TokenTypes[id] = TokenUnknown
			case id == llama2cBOS || id == llama2cEOS:
				g.TokenTypes[id] = TokenControl
			case id < 3+256:
				g.TokenTypes[id] = TokenByte
			default:
				g.TokenTypes[id] = TokenNormal
			}
		}
		g.Scores = slices.Clone(t.scores)
		return g, nil
	}
	return gguf.Tokenizer{}, fmt.Errorf("tokenizer %T: %w (no GGUF spelling)", tok, ErrGGUFTokenizer)
}
