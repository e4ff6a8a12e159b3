// Package bpetrain learns a byte-level BPE vocabulary from text and writes it as a Hugging Face
// tokenizer.json (plus tokenizer_config.json) that package tokenizer loads the same way as
// Qwen3's. It mirrors the semantics of Hugging Face tokenizers' BpeTrainer: words are counted
// after pre-tokenization, the initial alphabet is the 256 byte-level symbols, special tokens are
// added first, and each step merges the most frequent adjacent pair (ties: the smallest pair of
// ids) until the vocabulary is full or no pair is seen MinFrequency times.
//
// It owns training and writing only. It must never encode or decode text (package tokenizer
// does), never write a tokenizer.json feature package tokenizer cannot load, and never panic on
// the text it is given: any bytes, valid UTF-8 or not, train.
package bpetrain

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dflash/dflash/tokenizer"

	"golang.org/x/text/unicode/norm"
)

// Config says what to learn.
type Config struct {
	// VocabSize is the total vocabulary: special tokens, the 256 byte symbols and the learned
	// merges. The result has fewer entries when the text runs out of pairs seen MinFrequency
	// times, or when a merge spells a token that already exists (its merge is kept, as Hugging
	// Face does, but adds no entry).
	VocabSize int
	// MinFrequency is the fewest occurrences a pair needs to be merged; 0 means 2.
	MinFrequency int
	// Special tokens take ids 0..len(Special)-1 in this order (Hugging Face's trainer adds them
	// first); byte b then has id len(Special)+b, and merges follow. Training text is cut at
	// every occurrence of a special token, so none of their text is learned. A special token
	// may not be empty, repeated, a single byte, or one character spelling a byte symbol.
	Special []string
	// Pattern is the pre-tokenizer split regex; "" means PatternQwen2, which package tokenizer
	// matches by hand.
	Pattern string
	// NFC and Lowercase add those normalizers (in this order) to tokenizer.json and apply them
	// to the training text. With neither, Decode(Encode(s)) == s for every byte string; NFC keeps
	// that for NFC input; Lowercase gives lower-cased text back (and turns invalid UTF-8 inside
	// non-ASCII text into U+FFFD, as strings.ToLower does).
	NFC, Lowercase bool
	// MaxBytes caps the training text read; 0 reads all of it.
	MaxBytes int64
	// Threads counts words in parallel; 0 means GOMAXPROCS.
	Threads int
}

// Result is a learned vocabulary.
type Result struct {
	cfg     Config
	tokens  [][]byte   // id -> raw bytes; special tokens: their content
	merges  [][2]int32 // in rank order; merges[i] produced a token listed in mergeTo[i]
	mergeTo []int32
	words   int   // distinct pre-tokens seen
	bytes   int64 // training bytes read
}

// Vocab is the number of vocabulary entries (ids 0..Vocab()-1).
func (r *Result) Vocab() int { return len(r.tokens) }

// Merges is the number of learned merges.
func (r *Result) Merges() int { return len(r.merges) }

// Token returns the raw bytes of id (a special token: its text), nil outside the vocabulary.
func (r *Result) Token(id int) []byte {
	if id < 0 || id >= len(r.tokens) {
		return nil
	}
	return r.tokens[id]
}

// Merge returns the ids of the rank-th merge and the id it produces.
func (r *Result) Merge(rank int) (left, right, merged int) {
	m := r.merges[rank]
	return int(m[0]), int(m[1]), int(r.mergeTo[rank])
}

// TrainingBytes and Words report how much text was read and how many distinct pre-tokens it held.
func (r *Result) TrainingBytes() int64 { return r.bytes }

// Words is the number of distinct pre-tokens in the training text.
func (r *Result) Words() int { return r.words }

func (c *Config) defaults() error {
	if c.MinFrequency <= 0 {
		c.MinFrequency = 2
	}
	if c.Pattern == "" {
		c.Pattern = PatternQwen2
	}
	if c.Threads <= 0 {
		c.Threads = runtime.GOMAXPROCS(0)
	}
	seen := map[string]bool{}
	for _, s := range c.Special {
		if s == "" {
			return errors.New("empty special token")
		}
		if seen[s] {
			return fmt.Errorf("special token %q listed twice", s)
		}
		seen[s] = true
	}
	for _, s := range c.Special {
		// Special tokens sit in the model vocab too (as Hugging Face's trainer puts them), so one
		// that is a single byte, or spelled like a byte symbol, would share that byte's entry.
		if r, n := utf8.DecodeRuneInString(s); len(s) == 1 || n == len(s) && spellsByte[r] {
			return fmt.Errorf("special token %q collides with a byte symbol", s)
		}
	}
	if min := len(c.Special) + 256; c.VocabSize < min {
		return fmt.Errorf("vocab size %d below %d special tokens + 256 bytes", c.VocabSize, len(c.Special))
	}
	return nil
}

