package grammar

import (
	"encoding/binary"
	"math/big"
)

// Limits that bound what the matcher generates (see the package comment).
const (
	maxIntDigits  = 15
	maxFracDigits = 10
	maxExtraKey   = 64 // bytes of an additional property's name
	maxThreads    = 32 // alternatives followed at once; more are dropped (each is completable)
)

type fkind uint8

const (
	fDone    fkind = iota // the whole value is complete; nothing more may come
	fValue                // a value of n is next; space: one space may come first
	fObject               // inside an object (phase obj*)
	fArray                // inside an array (phase arr*)
	fString               // inside a string
	fNumber               // inside a number
	fLiteral              // inside lit, a counts the bytes matched
)

const (
	objOpen  = iota // after '{': '"' or '}'
	objKey          // in a key: props [a, b) share the c bytes matched; b == a: an additional name
	objColon        // key closed: ':' next; a is the property, -1 additional
	objAfter        // after a member: ',' or '}'
	objNext         // after ',': a space may come (space), then '"'
)

const (
	arrOpen  = iota // after '[': ']' or a value
	arrAfter        // after an item: ',' or ']'
)

// frame is one level of the matcher's stack, a small value so that advancing inside a string or
// a number allocates nothing.
type frame struct {
	n     *node
	kind  fkind
	phase uint8
	space bool
	esc   uint8 // string: 1 after '\', 2..5 expecting the \u hex digit esc-2
	need  uint8 // string: UTF-8 continuation bytes still needed
	lo8   byte  // string: range of the next continuation byte
	hi8   byte
	neg   bool  // number
	a, b  int32 // object: key range / property; array: items so far; string: code points; number: digits
	c     int32 // object: key bytes matched; number: fraction digits
	u     uint64
	v     uint64 // object: seen properties; string: pattern set; number: integer part, fraction part
}

// link is an immutable stack below a thread's top frame.
type link struct {
	f    frame
	next *link
}

type thread struct {
	top  frame
	rest *link
}

// State is a matcher state: the alternatives still followed. A State is a value: Advance returns
// a new one and never changes its argument.
type State struct{ ts []thread }

// Start is the state before any byte.
func (g *Grammar) Start() State {
	return State{ts: []thread{{top: frame{kind: fValue, n: g.root}}}}
}

// Advance feeds the bytes b; ok is false when some byte is not allowed (the State is then
// meaningless).
func (g *Grammar) Advance(s State, b []byte) (State, bool) {
	cur := s.ts
	for _, x := range b {
		var next []thread
		for _, t := range cur {
			next = feed(t, x, next)
		}
		if len(next) == 0 {
			return State{}, false
		}
		cur = dedupe(next)
	}
	return State{ts: cur}, true
}

// Complete reports whether the bytes so far are a whole value of the grammar.
func (g *Grammar) Complete(s State) bool {
	for _, t := range s.ts {
		if t.complete() {
			return true
		}
	}
	return false
}

func (t *thread) complete() bool {
	switch t.top.kind {
	case fDone:
		return true
	case fNumber:
		return t.rest == nil && numberComplete(&t.top)
	}
	return false
}

// advanceInto feeds x to every thread of src, appending the results to dst[:0].
func advanceInto(dst []thread, src []thread, x byte) []thread {
	dst = dst[:0]
	for _, t := range src {
		dst = feed(t, x, dst)
	}
	if len(dst) > 1 {
		dst = dedupe(dst)
	}
	return dst
}

