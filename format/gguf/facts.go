package gguf

import (
	"errors"
	"fmt"
	"math"
)

// ErrArchitecture is returned for a general.architecture this package has no key map for.
var ErrArchitecture = errors.New("unsupported architecture")

// DefaultRopeBase is the RoPE base llama.cpp assumes when {arch}.rope.freq_base is absent.
const DefaultRopeBase = 10000

// Hyperparams are the dimensions and constants of a Qwen3 or Llama GGUF, read from its
// {arch}.* keys and tensor infos. They are facts about the file, not a model config: the engine
// decides what to build from them.
type Hyperparams struct {
	Arch        string  // general.architecture: "qwen3" or "llama"
	Layers      int     // {arch}.block_count
	Embedding   int     // {arch}.embedding_length
	FeedForward int     // {arch}.feed_forward_length
	Heads       int     // {arch}.attention.head_count
	KVHeads     int     // {arch}.attention.head_count_kv, else Heads
	KeyLength   int     // {arch}.attention.key_length, else Embedding/Heads
	ValueLength int     // {arch}.attention.value_length, else KeyLength
	Context     int     // {arch}.context_length
	Vocab       int     // {arch}.vocab_size, else the token list's length, else token_embd's rows
	RopeBase    float64 // {arch}.rope.freq_base, else DefaultRopeBase
	RMSEps      float64 // {arch}.attention.layer_norm_rms_epsilon

	// TiedOutput: the file has no output.weight, so the output head is token_embd.weight.
	TiedOutput bool
	// QKNorm: blk.0.attn_q_norm.weight is present (Qwen3 normalizes q and k per head).
	QKNorm bool
}

// Hyperparams reads the hyperparameters of a "qwen3" or "llama" file; any other architecture
// is refused by name. Required keys that are missing or of a non-integer type are errors that
// name the key.
func (f *File) Hyperparams() (Hyperparams, error) {
	var h Hyperparams
	fail := func(err error) (Hyperparams, error) { return Hyperparams{}, fmt.Errorf("gguf %s: %w", f.Name, err) }
	arch, err := f.Metadata.String("general.architecture")
	if err != nil {
		return fail(err)
	}
	if arch != "qwen3" && arch != "llama" {
		return fail(fmt.Errorf("%w %q (dflash reads qwen3 and llama)", ErrArchitecture, arch))
	}
	h.Arch = arch
	m := f.Metadata
	count := func(key string, dst *int, required bool) error {
		if !m.Has(key) && !required {
			return nil
		}
		u, err := m.Uint(key)
		if err != nil {
			return err
		}
		if u > math.MaxInt32 {
			return fmt.Errorf("metadata %q = %d is out of range", key, u)
		}
		*dst = int(u)
		return nil
	}
	for _, c := range []struct {
		key      string
		dst      *int
		required bool
	}{
		{".block_count", &h.Layers, true},
		{".embedding_length", &h.Embedding, true},
		{".feed_forward_length", &h.FeedForward, true},
		{".attention.head_count", &h.Heads, true},
		{".attention.head_count_kv", &h.KVHeads, false},
		{".attention.key_length", &h.KeyLength, false},
		{".attention.value_length", &h.ValueLength, false},
		{".context_length", &h.Context, true},
		{".vocab_size", &h.Vocab, false},
	} {
		if err := count(arch+c.key, c.dst, c.required); err != nil {
			return fail(err)
		}
	}
	if h.Heads == 0 || h.Embedding == 0 || h.Layers == 0 {
		return fail(fmt.Errorf("%s has %d layers, %d heads and embedding %d; want all positive", arch, h.Layers, h.Heads, h.Embedding))
	}
	if h.KVHeads == 0 {
		h.KVHeads = h.Heads
	}
	if h.Heads%h.KVHeads != 0 {
		return fail(fmt.Errorf("%s: %d heads are not a multiple of %d kv heads", arch, h.Heads, h.KVHeads))
	}
	if h.KeyLength == 0 {
		h.KeyLength = h.Embedding / h.Heads
	}
	if h.ValueLength == 0 {
		h.ValueLength = h.KeyLength
	}
	if h.RMSEps, err = m.Float(arch + ".attention.layer_norm_rms_epsilon"); err != nil {
		return fail(err)
	}
	h.RopeBase = DefaultRopeBase
	if m.Has(arch + ".rope.freq_base") {
		if h.RopeBase, err = m.Float(arch + ".rope.freq_base"); err != nil {
			return fail(err)
		}
	}
	embd, hasEmbd := f.Tensor("token_embd.weight")
	if h.Vocab == 0 {
		if v, ok := m.Lookup("tokenizer.ggml.tokens"); ok && v.typ == TypeArray {
			h.Vocab = v.Len()
		} else if hasEmbd && len(embd.Shape) == 2 {
			h.Vocab = int(embd.Shape[1])
		}
	}
	if hasEmbd && (len(embd.Shape) != 2 || embd.Shape[0] != uint64(h.Embedding) || embd.Shape[1] != uint64(h.Vocab)) {
		return fail(fmt.Errorf("token_embd.weight has shape %v, want [%d %d] (embedding, vocab)", embd.Shape, h.Embedding, h.Vocab))
	}
	h.TiedOutput = !f.Has("output.weight")
	h.QKNorm = f.Has("blk.0.attn_q_norm.weight")
	return h, nil
}

