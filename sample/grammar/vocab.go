package grammar

import (
	"bytes"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/dflash/dflash/sample"
)

// Vocab is a tokenizer's vocabulary as a byte trie, for computing masks. It is immutable and
// safe for concurrent use; build it once per tokenizer.
type Vocab struct {
	size   int
	tokens [][]byte // id -> bytes; nil: never allowed by a grammar
	stops  []int
	all    trie
	// plain are the tokens made of whole characters that stand for themselves inside a JSON
	// string (no '"', '\', control bytes or partial UTF-8); rest is the trie of the others.
	// Inside a string without limits every plain token is allowed and leaves the state as it
	// was, so a mask there is plain plus a walk of rest: the costliest state made cheap.
	// plain[L] are those of at most L characters (L <= maxPlain; longer ones are in rest).
	plain      [maxPlain + 1][]uint64
	plainCount [maxPlain + 1]int
	rest       trie
	// key[L] are the tokens of at most L printable ASCII bytes without '"' or '\' (L <=
	// maxExtraKey): inside a property name that may be an additional one, each is allowed while
	// the name has room for it; keyRest is the trie of the other tokens.
	key      [maxExtraKey + 1][]uint64
	keyCount [maxExtraKey + 1]int
	keyRest  trie
}

const maxPlain = 32

// trie is a byte trie of token ids, flattened.
type trie struct {
	tokens [][]byte
	nodes  []tnode
	edges  []tedge
	ids    []int32 // tokens ending at a node: ids[node.tok : node.tok+node.ntok]
}

type tnode struct {
	edge, nedge int32
	tok, ntok   int32
}

type tedge struct {
	b     byte
	child int32
}

// NewVocab builds the trie of tokens (id -> bytes). A nil or empty entry (a special or control
// token, whose text is no part of a JSON text) is never allowed; stops are the ids that end
// generation, allowed exactly where the grammar is complete.
func NewVocab(tokens [][]byte, stops []int) *Vocab {
	v := &Vocab{size: len(tokens), tokens: tokens, stops: slices.Clone(stops)}
	for l := range v.plain {
		v.plain[l] = make([]uint64, (len(tokens)+63)/64)
	}
	for l := range v.key {
		v.key[l] = make([]uint64, (len(tokens)+63)/64)
	}
	var all, rest, keyRest []int32
	for id, b := range tokens {
		if len(b) == 0 || slices.Contains(stops, id) {
			continue
		}
		all = append(all, int32(id))
		if n := len(b); keyText(b) && n <= maxExtraKey {
			for l := n; l <= maxExtraKey; l++ {
				v.key[l][id/64] |= 1 << (id % 64)
				v.keyCount[l]++
			}
		} else {
			keyRest = append(keyRest, int32(id))
		}
		if n := utf8.RuneCount(b); plainText(b) && n <= maxPlain {
			for l := n; l <= maxPlain; l++ {
				v.plain[l][id/64] |= 1 << (id % 64)
				v.plainCount[l]++
			}
		} else {
			rest = append(rest, int32(id))
		}
	}
	v.all.init(tokens, all)
	v.rest.init(tokens, rest)
	v.keyRest.init(tokens, keyRest)
	return v
}

// keyText reports whether b is printable ASCII without '"' or '\': the bytes an additional
// property name is made of.
func keyText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// keyRoom reports whether every thread of ts is inside a property name that may still become an
// additional one, and the most bytes one of them may still take: every key token of at most
// that many bytes is allowed there (by that thread), whatever the known names.
func keyRoom(ts []thread) (int, bool) {
	r := -1
	for i := range ts {
		f := &ts[i].top
		if f.kind != fObject || f.phase != objKey || !f.additionalOK() || int(f.c) >= maxExtraKey {
			return 0, false
		}
		r = max(r, maxExtraKey-int(f.c))
	}
	return r, r >= 0
}