func dedupe(ts []thread) []thread {
	if len(ts) <= 1 {
		return ts
	}
	// Equal threads are compared in place (frames are comparable values; stacks share links
	// or hold equal frames): the mask walk dedupes at every trie node it visits, where building
	// keys would allocate.
	out := ts[:0]
	for _, t := range ts {
		dup := false
		for i := range out {
			if out[i].equal(&t) {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		out = append(out, t)
		if len(out) == maxThreads {
			break
		}
	}
	return out
}

func (t *thread) equal(u *thread) bool {
	if t.top != u.top {
		return false
	}
	a, b := t.rest, u.rest
	for a != b {
		if a == nil || b == nil || a.f != b.f {
			return false
		}
		a, b = a.next, b.next
	}
	return true
}

// Key is a byte string equal for equal states (the mask cache's key).
func (s State) Key() string {
	var b []byte
	for _, t := range s.ts {
		b = t.appendKey(b)
		b = append(b, 0xff)
	}
	return string(b)
}

func (t *thread) appendKey(b []byte) []byte {
	b = t.top.appendKey(b)
	for l := t.rest; l != nil; l = l.next {
		b = l.f.appendKey(b)
	}
	return b
}

func (f *frame) appendKey(b []byte) []byte {
	id := int32(-1)
	if f.n != nil {
		id = f.n.id
	}
	sp := byte(0)
	if f.space {
		sp = 1
	}
	if f.neg {
		sp |= 2
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(id))
	b = append(b, byte(f.kind), f.phase, sp, f.esc, f.need, f.lo8, f.hi8)
	b = binary.LittleEndian.AppendUint32(b, uint32(f.a))
	b = binary.LittleEndian.AppendUint32(b, uint32(f.b))
	b = binary.LittleEndian.AppendUint32(b, uint32(f.c))
	b = binary.LittleEndian.AppendUint64(b, f.u)
	return binary.LittleEndian.AppendUint64(b, f.v)
}

// push makes f the top over t's current top.
func (t thread) push(f frame) thread {
	return thread{top: f, rest: &link{f: t.top, next: t.rest}}
}

// pop ends the top frame: its value is complete.
func (t thread) pop() thread {
	if t.rest == nil {
		return thread{top: frame{kind: fDone}}
	}
	return thread{top: t.rest.f, rest: t.rest.next}
}

// feed appends to out the threads t becomes after byte x (none when x is not allowed).
func feed(t thread, x byte, out []thread) []thread {
	f := &t.top
	switch f.kind {
	case fValue:
		if x == ' ' && f.space {
			f.space = false
			return append(out, t)
		}
		return startValue(t, f.n, x, out)
	case fObject:
		return feedObject(t, x, out)
	case fArray:
		return feedArray(t, x, out)
	case fString:
		return feedString(t, x, out)
	case fNumber:
		return feedNumber(t, x, out)
	case fLiteral:
		if x != f.n.lit[f.a] {
			return out
		}
		f.a++
		if int(f.a) == len(f.n.lit) {
			t = t.pop()
		}
		return append(out, t)
	}
	return out
}

// startValue feeds x as the first byte of a value of n, replacing t's top.
func startValue(t thread, n *node, x byte, out []thread) []thread {
	if !n.sat {
		return out
	}
	switch n.kind {
	case kAlt:
		for _, a := range n.alts {
			out = startValue(t, a, x, out)
		}
		return out
	case kObject:
		if x == '{' {
			t.top = frame{kind: fObject, n: n, phase: objOpen}
			return append(out, t)
		}
	case kArray:
		if x == '[' {
			t.top = frame{kind: fArray, n: n, phase: arrOpen}
			return append(out, t)
		}
	case kString:
		if x == '"' {
			t.top = frame{kind: fString, n: n}
			if n.pattern != nil {
				t.top.v = n.pattern.start()
			}
			return append(out, t)
		}
	case kNumber:
		if x == '-' || x >= '0' && x <= '9' {
			t.top = frame{kind: fNumber, n: n}
			return feedNumber(t, x, out)
		}
	case kLiteral:
		if x == n.lit[0] {
			t.top = frame{kind: fLiteral, n: n, a: 1}
			if len(n.lit) == 1 {
				t = t.pop()
			}
			return append(out, t)
		}
	}
	return out
}

// available is the set of properties that may still come: not seen, satisfiable.
func available(f *frame) uint64 {
	var av uint64
	for i, p := range f.n.props {
		if f.v&(1<<i) == 0 && p.node.sat {
			av |= 1 << i
		}
	}
	return av
}

func (f *frame) additionalOK() bool { return f.n.additional != nil && f.n.additional.sat }

func feedObject(t thread, x byte, out []thread) []thread {
	f := &t.top
	n := f.n
	canClose := n.required&^f.v == 0
	canKey := available(f) != 0 || f.additionalOK()
	switch f.phase {
	case objOpen, objAfter, objNext:
		switch {
		case x == '}' && canClose && f.phase != objNext:
			return append(out, t.pop())
		case x == ',' && canKey && f.phase == objAfter:
			f.phase, f.space = objNext, true
			return append(out, t)
		case x == ' ' && f.phase == objNext && f.space:
			f.space = false
			return append(out, t)
		case x == '"' && canKey && f.phase != objAfter:
			f.phase, f.a, f.b, f.c = objKey, 0, int32(len(n.props)), 0
			return append(out, t)
		}
		return out
	case objKey:
		if x == '"' {
			// An exact known name is that property (refused when already seen); any other name
			// is an additional property.
			for i := f.a; i < f.b; i++ {
				if len(n.props[i].key) == int(f.c) {
					if available(f)&(1<<i) == 0 {
						return out
					}
					f.phase, f.a = objColon, i
					return append(out, t)
				}
			}
			if !f.additionalOK() {
				return out
			}
			f.phase, f.a = objColon, -1
			return append(out, t)
		}
		lo, hi := f.a, f.b
		for lo < hi && (len(n.props[lo].key) <= int(f.c) || n.props[lo].key[f.c] < x) {
			lo++
		}
		for hi > lo && (len(n.props[hi-1].key) <= int(f.c) || n.props[hi-1].key[f.c] > x) {
			hi--
		}
		// Names are sorted, so those sharing the prefix plus x are a range; a property with
		// the shorter name equal to the prefix sorts first and is skipped by lo.
		liveKnown := false
		av := available(f)
		for i := lo; i < hi; i++ {
			if av&(1<<i) != 0 {
				liveKnown = true
				break
			}
		}
		extraOK := f.additionalOK() && x >= 0x20 && x < 0x7f && x != '\\' && f.c < maxExtraKey
		if !liveKnown && !extraOK {
			return out
		}
		if lo == hi {
			lo, hi = 0, 0 // an additional name: one state whatever the known names it left
		}
		f.a, f.b, f.c = lo, hi, f.c+1
		return append(out, t)
	case objColon:
		if x != ':' {
			return out
		}
		vn := n.additional
		if f.a >= 0 {
			vn = n.props[f.a].node
			f.v |= 1 << f.a
		}
		f.phase = objAfter
		return append(out, t.push(frame{kind: fValue, n: vn, space: true}))
	}
	return out
}

func feedArray(t thread, x byte, out []thread) []thread {
	f := &t.top
	n := f.n
	count := int(f.a)
	canClose := count >= n.minItems
	next := n.item(count)
	canItem := next != nil && next.sat
	switch f.phase {
	case arrOpen:
		if x == ']' && canClose {
			return append(out, t.pop())
		}
		if !canItem {
			return out
		}
		f.a, f.phase = f.a+1, arrAfter
		return startValue(t.push(frame{}), next, x, out)
	case arrAfter:
		switch {
		case x == ']' && canClose:
			return append(out, t.pop())
		case x == ',' && canItem:
			f.a++
			return append(out, t.push(frame{kind: fValue, n: next, space: true}))
		}
	}
	return out
}

// char counts a code point of a string. Without a maximum the count only matters up to the
// minimum: saturating it keeps the states of a long string equal, so their masks are cached
// once (and plain bytes leave the state unchanged: see neutral).
func (f *frame) char() {
	f.a++
	if f.n.maxLen < 0 && int(f.a) > f.n.minLen {
		f.a = int32(f.n.minLen)
	}
}

// neutral reports whether byte x leaves the single thread ts[0] exactly as it is: a plain
// character inside a string whose count has saturated. The mask walk skips the matcher for
// these, which are most of a vocabulary's bytes in the costliest state (inside a string).
func neutral(ts []thread, x byte) bool {
	if len(ts) != 1 || x < 0x20 || x >= 0x80 || x == '"' || x == '\\' {
		return false
	}
	f := &ts[0].top
	return f.kind == fString && f.esc == 0 && f.need == 0 && f.n.pattern == nil && f.n.maxLen < 0 && int(f.a) >= f.n.minLen
}

func feedString(t thread, x byte, out []thread) []thread {
	f := &t.top
	n := f.n
	room := n.maxLen < 0 || int(f.a) < n.maxLen
	switch {
	case f.need > 0:
		if x < f.lo8 || x > f.hi8 {
			return out
		}
		f.need--
		f.lo8, f.hi8 = 0x80, 0xbf
		if f.need == 0 {
			f.char()
		}
		return append(out, t)
	case f.esc == 1:
		switch x {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.esc = 0
			f.char()
		case 'u':
			f.esc = 2
		default:
			return out
		}
		return append(out, t)
	case f.esc >= 2:
		hex := x >= '0' && x <= '9' || x >= 'a' && x <= 'f' || x >= 'A' && x <= 'F'
		if !hex || f.esc == 2 && (x == 'd' || x == 'D') {
			// A first digit D would begin a surrogate, which must come in pairs: refused.
			return out
		}
		if f.esc++; f.esc == 6 {
			f.esc = 0
			f.char()
		}
		return append(out, t)
	}
	if n.pattern != nil {
		if x == '"' {
			if !accepts(f.v) {
				return out
			}
			return append(out, t.pop())
		}
		s := n.pattern.step(f.v, x)
		if s == 0 {
			return out
		}
		f.v = s
		return append(out, t)
	}
	switch {
	case x == '"':
		if int(f.a) < n.minLen {
			return out
		}
		return append(out, t.pop())
	case !room || x < 0x20:
		return out
	case x == '\\':
		f.esc = 1
	case x < 0x80:
		f.char()
	case x >= 0xc2 && x <= 0xdf:
		f.need, f.lo8, f.hi8 = 1, 0x80, 0xbf
	case x >= 0xe0 && x <= 0xef:
		f.need, f.lo8, f.hi8 = 2, 0x80, 0xbf
		if x == 0xe0 {
			f.lo8 = 0xa0 // no overlong forms
		} else if x == 0xed {
			f.hi8 = 0x9f // no surrogates
		}
	case x >= 0xf0 && x <= 0xf4:
		f.need, f.lo8, f.hi8 = 3, 0x80, 0xbf
		if x == 0xf0 {
			f.lo8 = 0x90
		} else if x == 0xf4 {
			f.hi8 = 0x8f
		}
	default:
		return out
	}
	return append(out, t)
}

// Number frames: phase 0 after '-', 1 in the integer part (a digits, value u), 2 after '.',
// 3 in the fraction (c digits, value v).
func feedNumber(t thread, x byte, out []thread) []thread {
	f := &t.top
	n := f.n
	g := *f
	switch {
	case x == '-' && f.phase == 0 && !f.neg && f.a == 0:
		g.neg = true
	case x >= '0' && x <= '9':
		d := uint64(x - '0')
		switch g.phase {
		case 0, 1:
			if g.a >= maxIntDigits || g.a == 1 && g.u == 0 {
				return out // no leading zeros
			}
			g.phase, g.a, g.u = 1, g.a+1, g.u*10+d
		case 2, 3:
			if g.c >= maxFracDigits {
				return out
			}
			g.phase, g.c, g.v = 3, g.c+1, g.v*10+d
		}
	case x == '.' && g.phase == 1 && !n.integer:
		g.phase = 2
	default:
		// The number ends before x: it must be complete, and x belongs to what follows.
		if !numberComplete(f) {
			return out
		}
		return feed(t.pop(), x, out)
	}
	if !numberFeasible(&g) {
		return out
	}
	t.top = g
	return append(out, t)
}

func numberComplete(f *frame) bool {
	if f.phase != 1 && f.phase != 3 {
		return false
	}
	if f.neg && f.u == 0 && f.v == 0 {
		return false // no negative zero ("-0", "-0.0"): it is 0, and reads as a slip
	}
	n := f.n
	if n.lo == nil && n.hi == nil {
		return true
	}
	return inRange(n, numberValue(f))
}

func numberValue(f *frame) *big.Rat {
	v := new(big.Rat).SetUint64(f.u)
	if f.c > 0 {
		fr := new(big.Rat).SetFrac(new(big.Int).SetUint64(f.v), pow10(int(f.c)))
		v.Add(v, fr)
	}
	if f.neg {
		v.Neg(v)
	}
	return v
}

func inRange(n *node, v *big.Rat) bool {
	if n.lo != nil {
		if c := v.Cmp(n.lo); c < 0 || c == 0 && n.loOpen {
			return false
		}
	}
	if n.hi != nil {
		if c := v.Cmp(n.hi); c > 0 || c == 0 && n.hiOpen {
			return false
		}
	}
	return true
}

func pow10(k int) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(k)), nil) }

