package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dflash/dflash/format/hf"
	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported says a tokenizer.json uses a component this package does not implement.
var ErrUnsupported = errors.New("unsupported tokenizer component")

// BPE is a byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2/Qwen3, Llama-3,
// GPT-2 family). It works on raw bytes throughout: ByteLevel's byte<->unicode mapping is applied
// once, when the vocabulary is read, so encoding never builds the mapped strings.
type BPE struct {
	tokens     [][]byte       // id -> raw bytes; added tokens: their content
	byBytes    map[string]int // raw bytes -> id, model vocabulary only
	bySpelling map[string]int // tokenizer.json spelling (ByteLevel-mapped) -> id
	byteID     [256]int32     // id of each single-byte token, -1 when absent
	merges     map[uint64]mergeRule

	added      map[string]int // added token content -> id
	addedTrie  *trieNode
	addedFirst [256]bool
	special    map[int]bool

	normalize    func(string) string
	normalizer   json.RawMessage // the normalizer's tokenizer.json description, compact; nil if none
	pre          []Splitter
	patterns     []string // each splitter's pattern, for naming the pre-tokenizer in a GGUF
	prefixSpace  bool     // ByteLevel add_prefix_space
	ignoreMerges bool

	bos      int
	eos      []int
	addBOS   bool
	suffix   []int // special tokens the post-processor appends to a single text (Suffix)
	maxToken int   // the longest token's raw bytes (added tokens: content), at least 1

	mu    sync.Mutex
	cache map[string][]int
}

type mergeRule struct {
	rank int32
	id   int32
}

// wordCacheLimit bounds the word cache; past it the cache is dropped and refilled, which keeps
// memory bounded on adversarial input while ordinary text hits the same few thousand words.
const wordCacheLimit = 1 << 17