// plainRoom reports whether every thread of ts is between characters of a string without
// pattern, and the most characters one of them may still take (at most maxPlain): every plain
// token of at most that many characters is allowed there (by that thread; plain text never
// forks a thread, so the set's walk agrees).
func plainRoom(ts []thread) (int, bool) {
	r := -1
	for i := range ts {
		f := &ts[i].top
		if f.kind != fString || f.esc != 0 || f.need != 0 || f.n.pattern != nil {
			return 0, false
		}
		if f.n.maxLen < 0 {
			r = maxPlain
		} else {
			r = max(r, min(maxPlain, f.n.maxLen-int(f.a)))
		}
	}
	return r, r >= 0
}

// plainText reports whether b is whole UTF-8 characters none of which a JSON string must escape.
func plainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	// utf8.Valid admits no surrogates or overlong forms, as the matcher's strings.
	return true
}

func (t *trie) init(tokens [][]byte, ids []int32) {
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(tokens[a], tokens[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	t.tokens = tokens
	t.nodes = append(t.nodes, tnode{})
	t.build(0, ids, 0)
}

// build fills node n with the tokens of sorted (all sharing their first depth bytes): those of
// exactly depth bytes end here, the rest go to one child per next byte.
func (v *trie) build(n int32, sorted []int32, depth int) {
	i := 0
	v.nodes[n].tok = int32(len(v.ids))
	for i < len(sorted) && len(v.tokens[sorted[i]]) == depth {
		v.ids = append(v.ids, sorted[i])
		i++
	}
	v.nodes[n].ntok = int32(i)
	type group struct {
		b      byte
		lo, hi int
	}
	var groups []group
	for i < len(sorted) {
		b := v.tokens[sorted[i]][depth]
		j := i
		for j < len(sorted) && v.tokens[sorted[j]][depth] == b {
			j++
		}
		groups = append(groups, group{b, i, j})
		i = j
	}
	v.nodes[n].edge, v.nodes[n].nedge = int32(len(v.edges)), int32(len(groups))
	first := len(v.edges)
	for _, g := range groups {
		v.nodes = append(v.nodes, tnode{})
		v.edges = append(v.edges, tedge{b: g.b, child: int32(len(v.nodes) - 1)})
	}
	for k, g := range groups {
		v.build(v.edges[first+k].child, sorted[g.lo:g.hi], depth+1)
	}
}

// Size is the vocabulary's size (masks' length).
func (v *Vocab) Size() int { return v.size }

// Constraint is a grammar over a vocabulary: the token-level view a decoder masks with. Masks
// are cached by state (a string state without length limits, say, repeats token after token),
// under a mutex: one Constraint may serve several sequences decoded together.
type Constraint struct {
	g *Grammar
	v *Vocab

	mu      sync.Mutex
	cache   map[string]*sample.Mask
	finish  map[string][]byte
	steered map[string]*sample.Mask
	bufs    [][]thread
}

// maxCached bounds the masks a Constraint keeps (about 19 KiB each for 151,936 tokens, so 5 MiB
// a request at most); past it the cache starts over.
const maxCached = 256

// NewConstraint pairs g with v.
func NewConstraint(g *Grammar, v *Vocab) *Constraint {
	return &Constraint{g: g, v: v, cache: map[string]*sample.Mask{}, finish: map[string][]byte{}, steered: map[string]*sample.Mask{}}
}

// Start is the state before the first token.
func (c *Constraint) Start() any { return c.g.Start() }

// Advance is the state after token; ok is false when the token is not allowed there. A stop
// token leaves the state as it is (it ends the output).
func (c *Constraint) Advance(s any, token int) (any, bool) {
	st := s.(State)
	if slices.Contains(c.v.stops, token) {
		return st, c.g.Complete(st)
	}
	if token < 0 || token >= len(c.v.tokens) || len(c.v.tokens[token]) == 0 {
		return st, false
	}
	next, ok := c.g.Advance(st, c.v.tokens[token])
	return next, ok
}

// Complete reports whether the output so far is a whole value.
func (c *Constraint) Complete(s any) bool { return c.g.Complete(s.(State)) }

// Steer is how close to the end of its token budget an output is steered to its completion:
// once the budget left is at most the bytes Finish would write plus Steer, only tokens that
// begin that completion are allowed. A token writes at least one byte, and single-byte tokens
// write Finish's bytes one by one, so the output ends whole within the budget unless one token
// taken before the zone lengthened the completion by more than Steer bytes (a deep required
// structure opened by one token).
const Steer = 16

// Allowed is the mask of the tokens that may follow state s: every token whose bytes the grammar
// accepts from s, and the stop tokens when s is complete. budget is how many tokens may still be
// emitted, this one included (<= 0: no limit); near its end the mask narrows to the completion
// (see Steer). The mask is shared: read only.
func (c *Constraint) Allowed(s any, budget int) *sample.Mask {
	st := s.(State)
	key := st.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if budget > 0 && budget <= 1024 {
		fin, ok := c.finish[key]
		if !ok {
			fin = c.g.Finish(st)
			c.finish[key] = fin
		}
		if budget <= len(fin)+Steer {
			if m := c.steer(fin, key); m.Count > 0 {
				return m
			}
			// No token begins the completion (a vocabulary without single bytes): unsteered.
		}
	}
	if m, ok := c.cache[key]; ok {
		return m
	}
	m := c.mask(st)
	if len(c.cache) >= maxCached {
		clear(c.cache)
		clear(c.finish)
		clear(c.steered)
	}
	c.cache[key] = m
	return m
}

// steer is the mask of the tokens whose bytes begin fin, the stops when fin is empty.
func (c *Constraint) steer(fin []byte, key string) *sample.Mask {
	if m, ok := c.steered[key]; ok {
		return m
	}
	m := sample.NewMask(c.v.size)
	if len(fin) == 0 {
		for _, id := range c.v.stops {
			m.Allow(id)
		}
	}
	t := &c.v.all
	n := int32(0)
	for _, b := range fin {
		nd := t.nodes[n]
		next := int32(-1)
		for e := nd.edge; e < nd.edge+nd.nedge; e++ {
			if t.edges[e].b == b {
				next = t.edges[e].child
			}
		}
		if next < 0 {
			break
		}
		n = next
		ch := t.nodes[n]
		for _, id := range t.ids[ch.tok : ch.tok+ch.ntok] {
			m.Allow(int(id))
		}
	}
	c.steered[key] = m
	return m
}

// mask walks the trie together with the matcher, depth first, pruning a subtree at the first
// byte the matcher refuses. Buffers per depth are reused, so the walk allocates only when the
// matcher pushes a frame (entering an object, array or member value).
func (c *Constraint) mask(st State) *sample.Mask {
	m := sample.NewMask(c.v.size)
	if c.g.Complete(st) {
		for _, id := range c.v.stops {
			m.Allow(id)
		}
	}
	if r, ok := plainRoom(st.ts); ok {
		copy(m.Bits, c.v.plain[r])
		m.Count += c.v.plainCount[r]
		c.walk(m, &c.v.rest, 0, st.ts, 0)
		return m
	}
	if r, ok := keyRoom(st.ts); ok {
		copy(m.Bits, c.v.key[r])
		m.Count += c.v.keyCount[r]
		c.walk(m, &c.v.keyRest, 0, st.ts, 0)
		return m
	}
	c.walk(m, &c.v.all, 0, st.ts, 0)
	return m
}

func (c *Constraint) walk(m *sample.Mask, v *trie, n int32, ts []thread, depth int) {
	nd := v.nodes[n]
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, nil)
	}
	for e := nd.edge; e < nd.edge+nd.nedge; e++ {
		ed := v.edges[e]
		next := ts
		if !neutral(ts, ed.b) {
			next = advanceInto(c.bufs[depth], ts, ed.b)
			c.bufs[depth] = next
		}
		if len(next) == 0 {
			continue
		}
		ch := v.nodes[ed.child]
		for _, id := range v.ids[ch.tok : ch.tok+ch.ntok] {
			m.Allow(int(id))
		}
		if ch.nedge > 0 {
			c.walk(m, v, ed.child, next, depth+1)
			// The child's walk writes deeper buffers only: next (ts or c.bufs[depth]) is intact.
		}
	}
}