// numberStartable reports whether any number within n's bounds can be written.
func numberStartable(n *node) bool {
	return numberFeasible(&frame{n: n}) || numberFeasible(&frame{n: n, neg: true})
}

// numberFeasible reports whether the number prefix in f extends to a complete number within the
// bounds (and the digit limits). Its completions have magnitudes in intervals [a, b), on the grid
// of 10^-F (F the fraction digits allowed); the prefix is feasible when a grid point of one of
// them gives a value in range.
func numberFeasible(f *frame) bool {
	n := f.n
	if n.lo == nil && n.hi == nil && (!f.neg || f.u != 0 || f.v != 0) {
		return true // only a negative zero's prefix can fail without bounds
	}
	F := maxFracDigits
	if n.integer {
		F = 0
	}
	grid := new(big.Rat).SetFrac(big.NewInt(1), pow10(F))
	try := func(a, b *big.Rat) bool { return gridPoint(n, f.neg, a, b, grid) }
	switch f.phase {
	case 0: // only a sign (or nothing): any magnitude below 10^15
		return try(new(big.Rat), new(big.Rat).SetInt(pow10(maxIntDigits)))
	case 1:
		ip := new(big.Rat).SetUint64(f.u)
		if f.u == 0 { // a leading zero: no more integer digits
			return try(ip, new(big.Rat).SetInt64(1))
		}
		for j := 0; j <= maxIntDigits-int(f.a); j++ {
			s := new(big.Rat).SetInt(pow10(j))
			a := new(big.Rat).Mul(ip, s)
			b := new(big.Rat).Mul(new(big.Rat).Add(ip, big.NewRat(1, 1)), s)
			if try(a, b) {
				return true
			}
		}
		return false
	}
	a := new(big.Rat).SetUint64(f.u)
	if f.c > 0 {
		a.Add(a, new(big.Rat).SetFrac(new(big.Int).SetUint64(f.v), pow10(int(f.c))))
	}
	w := new(big.Rat).SetFrac(big.NewInt(1), pow10(int(f.c)))
	return try(a, new(big.Rat).Add(a, w))
}

