package tokenizer

// scoreSym is one symbol of a SentencePiece-style merge: its text and its id (-1 when the text
// is not a piece).
type scoreSym struct {
	text       string
	id         int
	prev, next int
	gen        int // bumped whenever the symbol changes, to recognise stale candidates
}

type scoreCand struct {
	score      float32
	pos, right int
	lgen, rgen int
	id         int
}

// scoreMerge merges adjacent symbols, each step taking the pair whose concatenation is a piece
// with the highest score, the leftmost among equal scores, until no pair is a piece or none scores
// above floor. This is exactly llama2.c's quadratic loop (and SentencePiece's BPE), done with a
// heap: the leftmost pair is the one with the smallest original position, since merging keeps the
// left symbol's position and never reorders symbols. It returns the surviving symbols in order.
// lookup receives the concatenation in a reused buffer and must not keep it.
func scoreMerge(texts []string, ids []int, lookup func([]byte) (int, float32, bool), floor float32) []scoreSym {
	if len(texts) == 0 {
		return nil
	}
	syms := make([]scoreSym, len(texts))
	for i := range texts {
		syms[i] = scoreSym{text: texts[i], id: ids[i], prev: i - 1, next: i + 1}
	}
	syms[len(syms)-1].next = -1
	var h []scoreCand
	var buf []byte
	better := func(a, b scoreCand) bool {
		return a.score > b.score || a.score == b.score && a.pos < b.pos
	}
	push := func(pos int) {
		if pos < 0 || syms[pos].next < 0 {
			return
		}
		r := syms[pos].next
		buf = append(append(buf[:0], syms[pos].text...), syms[r].text...)
		id, score, ok := lookup(buf)
		if !ok || !(score > floor) {
			return
		}
		h = append(h, scoreCand{score: score, pos: pos, right: r, lgen: syms[pos].gen, rgen: syms[r].gen, id: id})
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !better(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() scoreCand {
		top := h[0]
		n := len(h) - 1
		h[0] = h[n]
		h = h[:n]
		for i := 0; ; {
			l, m := 2*i+1, i
			if l < n && better(h[l], h[m]) {
				m = l
			}
			if l+1 < n && better(h[l+1], h[m]) {
				m = l + 1
			}
			if m == i {
				break
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
		return top
	}
	for i := range syms {
		push(i)
	}
	for len(h) > 0 {
		c := pop()
		l := &syms[c.pos]
		if l.gen != c.lgen || l.next != c.right || syms[c.right].gen != c.rgen {
			continue
		}
		r := &syms[c.right]
		l.text += r.text
		l.id = c.id
		l.gen++
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		r.gen++
		r.next = -1
		push(l.prev)
		push(c.pos)
	}
	out := make([]scoreSym, 0, len(syms))
	for i := 0; i >= 0; i = syms[i].next {
		out = append(out, syms[i])
	}
	return out
}