// Train reads the text from r (all of it, or MaxBytes, into memory) and learns a vocabulary.
// progress, when non-nil, gets a line per phase and every 500 merges. The result depends only on
// the text and cfg, not on Threads or map order: the same input gives byte-identical JSON.
func Train(r io.Reader, cfg Config, progress io.Writer) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}
	split, err := tokenizer.NewSplitter(cfg.Pattern)
	if err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}
	logf := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	start := time.Now()
	if cfg.MaxBytes > 0 {
		r = io.LimitReader(r, cfg.MaxBytes)
	}
	text, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("train tokenizer: read text: %w", err)
	}
	counts := countWords(text, &cfg, split)
	logf("bpetrain: %d bytes, %d distinct words (%.2fs)", len(text), len(counts), time.Since(start).Seconds())

	res := &Result{cfg: cfg, bytes: int64(len(text)), words: len(counts)}
	for _, s := range cfg.Special {
		res.tokens = append(res.tokens, []byte(s))
	}
	nSpecial := int32(len(cfg.Special))
	for b := 0; b < 256; b++ {
		res.tokens = append(res.tokens, []byte{byte(b)})
	}
	learn(res, counts, nSpecial, logf)
	logf("bpetrain: %d merges, vocab %d (%.2fs)", len(res.merges), len(res.tokens), time.Since(start).Seconds())
	return res, nil
}

// countWords normalizes and pre-tokenizes text in parallel and counts each distinct pre-token.
// Text is cut into chunks only after a newline that a letter follows: every known pattern ends a
// piece there (no alternative runs from a newline into a letter), so chunking does not change
// the pieces. Chunks are also cut around special tokens, which are not learned.
func countWords(text []byte, cfg *Config, split tokenizer.Splitter) map[string]int64 {
	var segs [][]byte
	for len(text) > 0 {
		cut, skip := nextSpecial(text, cfg.Special)
		segs = append(segs, text[:cut])
		text = text[min(cut+skip, len(text)):]
	}
	const chunk = 64 << 10
	var chunks [][]byte
	for _, s := range segs {
		for len(s) > chunk {
			cut := -1
			for i := chunk; i+1 < len(s); i++ {
				if s[i] == '\n' && isASCIILetter(s[i+1]) {
					cut = i + 1
					break
				}
			}
			if cut < 0 {
				break
			}
			chunks = append(chunks, s[:cut])
			s = s[cut:]
		}
		if len(s) > 0 {
			chunks = append(chunks, s)
		}
	}

	threads := min(cfg.Threads, max(1, len(chunks)))
	maps := make([]map[string]int64, threads)
	var wg sync.WaitGroup
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := map[string]int64{}
			for c := t; c < len(chunks); c += threads {
				s := string(chunks[c])
				if cfg.NFC {
					s = norm.NFC.String(s)
				}
				if cfg.Lowercase {
					s = strings.ToLower(s)
				}
				split(s, func(w string) { m[w]++ })
			}
			maps[t] = m
		}()
	}
	wg.Wait()
	all := maps[0]
	for _, m := range maps[1:] {
		for w, n := range m {
			all[w] += n
		}
	}
	return all
}

