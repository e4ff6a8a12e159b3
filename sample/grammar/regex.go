package grammar

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
)

// regex is a string pattern compiled to an NFA over the pattern alphabet (printable ASCII
// without '"' and '\': the bytes whose JSON text is themselves). A match state is a set of NFA
// char states (bits 0..61), with bit accept when the pattern has matched and bit free when it
// has matched and, being unanchored at its end, anything may follow. Only live states (from
// which a match is reachable) are kept, so a non-empty set can always be completed.
type regex struct {
	starts uint64
	class  [][2]uint64 // per char state: the bytes it takes
	next   []uint64    // per char state: the set after taking a byte
}

const (
	reAccept   = 1 << 62
	reFree     = 1 << 63
	maxReState = 62
)

// alphabet is the bytes a pattern's strings are generated from.
var alphabet = func() (a [2]uint64) {
	for b := 0x20; b < 0x7f; b++ {
		if b != '"' && b != '\\' {
			a[b/64] |= 1 << (b % 64)
		}
	}
	return a
}()

func (r *regex) start() uint64 { return r.starts }

func (r *regex) step(set uint64, x byte) uint64 {
	if set&reFree != 0 {
		if x < 128 && alphabet[x/64]&(1<<(x%64)) != 0 {
			return reFree
		}
		return 0
	}
	if x >= 128 {
		return 0
	}
	var out uint64
	for s := set &^ (reAccept | reFree); s != 0; s &= s - 1 {
		i := bits.TrailingZeros64(s)
		if r.class[i][x/64]&(1<<(x%64)) != 0 {
			out |= r.next[i]
		}
	}
	return out
}

func accepts(set uint64) bool { return set&(reAccept|reFree) != 0 }

type reNode struct {
	op       byte // 'c' class, '.' concat, '|' alternation, 'r' repeat
	class    [2]uint64
	subs     []*reNode
	min, max int // repeat; max < 0: unbounded
}

type reParser struct {
	s   string
	i   int
	err error
}

func compileRegex(p string) (*regex, error) {
	anchoredStart, anchoredEnd := false, false
	if len(p) > 0 && p[0] == '^' {
		anchoredStart, p = true, p[1:]
	}
	if len(p) > 0 && p[len(p)-1] == '$' && (len(p) < 2 || p[len(p)-2] != '\\') {
		anchoredEnd, p = true, p[:len(p)-1]
	}
	ps := &reParser{s: p}
	ast := ps.alt()
	if ps.err == nil && ps.i < len(p) {
		ps.err = fmt.Errorf("pattern: unexpected %q at %d", p[ps.i], ps.i)
	}
	if ps.err != nil {
		return nil, ps.err
	}
	if !anchoredStart {
		ast = &reNode{op: '.', subs: []*reNode{{op: 'r', subs: []*reNode{{op: 'c', class: alphabet}}, max: -1}, ast}}
	}
	b := &reBuilder{}
	match := b.add(reState{match: true})
	entry := b.build(ast, match)
	if b.err != nil {
		return nil, b.err
	}
	return b.finish(entry, anchoredEnd)
}

func (p *reParser) fail(format string, a ...any) *reNode {
	if p.err == nil {
		p.err = fmt.Errorf("pattern: "+format, a...)
	}
	return &reNode{op: '.'}
}

func (p *reParser) alt() *reNode {
	n := &reNode{op: '|', subs: []*reNode{p.concat()}}
	for p.err == nil && p.i < len(p.s) && p.s[p.i] == '|' {
		p.i++
		n.subs = append(n.subs, p.concat())
	}
	if len(n.subs) == 1 {
		return n.subs[0]
	}
	return n
}

func (p *reParser) concat() *reNode {
	n := &reNode{op: '.'}
	for p.err == nil && p.i < len(p.s) && p.s[p.i] != '|' && p.s[p.i] != ')' {
		a := p.atom()
		for p.err == nil && p.i < len(p.s) {
			min, max, ok := p.quant()
			if !ok {
				break
			}
			a = &reNode{op: 'r', subs: []*reNode{a}, min: min, max: max}
		}
		n.subs = append(n.subs, a)
	}
	return n
}

