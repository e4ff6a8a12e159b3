package grammar

// Finish returns bytes that complete s into a whole value (empty when s is complete): the
// required members only, the shallowest alternatives, the shortest strings and small numbers.
// It is what a decoder writes when it must end a constrained output on its own (the fake test
// backend writes it). It follows one of s's alternatives; each is completable by construction.
func (g *Grammar) Finish(s State) []byte {
	var out []byte
	for len(s.ts) > 0 && !g.Complete(s) {
		s.ts = s.ts[:1]
		b, ok := nextByte(s.ts[0])
		if !ok {
			return out // cannot happen: every reachable state is completable
		}
		next, ok := g.Advance(s, []byte{b})
		if !ok {
			return out
		}
		s = next
		out = append(out, b)
	}
	return out
}

// nextByte is a byte that moves t toward completion.
func nextByte(t thread) (byte, bool) {
	f := &t.top
	n := f.n
	switch f.kind {
	case fValue:
		return firstByte(n)
	case fLiteral:
		return n.lit[f.a], true
	case fObject:
		canClose := n.required&^f.v == 0
		switch f.phase {
		case objOpen, objAfter:
			if canClose {
				return '}', true
			}
			if f.phase == objAfter {
				return ',', true
			}
			return '"', true
		case objNext:
			return '"', true
		case objColon:
			return ':', true
		case objKey:
			av := available(f)
			// The first required property the prefix still matches, else the first available.
			pick := -1
			for i := f.a; i < f.b; i++ {
				if av&(1<<i) != 0 && (pick < 0 || n.required&(1<<i) != 0 && n.required&(1<<pick) == 0) {
					pick = int(i)
				}
			}
			if pick >= 0 && (n.required&^f.v != 0 || f.b == f.a || !f.additionalOK()) {
				if k := n.props[pick].key; int(f.c) < len(k) {
					return k[f.c], true
				}
			}
			return '"', true
		}
	case fArray:
		if int(f.a) >= n.minItems {
			return ']', true
		}
		if f.phase == arrAfter {
			return ',', true
		}
		return firstByte(n.item(int(f.a)))
	case fString:
		switch {
		case f.need > 0:
			return f.lo8, true
		case f.esc == 1:
			return 'n', true
		case f.esc >= 2:
			return '0', true
		case n.pattern != nil:
			return n.pattern.nextByte(f.v)
		case int(f.a) < n.minLen:
			return 'a', true
		}
		return '"', true
	case fNumber:
		if numberComplete(f) {
			if t.rest == nil {
				return 0, false
			}
			return nextByte(t.pop())
		}
		for _, b := range []byte("0123456789.") {
			if len(feedNumber(t, b, nil)) > 0 {
				return b, true
			}
		}
	}
	return 0, false
}

// firstByte starts the shallowest instance of n.
func firstByte(n *node) (byte, bool) {
	switch n.kind {
	case kAlt:
		var best *node
		for _, a := range n.alts {
			if a.sat && (best == nil || a.height < best.height) {
				best = a
			}
		}
		if best == nil {
			return 0, false
		}
		return firstByte(best)
	case kObject:
		return '{', true
	case kArray:
		return '[', true
	case kString:
		return '"', true
	case kLiteral:
		return n.lit[0], true
	case kNumber:
		for _, b := range []byte("0123456789-") {
			if len(startValue(thread{top: frame{kind: fValue, n: n}}, n, b, nil)) > 0 {
				return b, true
			}
		}
	}
	return 0, false
}

// nextByte is the first byte of a shortest path from set to a match ('"' when set matches).
func (r *regex) nextByte(set uint64) (byte, bool) {
	if accepts(set) {
		return '"', true
	}
	type item struct {
		set   uint64
		first byte
	}
	seen := map[uint64]bool{set: true}
	q := []item{{set: set}}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		for b := byte(0x20); b < 0x7f; b++ {
			s := r.step(it.set, b)
			if s == 0 || seen[s] {
				continue
			}
			first := it.first
			if it.set == set {
				first = b
			}
			if accepts(s) {
				return first, true
			}
			seen[s] = true
			q = append(q, item{s, first})
		}
	}
	return 0, false
}