// gridPoint reports whether some magnitude m in [a, b) on the grid gives ±m within n's bounds.
func gridPoint(n *node, neg bool, a, b, grid *big.Rat) bool {
	// Bounds on the magnitude: for a negative number they flip.
	lo, loOpen, hi, hiOpen := n.lo, n.loOpen, n.hi, n.hiOpen
	if neg {
		lo, loOpen, hi, hiOpen = negOrNil(n.hi), n.hiOpen, negOrNil(n.lo), n.loOpen
	}
	// The smallest grid point >= a that meets the lower bound (a negative number's magnitude
	// is at least one grid step: no negative zero).
	m := new(big.Rat).Set(a)
	if neg && m.Sign() == 0 {
		m.Set(grid)
	}
	if lo != nil {
		if c := lo.Cmp(m); c > 0 || c == 0 && loOpen {
			m = ceilGrid(lo, grid, loOpen)
		}
	}
	if m.Cmp(b) >= 0 {
		return false
	}
	if hi != nil {
		if c := m.Cmp(hi); c > 0 || c == 0 && hiOpen {
			return false
		}
	}
	return true
}

func negOrNil(r *big.Rat) *big.Rat {
	if r == nil {
		return nil
	}
	return new(big.Rat).Neg(r)
}

// ceilGrid is the smallest multiple of grid >= x (> x when open).
func ceilGrid(x, grid *big.Rat, open bool) *big.Rat {
	q := new(big.Rat).Quo(x, grid)
	num, den := q.Num(), q.Denom()
	k := new(big.Int).Div(num, den) // floor for positive den (Euclidean)
	exact := new(big.Int).Mul(k, den).Cmp(num) == 0
	if !exact || open {
		k.Add(k, big.NewInt(1))
	}
	return new(big.Rat).Mul(new(big.Rat).SetInt(k), grid)
}