func (p *reParser) quant() (min, max int, ok bool) {
	switch p.s[p.i] {
	case '*':
		p.i++
		return 0, -1, true
	case '+':
		p.i++
		return 1, -1, true
	case '?':
		p.i++
		return 0, 1, true
	case '{':
		j := p.i + 1
		k := j
		for k < len(p.s) && p.s[k] != '}' {
			k++
		}
		if k == len(p.s) {
			return 0, 0, false
		}
		body := p.s[j:k]
		lo, hi, comma := body, body, false
		for x := 0; x < len(body); x++ {
			if body[x] == ',' {
				lo, hi, comma = body[:x], body[x+1:], true
			}
		}
		a, err := strconv.Atoi(lo)
		if err != nil || a > 32 {
			p.fail("repetition {%s} not supported (at most 32)", body)
			return 0, 0, false
		}
		b := a
		if comma {
			if hi == "" {
				b = -1
			} else if b, err = strconv.Atoi(hi); err != nil || b < a || b > 32 {
				p.fail("repetition {%s} not supported (at most 32)", body)
				return 0, 0, false
			}
		}
		p.i = k + 1
		return a, b, true
	}
	return 0, 0, false
}

func (p *reParser) atom() *reNode {
	c := p.s[p.i]
	p.i++
	switch c {
	case '(':
		if p.i+1 < len(p.s) && p.s[p.i] == '?' {
			if p.s[p.i+1] != ':' {
				return p.fail("group (?%c not supported", p.s[p.i+1])
			}
			p.i += 2
		}
		n := p.alt()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return p.fail("missing )")
		}
		p.i++
		return n
	case '[':
		return p.class()
	case '.':
		return &reNode{op: 'c', class: alphabet}
	case '\\':
		cl, ok := p.escape()
		if !ok {
			return p.fail("escape not supported")
		}
		return &reNode{op: 'c', class: cl}
	case '^', '$':
		return p.fail("anchor %c inside the pattern not supported", c)
	case '*', '+', '?', ')':
		return p.fail("unexpected %c", c)
	}
	var cl [2]uint64
	setByte(&cl, c)
	return &reNode{op: 'c', class: cl}
}

func setByte(cl *[2]uint64, c byte) {
	if c < 128 {
		cl[c/64] |= 1 << (c % 64)
	}
}

func setRange(cl *[2]uint64, a, b byte) {
	for c := int(a); c <= int(b); c++ {
		setByte(cl, byte(c))
	}
}

// escape reads the character after '\' as a class.
func (p *reParser) escape() ([2]uint64, bool) {
	var cl [2]uint64
	if p.i >= len(p.s) {
		return cl, false
	}
	c := p.s[p.i]
	p.i++
	neg := false
	switch c {
	case 'd', 'D':
		setRange(&cl, '0', '9')
		neg = c == 'D'
	case 'w', 'W':
		setRange(&cl, 'a', 'z')
		setRange(&cl, 'A', 'Z')
		setRange(&cl, '0', '9')
		setByte(&cl, '_')
		neg = c == 'W'
	case 's', 'S':
		setByte(&cl, ' ')
		neg = c == 'S'
	case 'n', 'r', 't', 'f', 'v':
		// Control characters are outside the alphabet: the class is empty.
	default:
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return cl, false
		}
		setByte(&cl, c)
	}
	if neg {
		cl = [2]uint64{alphabet[0] &^ cl[0], alphabet[1] &^ cl[1]}
	}
	return cl, true
}