// Tokenizer is the vocabulary and tokenizer settings of a GGUF (tokenizer.ggml.* and the chat
// template), enough to build the tokenizer with no other file beside it.
type Tokenizer struct {
	Model      string    // tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece), ...
	Pre        string    // tokenizer.ggml.pre: the pre-tokenizer's name, e.g. "qwen2", "llama-bpe"; "" if absent
	Tokens     []string  // tokenizer.ggml.tokens, indexed by id
	Scores     []float32 // tokenizer.ggml.scores, nil if absent
	TokenTypes []int32   // tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte), nil if absent
	Merges     []string  // tokenizer.ggml.merges ("a b" per merge), nil if absent

	// Special ids, -1 when the file does not name one.
	BOS, EOS, Unknown, Padding int
	// AddBOS and AddEOS are tokenizer.ggml.add_bos_token / add_eos_token, nil when absent
	// (the tokenizer's own default then applies).
	AddBOS, AddEOS *bool

	ChatTemplate string // tokenizer.chat_template, "" if absent

	// Normalizer is KeyNormalizer's value, "" if absent: the source tokenizer.json's normalizer
	// (JSON), for a rule tokenizer.ggml.* cannot express, such as Lowercase.
	Normalizer string
}

// KeyNormalizer is dflash's own key for a tokenizer's normalizer, which llama.cpp's GGUF
// tokenizer keys have no place for: dflash's converter writes it only when the normalizer is not
// the one tokenizer.ggml.pre implies (Qwen2's NFC), and dflash's reader applies it. llama.cpp
// (and so ollama) ignores keys it does not know, so it reads such a file's text without it.
const KeyNormalizer = "dflash.tokenizer.normalizer"

// Tokenizer reads the tokenizer facts. tokenizer.ggml.model and .tokens are required; the
// per-token arrays must match the token list's length and special ids must be in range.
func (f *File) Tokenizer() (Tokenizer, error) {
	fail := func(err error) (Tokenizer, error) {
		return Tokenizer{}, fmt.Errorf("gguf %s: tokenizer: %w", f.Name, err)
	}
	m := f.Metadata
	var t Tokenizer
	var err error
	if t.Model, err = m.String("tokenizer.ggml.model"); err != nil {
		return fail(err)
	}
	if t.Tokens, err = m.Strings("tokenizer.ggml.tokens"); err != nil {
		return fail(err)
	}
	optString := func(key string, dst *string) error {
		if !m.Has(key) {
			return nil
		}
		s, err := m.String(key)
		*dst = s
		return err
	}
	if err := optString("tokenizer.ggml.pre", &t.Pre); err != nil {
		return fail(err)
	}
	if err := optString("tokenizer.chat_template", &t.ChatTemplate); err != nil {
		return fail(err)
	}
	if err := optString(KeyNormalizer, &t.Normalizer); err != nil {
		return fail(err)
	}
	if m.Has("tokenizer.ggml.merges") {
		if t.Merges, err = m.Strings("tokenizer.ggml.merges"); err != nil {
			return fail(err)
		}
	}
	if m.Has("tokenizer.ggml.scores") {
		if t.Scores, err = m.Float32s("tokenizer.ggml.scores"); err != nil {
			return fail(err)
		}
		if len(t.Scores) != len(t.Tokens) {
			return fail(fmt.Errorf("metadata %q has %d entries for %d tokens", "tokenizer.ggml.scores", len(t.Scores), len(t.Tokens)))
		}
	}
	if m.Has("tokenizer.ggml.token_type") {
		types, err := m.Ints("tokenizer.ggml.token_type")
		if err != nil {
			return fail(err)
		}
		if len(types) != len(t.Tokens) {
			return fail(fmt.Errorf("metadata %q has %d entries for %d tokens", "tokenizer.ggml.token_type", len(types), len(t.Tokens)))
		}
		t.TokenTypes = make([]int32, len(types))
		for i, x := range types {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return fail(fmt.Errorf("metadata %q: element %d = %d is out of range", "tokenizer.ggml.token_type", i, x))
			}
			t.TokenTypes[i] = int32(x)
		}
	}
	for _, s := range []struct {
		key string
		dst *int
	}{
		{"tokenizer.ggml.bos_token_id", &t.BOS},
		{"tokenizer.ggml.eos_token_id", &t.EOS},
		{"tokenizer.ggml.unknown_token_id", &t.Unknown},
		{"tokenizer.ggml.padding_token_id", &t.Padding},
	} {
		*s.dst = -1
		if !m.Has(s.key) {
			continue
		}
		id, err := m.Uint(s.key)
		if err != nil {
			return fail(err)
		}
		if id >= uint64(len(t.Tokens)) {
			return fail(fmt.Errorf("metadata %q = %d is not a token id (%d tokens)", s.key, id, len(t.Tokens)))
		}
		*s.dst = int(id)
	}
	for _, b := range []struct {
		key string
		dst **bool
	}{
		{"tokenizer.ggml.add_bos_token", &t.AddBOS},
		{"tokenizer.ggml.add_eos_token", &t.AddEOS},
	} {
		if !m.Has(b.key) {
			continue
		}
		v, err := m.Bool(b.key)
		if err != nil {
			return fail(err)
		}
		*b.dst = &v
	}
	return t, nil
}
