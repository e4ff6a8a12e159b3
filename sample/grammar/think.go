package grammar

import (
	"bytes"
	"sync"

	"github.com/dflash/dflash/sample"
)

// Thinking wraps a Constraint for a model that may reason in a <think> block before its answer:
// the block's text is left unconstrained (any token but a stop: the answer must still come), and
// the grammar applies from the first token after </think> and at most two whitespace tokens (the
// blank line templates put there). When the prompt already opened the block (Open < 0), decoding
// starts inside it; otherwise the first token may open it or begin the answer. The token budget
// steers only the answer (see Constraint.Allowed): a thinking block that uses up the budget
// leaves the answer cut.
type Thinking struct {
	c           *Constraint
	open, close int

	mu    sync.Mutex
	free  *sample.Mask              // every token but the stops
	ws    []int                     // whitespace-only tokens
	union map[unionKey]*sample.Mask // inner mask plus open or the whitespace tokens
}

type unionKey struct {
	m     *sample.Mask
	phase uint8
}

// NewThinking wraps c; open and close are the <think> and </think> token ids, open < 0 when the
// prompt ends inside the block.
func NewThinking(c *Constraint, open, close int) *Thinking {
	t := &Thinking{c: c, open: open, close: close, union: map[unionKey]*sample.Mask{}}
	v := c.v
	t.free = sample.NewMask(v.size)
	for id := range v.size {
		isStop := false
		for _, s := range v.stops {
			isStop = isStop || s == id
		}
		if !isStop {
			t.free.Allow(id)
		}
		if b := v.tokens[id]; len(b) > 0 && len(bytes.Trim(b, " \t\r\n")) == 0 {
			t.ws = append(t.ws, id)
		}
	}
	return t
}

const (
	thMayOpen = iota // first token: <think> or the answer's
	thInside         // inside the block
	thClosed         // after </think>: whitespace or the answer's first token
	thAnswer         // the grammar's
)

type thinkState struct {
	phase uint8
	ws    uint8 // whitespace tokens after </think>
	s     State
}

// Start implements runner.Constraint.
func (t *Thinking) Start() any {
	if t.open < 0 {
		return thinkState{phase: thInside, s: t.c.g.Start()}
	}
	return thinkState{phase: thMayOpen, s: t.c.g.Start()}
}

// Allowed implements runner.Constraint.
func (t *Thinking) Allowed(s any, budget int) *sample.Mask {
	st := s.(thinkState)
	switch st.phase {
	case thInside:
		return t.free
	case thAnswer:
		return t.c.Allowed(st.s, budget)
	}
	inner := t.c.Allowed(st.s, budget)
	if st.phase == thClosed && st.ws >= 2 {
		return inner
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := unionKey{inner, st.phase}
	if m, ok := t.union[k]; ok {
		return m
	}
	m := &sample.Mask{Bits: append([]uint64(nil), inner.Bits...), Count: inner.Count}
	if st.phase == thMayOpen {
		m.Allow(t.open)
	} else {
		for _, id := range t.ws {
			m.Allow(id)
		}
	}
	if len(t.union) > 64 {
		clear(t.union)
	}
	t.union[k] = m
	return m
}

// Advance implements runner.Constraint.
func (t *Thinking) Advance(s any, token int) (any, bool) {
	st := s.(thinkState)
	switch st.phase {
	case thMayOpen:
		if token == t.open {
			st.phase = thInside
			return st, true
		}
	case thInside:
		if token == t.close {
			st.phase = thClosed
		}
		return st, t.free.Allows(token)
	case thClosed:
		for _, id := range t.ws {
			if id == token && st.ws < 2 {
				st.ws++
				return st, true
			}
		}
	}
	st.phase = thAnswer
	next, ok := t.c.Advance(st.s, token)
	st.s = next.(State)
	return st, ok
}

// Complete implements runner.Constraint.
func (t *Thinking) Complete(s any) bool {
	st := s.(thinkState)
	return st.phase == thAnswer && t.c.g.Complete(st.s)
}