type hfFile struct {
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	AddedTokens   []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Model struct {
		Type         string            `json:"type"`
		Vocab        map[string]int    `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		ByteFallback bool              `json:"byte_fallback"`
		IgnoreMerges bool              `json:"ignore_merges"`
	} `json:"model"`
}

type hfComponent struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Pattern       struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Single         []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
}

// Specials are the facts a model folder's configuration gives a tokenizer beyond its own file:
// the BOS and EOS spellings and add_bos_token of tokenizer_config.json and the eos ids of
// generation_config.json. The caller that read those files passes them in, so each is read once
// per model (see engine.Describe), and a tokenizer from elsewhere (a GGUF file's metadata) gets
// the same facts by the same road.
type Specials struct {
	BOSToken, EOSToken string
	AddBOS             *bool // nil: what the post-processor template implies
	EOSIDs             []int
}

// SpecialsFrom gathers Specials from the parsed configs; either may be nil.
func SpecialsFrom(tc *hf.TokenizerConfig, gc *hf.GenerationConfig) Specials {
	var sp Specials
	if tc != nil {
		sp.BOSToken, sp.EOSToken, sp.AddBOS = tc.BOSToken, tc.EOSToken, tc.AddBOSToken
	}
	if gc != nil {
		sp.EOSIDs = gc.EOSTokenIDs
	}
	return sp
}

// LoadHF reads a byte-level BPE tokenizer.json, and tokenizer_config.json and
// generation_config.json when they sit beside it (for BOS, EOS and add_bos_token).
func LoadHF(path string) (*BPE, error) {
	dir := filepath.Dir(path)
	tc, err := hf.LoadTokenizerConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	gc, err := hf.LoadGenerationConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return LoadHFWith(path, SpecialsFrom(tc, gc))
}

// LoadHFWith reads a byte-level BPE tokenizer.json and nothing else: the special-token facts of
// the folder's other files come in sp.
func LoadHFWith(path string, sp Specials) (*BPE, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t, err := newBPE(&f)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t.readSpecials(&f, sp)
	return t, nil
}

func newBPE(f *hfFile) (*BPE, error) {
	if f.Model.Type != "BPE" && f.Model.Type != "" {
		return nil, fmt.Errorf("model type %q: %w", f.Model.Type, ErrUnsupported)
	}
	if f.Model.ByteFallback {
		return nil, fmt.Errorf("BPE with byte_fallback (SentencePiece-style): %w", ErrUnsupported)
	}
	t := &BPE{
		bySpelling:   f.Model.Vocab,
		byBytes:      make(map[string]int, len(f.Model.Vocab)),
		added:        map[string]int{},
		special:      map[int]bool{},
		ignoreMerges: f.Model.IgnoreMerges,
		bos:          -1,
		cache:        map[string][]int{},
	}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.normalize != nil {
		var c bytes.Buffer
		if err := json.Compact(&c, f.Normalizer); err != nil {
			return nil, fmt.Errorf("normalizer: %w", err)
		}
		t.normalizer = c.Bytes()
	}
	byteLevel := false
	if t.pre, byteLevel, err = t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	var dec hfComponent
	if len(f.Decoder) > 0 && string(f.Decoder) != "null" {
		if err := json.Unmarshal(f.Decoder, &dec); err != nil {
			return nil, fmt.Errorf("decoder: %w", err)
		}
	}
	if !byteLevel || dec.Type != "ByteLevel" {
		return nil, fmt.Errorf("pre-tokenizer/decoder not byte-level (decoder %q): %w", dec.Type, ErrUnsupported)
	}

	n := 0
	for _, id := range f.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		n = max(n, a.ID+1)
	}
	t.tokens = make([][]byte, n)
	unmap := byteLevelDecoder()
	for s, id := range f.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab %q: negative id %d", s, id)
		}
		b := unmapByteLevel(s, unmap)
		t.tokens[id] = b
		t.byBytes[string(b)] = id
	}
	for i := range t.byteID {
		t.byteID[i] = -1
		if id, ok := t.byBytes[string([]byte{byte(i)})]; ok {
			t.byteID[i] = int32(id)
		}
	}
	t.merges = make(map[uint64]mergeRule, len(f.Model.Merges))
	for rank, raw := range f.Model.Merges {
		a, b, err := parseMerge(raw)
		if err != nil {
			return nil, fmt.Errorf("merge %d: %w", rank, err)
		}
		ia, okA := t.bySpelling[a]
		ib, okB := t.bySpelling[b]
		im, okM := t.bySpelling[a+b]
		if !okA || !okB || !okM {
			return nil, fmt.Errorf("merge %d %q %q: token not in vocab", rank, a, b)
		}
		key := uint64(ia)<<32 | uint64(ib)
		if _, dup := t.merges[key]; !dup {
			t.merges[key] = mergeRule{rank: int32(rank), id: int32(im)}
		}
	}
	t.addedTrie = &trieNode{id: -1}
	for _, a := range f.AddedTokens {
		if a.Content == "" || a.ID < 0 {
			continue
		}
		t.tokens[a.ID] = []byte(a.Content)
		t.added[a.Content] = a.ID
		if a.Special {
			t.special[a.ID] = true
		}
		t.addedTrie.insert(a.Content, a.ID)
		t.addedFirst[a.Content[0]] = true
	}
	t.maxToken = 1
	for _, b := range t.tokens {
		t.maxToken = max(t.maxToken, len(b))
	}
	return t, nil
}

func parseMerge(raw json.RawMessage) (string, string, error) {
	if len(raw) > 0 && raw[0] == '[' {
		var p []string
		if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 {
			return "", "", fmt.Errorf("want a pair of strings, got %s", raw)
		}
		return p[0], p[1], nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "", fmt.Errorf("want \"a b\", got %s", raw)
	}
	a, b, ok := strings.Cut(s, " ")
	if !ok {
		return "", "", fmt.Errorf("want \"a b\", got %q", s)
	}
	return a, b, nil
}

func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Sequence":
		var fs []func(string) string
		for _, sub := range c.Normalizers {
			f, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fs = append(fs, f)
			}
		}
		if len(fs) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, f := range fs {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer %q: %w", c.Type, ErrUnsupported)
}

// parsePreTokenizer returns the splitters in order and whether a ByteLevel step is present.
func (t *BPE) parsePreTokenizer(raw json.RawMessage) ([]Splitter, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var all []Splitter
		byteLevel := false
		for _, sub := range c.Pretokenizers {
			s, bl, err := t.parsePreTokenizer(sub)
			if err != nil {
				return nil, false, err
			}
			all = append(all, s...)
			byteLevel = byteLevel || bl
		}
		return all, byteLevel, nil
	case "Split":
		if c.Behavior != "Isolated" || c.Invert {
			return nil, false, fmt.Errorf("Split behavior %q invert %v: %w", c.Behavior, c.Invert, ErrUnsupported)
		}
		var pattern string
		switch {
		case c.Pattern.Regex != nil:
			pattern = *c.Pattern.Regex
		case c.Pattern.String != nil:
			pattern = regexp2QuoteMeta(*c.Pattern.String)
		default:
			return nil, false, fmt.Errorf("Split without pattern: %w", ErrUnsupported)
		}
		s, err := NewSplitter(pattern)
		if err != nil {
			return nil, false, err
		}
		t.patterns = append(t.patterns, pattern)
		return []Splitter{s}, false, nil
	case "ByteLevel":
		t.prefixSpace = c.AddPrefixSpace
		// use_regex defaults to true in HF: ByteLevel then splits with GPT-2's pattern itself.
		if c.UseRegex == nil || *c.UseRegex {
			t.patterns = append(t.patterns, patternGPT2)
			return []Splitter{knownSplitter(patternGPT2)}, true, nil
		}
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer %q: %w", c.Type, ErrUnsupported)
}

func regexp2QuoteMeta(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#&-~ `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// readSpecials sets BOS, EOS and AddBOS from the post-processor template and the folder's
// Specials. Qwen3 has no BOS and ends on <|im_end|> (config) or <|endoftext|>.
func (t *BPE) readSpecials(f *hfFile, sp Specials) {
	templateBOS := ""
	var templateSuffix []string
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var c hfComponent
		if len(raw) == 0 || json.Unmarshal(raw, &c) != nil {
			return
		}
		if c.Type == "TemplateProcessing" && len(c.Single) > 0 && c.Single[0].SpecialToken != nil {
			templateBOS = c.Single[0].SpecialToken.ID
		}
		if c.Type == "TemplateProcessing" {
			// The special tokens after the text ($A): Qwen3-Embedding's <|endoftext|>.
			templateSuffix = nil
			for i := len(c.Single) - 1; i >= 0 && c.Single[i].SpecialToken != nil && c.Single[i].Sequence == nil; i-- {
				templateSuffix = append([]string{c.Single[i].SpecialToken.ID}, templateSuffix...)
			}
			if len(templateSuffix) == len(c.Single) {
				templateSuffix = nil // no $A at all: not a template around a text
			}
		}
		for _, p := range c.Processors {
			walk(p)
		}
	}
	walk(f.PostProcessor)
	if id, ok := t.added[templateBOS]; ok {
		t.bos, t.addBOS = id, true
	}
	t.suffix = nil
	for _, s := range templateSuffix {
		if id, ok := t.added[s]; ok {
			t.suffix = append(t.suffix, id)
		}
	}
	if sp.BOSToken != "" {
		if id, ok := t.TokenID(sp.BOSToken); ok {
			t.bos = id
		}
	}
	if sp.AddBOS != nil {
		t.addBOS = *sp.AddBOS && t.bos >= 0
	}
	addEOS := func(id int) {
		if !slices.Contains(t.eos, id) {
			t.eos = append(t.eos, id)
		}
	}
	if sp.EOSToken != "" {
		if id, ok := t.TokenID(sp.EOSToken); ok {
			addEOS(id)
		}
	}
	for _, id := range sp.EOSIDs {
		addEOS(id)
	}
	// Base and instruct checkpoints of these families both stop on their end-of-text markers, and
	// generation_config.json is often absent beside a bare tokenizer.
	for _, s := range []string{"<|endoftext|>", "<|end_of_text|>", "<|eot_id|>"} {
		if id, ok := t.added[s]; ok && t.special[id] {
			addEOS(id)
		}
	}
}

// Encode implements Tokenizer.
func (t *BPE) Encode(text string) []int {
	out := make([]int, 0, len(text)/3+1)
	last := 0
	for i := 0; i < len(text); {
		if !t.addedFirst[text[i]] {
			i++
			continue
		}
		id, n := t.addedTrie.longest(text[i:])
		if n == 0 {
			i++
			continue
		}
		out = t.encodeSegment(text[last:i], out)
		out = append(out, id)
		i += n
		last = i
	}
	return t.encodeSegment(text[last:], out)
}

// encodeSegment encodes text that holds no added token: normalize, pre-tokenize, BPE each word.
func (t *BPE) encodeSegment(s string, out []int) []int {
	if s == "" {
		return out
	}
	if t.normalize != nil {
		s = t.normalize(s)
	}
	if t.prefixSpace && s[0] != ' ' {
		s = " " + s
	}
	emit := func(w string) { out = t.encodeWord(w, out) }
	for i := len(t.pre) - 1; i >= 0; i-- {
		next, split := emit, t.pre[i]
		emit = func(w string) { split(w, next) }
	}
	emit(s)
	return out
}

// encodeWord appends the BPE ids of one pre-token.
func (t *BPE) encodeWord(w string, out []int) []int {
	if len(w) == 1 {
		if id := t.byteID[w[0]]; id >= 0 {
			return append(out, int(id))
		}
	}
	t.mu.Lock()
	ids, ok := t.cache[w]
	t.mu.Unlock()
	if ok {
		return append(out, ids...)
	}
	if t.ignoreMerges {
		if id, ok := t.byBytes[w]; ok {
			return append(out, id)
		}
	}
	ids = t.mergeWord(w)
	t.mu.Lock()
	if len(t.cache) >= wordCacheLimit {
		t.cache = map[string][]int{}
	}
	t.cache[strings.Clone(w)] = ids
	t.mu.Unlock()
	return append(out, ids...)
}

// mergeWord applies merges by rank: repeatedly the lowest-ranked adjacent pair, the leftmost
// among equal ranks, as HF's BPE does. A heap of candidate pairs keeps long words (runs of
// whitespace) from going quadratic; stale candidates are recognised by their ids no longer
// matching the symbols at their position.
func (t *BPE) mergeWord(w string) []int {
	type symbol struct {
		id         int32
		prev, next int32 // -1 at the ends
	}
	syms := make([]symbol, 0, len(w))
	for i := 0; i < len(w); i++ {
		id := t.byteID[w[i]]
		// A vocabulary without some byte cannot encode it; no byte-level vocabulary lacks one.
		syms = append(syms, symbol{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	var h pairHeap
	push := func(pos int32) {
		if pos < 0 {
			return
		}
		r := syms[pos].next
		if r < 0 || syms[pos].id < 0 || syms[r].id < 0 {
			return
		}
		m, ok := t.merges[uint64(syms[pos].id)<<32|uint64(syms[r].id)]
		if ok {
			h.push(pairCand{rank: m.rank, pos: pos, left: syms[pos].id, right: syms[r].id, id: m.id})
		}
	}
	for i := range syms {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		s := &syms[c.pos]
		if s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue
		}
		r := s.next
		s.id = c.id
		s.next = syms[r].next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		syms[r].id = -2 // removed
		push(s.prev)
		push(c.pos)
	}
	ids := make([]int, 0, 4)
	for i := int32(0); i >= 0; i = syms[i].next {
		if syms[i].id >= 0 {
			ids = append(ids, int(syms[i].id))
		}
	}
	return ids
}

type pairCand struct {
	rank, pos, left, right, id int32
}

func (a pairCand) less(b pairCand) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// pairHeap is a binary min-heap by (rank, position).
type pairHeap []pairCand

func (h *pairHeap) push(c pairCand) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() pairCand {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if l+1 < n && s[l+1].less(s[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// Decode implements Tokenizer: the bytes of each id (added tokens: their text), concatenated.
func (t *BPE) Decode(ids []int) string { return decodeWith(t, ids) }

// TokenBytes implements Tokenizer.
func (t *BPE) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) {
		return nil
	}
	return t.tokens[id]
}

// Vocab implements Tokenizer.
func (t *BPE) Vocab() int { return len(t.tokens) }

// TokenID implements Tokenizer. It looks s up as an added token, then as the raw text of a
// vocabulary token (what TokenBytes returns), then as tokenizer.json spells it (ByteLevel-mapped,
// e.g. "Ġthe").
func (t *BPE) TokenID(s string) (int, bool) {
	if id, ok := t.added[s]; ok {
		return id, true
	}
	if id, ok := t.byBytes[s]; ok {
		return id, true
	}
	id, ok := t.bySpelling[s]
	return id, ok
}

// IsAdded reports whether id is an added token (special or not, e.g. <|im_end|>, <think>):
// its bytes are its name, matched in text as a whole, not text the model writes piece by piece.
// A grammar never allows one inside the text it constrains.
func (t *BPE) IsAdded(id int) bool {
	if id < 0 || id >= len(t.tokens) {
		return false
	}
	a, ok := t.added[string(t.tokens[id])]
	return ok && a == id
}

// IsSpecial reports whether id is an added token marked special (e.g. <|im_end|>).
func (t *BPE) IsSpecial(id int) bool { return t.special[id] }

// BOS implements Tokenizer.
func (t *BPE) BOS() int { return t.bos }

// EOS implements Tokenizer.
func (t *BPE) EOS() []int { return append([]int(nil), t.eos...) }

// AddBOS implements Tokenizer.
func (t *BPE) AddBOS() bool { return t.addBOS }

// Suffix is the special tokens tokenizer.json's post-processor appends after a single text (a
// TemplateProcessing "single" that ends with special tokens: Qwen3-Embedding's <|endoftext|>),
// nil for most models. Encode leaves them out: a generation prompt must not end with an
// end-of-text. Embeddings add them, as sentence-transformers' tokenizer call does, since a model
// pooled at its last token was trained to read the embedding there.
func (t *BPE) Suffix() []int { return slices.Clone(t.suffix) }

// byteLevelDecoder inverts GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards in byte order.
func byteLevelDecoder() map[rune]byte {
	m := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[rune(b)] = byte(b)
		} else {
			m[next] = byte(b)
			next++
		}
	}
	return m
}

// unmapByteLevel turns a ByteLevel-mapped vocabulary spelling back into the raw bytes it stands
// for; a character outside the mapping (not produced by ByteLevel) keeps its UTF-8 bytes.
func unmapByteLevel(s string, m map[rune]byte) []byte {
	var b bytes.Buffer
	for _, r := range s {
		if c, ok := m[r]; ok {
			b.WriteByte(c)
		} else {
			b.WriteRune(r)
		}
	}
	return b.Bytes()
}

// trieNode is a byte trie over added-token contents for longest-match lookup.
type trieNode struct {
	next map[byte]*trieNode
	id   int
}

func (n *trieNode) insert(s string, id int) {
	for i := 0; i < len(s); i++ {
		if n.next == nil {
			n.next = map[byte]*trieNode{}
		}
		c, ok := n.next[s[i]]
		if !ok {
			c = &trieNode{id: -1}
			n.next[s[i]] = c
		}
		n = c
	}
	n.id = id
}

// longest returns the id and length of the longest added token that prefixes s (length 0: none).
func (n *trieNode) longest(s string) (int, int) {
	id, length := -1, 0
	for i := 0; i < len(s) && n != nil; i++ {
		n = n.next[s[i]]
		if n != nil && n.id >= 0 {
			id, length = n.id, i+1
		}
	}
	return id, length
}
