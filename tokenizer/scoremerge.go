package tokenizer

import "math"

// symIndex is the integer type of offsets and symbol indices inside one merge: int32 keeps the
// symbol table and heap small for every realistic text, int64 takes over past 2 GiB so that no
// text is too long to encode.
type symIndex interface{ ~int32 | ~int64 }

// mergeSym is one symbol of a merge: a span of the merge buffer (the concatenated texts of the
// initial symbols) and its piece id, -1 when the text is no piece. start never changes: a merge
// extends the left symbol over its right neighbour, so adjacent survivors stay adjacent in the
// buffer and a pair's text is buf[left.start:right.end], never copied.
type mergeSym[I symIndex] struct {
	start, end I
	prev, next I // survivors' neighbours, -1 at the ends; next is -1 too once merged away
	id         int32
}

// mergeCand is a candidate merge of the symbol at pos with its right neighbour, recorded with the
// right neighbour's end. It is stale once pos has no right neighbour ending there: pos merged
// away (next -1), pos absorbed its neighbour (the new neighbour ends further right) or the
// neighbour absorbed its own (its end moved). A candidate that is not stale has the same text,
// hence the same id and score, as when it was pushed.
type mergeCand[I symIndex] struct {
	score    float32
	id       int32
	pos, end I
}

// better orders candidates as run.c picks them: the highest score, and among equal scores the
// leftmost pair, which is the one with the smallest pos since merges never reorder symbols. No
// two live candidates share pos, so this is a total order on them and any heap pops the same
// sequence of merges.
func (a mergeCand[I]) better(b mergeCand[I]) bool {
	return a.score > b.score || a.score == b.score && a.pos < b.pos
}

// scoreMerge merges adjacent symbols, each step taking the pair whose concatenation is a piece
// with the highest score, the leftmost among equal scores, until no pair is a piece or none scores
// above floor. This is exactly llama2.c's quadratic loop (and SentencePiece's BPE), done in
// O(n log n) with a heap of candidate pairs over a linked list of symbols, stale candidates being
// skipped when popped. build adds the initial symbols in order (their texts need not be pieces:
// id -1); symBound bounds their number (it sizes the tables once, as growing them by doubling
// would cost twice the memory on a huge text) and bufBound the total bytes of their texts, which
// picks the index width. lookup
// receives a pair's text, which it must not keep; emit receives each surviving symbol in order,
// with a text valid only during the call.
func scoreMerge(symBound, bufBound int, build func(add func(text string, id int)), lookup func([]byte) (int, float32, bool), floor float32, emit func(text []byte, id int)) {
	if bufBound < math.MaxInt32 {
		runScoreMerge[int32](symBound, build, lookup, floor, emit)
	} else {
		runScoreMerge[int64](symBound, build, lookup, floor, emit)
	}
}

func runScoreMerge[I symIndex](symBound int, build func(add func(text string, id int)), lookup func([]byte) (int, float32, bool), floor float32, emit func(text []byte, id int)) {
	buf := make([]byte, 0, symBound)
	syms := make([]mergeSym[I], 0, symBound)
	build(func(text string, id int) {
		n := I(len(syms))
		start := I(len(buf))
		buf = append(buf, text...)
		syms = append(syms, mergeSym[I]{start: start, end: I(len(buf)), prev: n - 1, next: n + 1, id: int32(id)})
	})
	if len(syms) == 0 {
		return
	}
	syms[len(syms)-1].next = -1

	h := make([]mergeCand[I], 0, len(syms))
	candidate := func(pos I) (mergeCand[I], bool) {
		if pos < 0 || syms[pos].next < 0 {
			return mergeCand[I]{}, false
		}
		end := syms[syms[pos].next].end
		id, score, ok := lookup(buf[syms[pos].start:end])
		if !ok || !(score > floor) {
			return mergeCand[I]{}, false
		}
		return mergeCand[I]{score: score, id: int32(id), pos: pos, end: end}, true
	}
	down := func(i int) {
		for n := len(h); ; {
			l, m := 2*i+1, i
			if l < n && h[l].better(h[m]) {
				m = l
			}
			if l+1 < n && h[l+1].better(h[m]) {
				m = l + 1
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	push := func(pos I) {
		c, ok := candidate(pos)
		if !ok {
			return
		}
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !h[i].better(h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	for i := range syms {
		if c, ok := candidate(I(i)); ok {
			h = append(h, c)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		c := h[0]
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		down(0)
		l := &syms[c.pos]
		if l.next < 0 || syms[l.next].end != c.end {
			continue
		}
		r := &syms[l.next]
		l.end, l.id, l.next = r.end, c.id, r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		r.next = -1
		push(l.prev)
		push(c.pos)
	}
	for i := I(0); i >= 0; i = syms[i].next {
		emit(buf[syms[i].start:syms[i].end], int(syms[i].id))
	}
}

// mulSat is a*b for non-negative a and b, saturated at math.MaxInt.
func mulSat(a, b int) int {
	if b != 0 && a > math.MaxInt/b {
		return math.MaxInt
	}
	return a * b
}