// nextSpecial returns where the first special token in text starts (len(text) when none) and
// its length; the longest one wins at a position, as package tokenizer matches them.
func nextSpecial(text []byte, special []string) (int, int) {
	at, n := len(text), 0
	for _, s := range special {
		i := bytes.Index(text[:min(len(text), at+len(s))], []byte(s))
		if i >= 0 && (i < at || i == at && len(s) > n) {
			at, n = i, len(s)
		}
	}
	return at, n
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

type word struct {
	syms  []int32
	count int64
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// learn runs the merge loop. Pair counts live in a map and a lazy max-heap: a pair's count only
// rises when it contains the token just made, and such pairs are pushed with their new count, so
// every live pair has a heap entry at least its count; a popped entry whose count is stale is
// pushed back with the current one. pairWords indexes the words holding each pair, so a merge
// touches only those words (entries may be stale; a word without the pair is skipped).
func learn(res *Result, counts map[string]int64, nSpecial int32, logf func(string, ...any)) {
	keys := make([]string, 0, len(counts))
	for w := range counts {
		keys = append(keys, w)
	}
	slices.Sort(keys) // word order fixes pairWords order, so the result is independent of map order
	words := make([]word, len(keys))
	for i, k := range keys {
		syms := make([]int32, len(k))
		for j := 0; j < len(k); j++ {
			syms[j] = nSpecial + int32(k[j])
		}
		words[i] = word{syms: syms, count: counts[k]}
	}

	pairCount := map[uint64]int64{}
	pairWords := map[uint64][]int32{}
	for wi, w := range words {
		for j := 0; j+1 < len(w.syms); j++ {
			k := pairKey(w.syms[j], w.syms[j+1])
			pairCount[k] += w.count
			if ws := pairWords[k]; len(ws) == 0 || ws[len(ws)-1] != int32(wi) {
				pairWords[k] = append(ws, int32(wi))
			}
		}
	}
	h := make(pairHeap, 0, len(pairCount))
	for k, c := range pairCount {
		h = append(h, heapEntry{count: c, pair: k})
	}
	h.init()

	byBytes := make(map[string]int32, res.cfg.VocabSize)
	for id := nSpecial; id < int32(len(res.tokens)); id++ {
		byBytes[string(res.tokens[id])] = id
	}
	special := map[string]bool{}
	for _, s := range res.cfg.Special {
		special[s] = true
	}
	seen := make([]int32, len(words)) // merge number that last touched each word
	delta := map[uint64]int64{}
	minFreq := int64(res.cfg.MinFrequency)

	for len(res.tokens) < res.cfg.VocabSize && len(h) > 0 {
		top := h.pop()
		cur := pairCount[top.pair]
		if cur != top.count {
			if cur > 0 {
				h.push(heapEntry{count: cur, pair: top.pair})
			}
			continue
		}
		if cur < minFreq {
			break
		}
		a, b := int32(top.pair>>32), int32(uint32(top.pair))
		spelled := append(append([]byte(nil), res.tokens[a]...), res.tokens[b]...)
		if special[string(spelled)] || special[spell(spelled)] {
			// A learned token with a special token's text or vocab spelling would make the
			// vocabulary ambiguous; the pair is dropped (only possible with a special token the
			// pattern can build).
			delete(pairCount, top.pair)
			continue
		}
		id, ok := byBytes[string(spelled)]
		if !ok {
			id = int32(len(res.tokens))
			res.tokens = append(res.tokens, spelled)
			byBytes[string(spelled)] = id
		}
		res.merges = append(res.merges, [2]int32{a, b})
		res.mergeTo = append(res.mergeTo, id)
		stamp := int32(len(res.merges))

		clear(delta)
		for _, wi := range pairWords[top.pair] {
			if seen[wi] == stamp {
				continue
			}
			seen[wi] = stamp
			w := &words[wi]
			if !hasPair(w.syms, a, b) {
				continue
			}
			for j := 0; j+1 < len(w.syms); j++ {
				delta[pairKey(w.syms[j], w.syms[j+1])] -= w.count
			}
			w.syms = mergeSyms(w.syms, a, b, id)
			for j := 0; j+1 < len(w.syms); j++ {
				l, r := w.syms[j], w.syms[j+1]
				k := pairKey(l, r)
				delta[k] += w.count
				if l == id || r == id {
					if ws := pairWords[k]; len(ws) == 0 || ws[len(ws)-1] != wi {
						pairWords[k] = append(ws, wi)
					}
				}
			}
		}
		delete(pairWords, top.pair)
		// Applying deltas in key order keeps heap pushes, and so tie order, deterministic.
		changed := make([]uint64, 0, len(delta))
		for k, d := range delta {
			if d != 0 {
				changed = append(changed, k)
			}
		}
		slices.Sort(changed)
		for _, k := range changed {
			n := pairCount[k] + delta[k]
			if n <= 0 {
				delete(pairCount, k)
				delete(pairWords, k)
				continue
			}
			pairCount[k] = n
			if delta[k] > 0 {
				h.push(heapEntry{count: n, pair: k})
			}
		}
		if len(res.merges)%500 == 0 {
			logf("bpetrain: merge %d: %q + %q (count %d)", len(res.merges), res.tokens[a], res.tokens[b], cur)
		}
	}
}

func hasPair(s []int32, a, b int32) bool {
	for j := 0; j+1 < len(s); j++ {
		if s[j] == a && s[j+1] == b {
			return true
		}
	}
	return false
}

// mergeSyms replaces each occurrence of a b, left to right without overlap, by id, in place.
func mergeSyms(s []int32, a, b, id int32) []int32 {
	out := s[:0]
	for j := 0; j < len(s); j++ {
		if j+1 < len(s) && s[j] == a && s[j+1] == b {
			out = append(out, id)
			j++
			continue
		}
		out = append(out, s[j])
	}
	return out
}

type heapEntry struct {
	count int64
	pair  uint64
}

// before orders the heap: higher count first, then the smaller pair of ids (Hugging Face's
// tie-break), which makes every choice deterministic.
func (x heapEntry) before(y heapEntry) bool {
	return x.count > y.count || x.count == y.count && x.pair < y.pair
}

type pairHeap []heapEntry

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() heapEntry {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.down(0)
	return top
}

func (h pairHeap) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if l+1 < len(h) && h[l+1].before(h[m]) {
			m = l + 1
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