func (p *reParser) class() *reNode {
	var cl [2]uint64
	neg := false
	if p.i < len(p.s) && p.s[p.i] == '^' {
		neg = true
		p.i++
	}
	first := true
	for {
		if p.i >= len(p.s) {
			return p.fail("missing ]")
		}
		c := p.s[p.i]
		if c == ']' && !first {
			p.i++
			break
		}
		first = false
		p.i++
		if c == '\\' {
			e, ok := p.escape()
			if !ok {
				return p.fail("escape in class not supported")
			}
			cl[0], cl[1] = cl[0]|e[0], cl[1]|e[1]
			continue
		}
		if p.i+1 < len(p.s) && p.s[p.i] == '-' && p.s[p.i+1] != ']' {
			hi := p.s[p.i+1]
			if hi < c {
				return p.fail("bad range %c-%c", c, hi)
			}
			setRange(&cl, c, hi)
			p.i += 2
			continue
		}
		setByte(&cl, c)
	}
	if neg {
		cl = [2]uint64{^cl[0], ^cl[1]}
	}
	cl[0], cl[1] = cl[0]&alphabet[0], cl[1]&alphabet[1]
	return &reNode{op: 'c', class: cl}
}

type reState struct {
	match bool
	class [2]uint64
	char  bool
	out   []int // char: one; split: several
}

type reBuilder struct {
	states []reState
	err    error
}

func (b *reBuilder) add(s reState) int {
	b.states = append(b.states, s)
	return len(b.states) - 1
}

// build returns the entry of n's NFA continuing into next (built back to front, so no patch
// lists are needed).
func (b *reBuilder) build(n *reNode, next int) int {
	if len(b.states) > 4*maxReState {
		b.err = errors.New("pattern: too complex (more than 62 character positions)")
		return next
	}
	switch n.op {
	case 'c':
		return b.add(reState{char: true, class: n.class, out: []int{next}})
	case '.':
		for i := len(n.subs) - 1; i >= 0; i-- {
			next = b.build(n.subs[i], next)
		}
		return next
	case '|':
		s := reState{}
		for _, sub := range n.subs {
			s.out = append(s.out, b.build(sub, next))
		}
		return b.add(s)
	}
	// repeat
	sub := n.subs[0]
	e := next
	if n.max < 0 {
		loop := b.add(reState{})
		body := b.build(sub, loop)
		b.states[loop].out = []int{body, next}
		e = loop
	} else {
		for k := 0; k < n.max-n.min; k++ {
			body := b.build(sub, e)
			e = b.add(reState{out: []int{body, next}})
		}
	}
	for k := 0; k < n.min; k++ {
		e = b.build(sub, e)
	}
	return e
}

func (b *reBuilder) finish(entry int, anchoredEnd bool) (*regex, error) {
	// Number the char states 0..k-1.
	idx := make([]int, len(b.states))
	var chars []int
	for i, s := range b.states {
		idx[i] = -1
		if s.char {
			idx[i] = len(chars)
			chars = append(chars, i)
		}
	}
	if len(chars) > maxReState {
		return nil, errors.New("pattern: too complex (more than 62 character positions)")
	}
	closure := func(from int) uint64 {
		var set uint64
		seen := make([]bool, len(b.states))
		var walk func(int)
		walk = func(i int) {
			if seen[i] {
				return
			}
			seen[i] = true
			s := b.states[i]
			switch {
			case s.match:
				set |= reAccept
			case s.char:
				set |= 1 << idx[i]
			default:
				for _, o := range s.out {
					walk(o)
				}
			}
		}
		walk(from)
		return set
	}
	r := &regex{class: make([][2]uint64, len(chars)), next: make([]uint64, len(chars))}
	for k, i := range chars {
		r.class[k] = b.states[i].class
		r.next[k] = closure(b.states[i].out[0])
	}
	r.starts = closure(entry)
	// Keep live states only: those with a byte leading to a set that matches or is live.
	live := uint64(reAccept)
	for changed := true; changed; {
		changed = false
		for k := range chars {
			if live&(1<<k) == 0 && (r.class[k][0]|r.class[k][1]) != 0 && r.next[k]&live != 0 {
				live |= 1 << k
				changed = true
			}
		}
	}
	for k := range chars {
		r.next[k] &= live
		if !anchoredEnd && r.next[k]&reAccept != 0 {
			r.next[k] = reFree
		}
	}
	r.starts &= live
	if !anchoredEnd && r.starts&reAccept != 0 {
		r.starts = reFree
	}
	return r, nil
}
