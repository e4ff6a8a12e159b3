package grammar

// Finish returns bytes that complete s into a whole value (empty when s is complete): the
// required members only, the shallowest alternatives, the shortest strings and small numbers.
// It is what a decoder writes when it must end a constrained output on its own (the fake test
// backend writes it). It follows one of s's alternatives; each is completable by construction.
func (g *Grammar) Finish(s State) []byte {
	var out []byte
	// The length cap only guards the invariant that each step moves toward completion (the
	// shallowest alternatives, required members, bounded numbers): it is never reached.
	for len(s.ts) > 0 && !g.Complete(s) && len(out) < 1<<16 {
		s.ts = s.ts[:1]
		b, target, ok := nextByte(s.ts[0])
		if !ok {
			return out // cannot happen: every reachable state is completable
		}
		next, ok := g.Advance(s, []byte{b})
		if !ok {
			return out
		}
		// Starting a value forks a thread per alternative: keep the one begun on purpose (the
		// shallowest), or a recursive schema's deeper alternative could be followed forever.
		for i, t := range next.ts {
			if target != nil && t.top.n == target {
				next.ts[0], next.ts[i] = next.ts[i], next.ts[0]
				break
			}
		}
		s = next
		out = append(out, b)
	}
	return out
}

// nextByte is a byte that moves t toward completion, and the node whose value it starts (nil
// when it starts none).
func nextByte(t thread) (byte, *node, bool) {
	f := &t.top
	n := f.n
	switch f.kind {
	case fValue:
		return firstByte(n)
	case fLiteral:
		return n.lit[f.a], nil, true
	case fObject:
		canClose := n.required&^f.v == 0
		switch f.phase {
		case objOpen, objAfter:
			if canClose {
				return '}', nil, true
			}
			if f.phase == objAfter {
				return ',', nil, true
			}
			return '"', nil, true
		case objNext:
			return '"', nil, true
		case objColon:
			return ':', nil, true
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
					return k[f.c], nil, true
				}
			}
			return '"', nil, true
		}
	case fArray:
		if int(f.a) >= n.minItems {
			return ']', nil, true
		}
		if f.phase == arrAfter {
			return ',', nil, true
		}
		return firstByte(n.item(int(f.a)))
	case fString:
		switch {
		case f.need > 0:
			return f.lo8, nil, true
		case f.esc == 1:
			return 'n', nil, true
		case f.esc >= 2:
			return '0', nil, true
		case n.pattern != nil:
			b, ok := n.pattern.nextByte(f.v)
			return b, nil, ok
		case int(f.a) < n.minLen:
			return 'a', nil, true
		}
		return '"', nil, true
	case fNumber:
		if numberComplete(f) {
			if t.rest == nil {
				return 0, nil, false
			}
			return nextByte(t.pop())
		}
		for _, b := range []byte("0123456789.") {
			if len(feedNumber(t, b, nil)) > 0 {
				return b, nil, true
			}
		}
	}
	return 0, nil, false
}

// firstByte starts the shallowest instance of n: the byte and the node it starts.
func firstByte(n *node) (byte, *node, bool) {
	switch n.kind {
	case kAlt:
		var best *node
		for _, a := range n.alts {
			if a.sat && (best == nil || a.height < best.height) {
				best = a
			}
		}
		if best == nil {
			return 0, nil, false
		}
		return firstByte(best)
	case kObject:
		return '{', n, true
	case kArray:
		return '[', n, true
	case kString:
		return '"', n, true
	case kLiteral:
		return n.lit[0], n, true
	case kNumber:
		for _, b := range []byte("0123456789-") {
			if len(startValue(thread{top: frame{kind: fValue, n: n}}, n, b, nil)) > 0 {
				return b, n, true
			}
		}
	}
	return 0, nil, false
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
