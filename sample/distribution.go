package sample

import "math"

// Distribution is a probability distribution over token ids: sparse (IDs != nil, P[i] is the
// probability of IDs[i], IDs sorted by descending P, ties by ascending id) or dense (IDs == nil,
// P[id]). Ids absent from a sparse distribution have probability 0.
//
// Functions that fill a Distribution reuse its slices; a distribution that switches from sparse
// to dense drops its IDs buffer (IDs == nil is what marks it dense).
type Distribution struct {
	IDs []int32
	P   []float32
}

// Sparse reports whether d lists its support explicitly.
func (d *Distribution) Sparse() bool { return d.IDs != nil }

// Prob is the probability of id, 0 outside the support. A sparse lookup is a linear scan: sparse
// supports are short (top-k, top-p candidates), and the scan stops early at the common ids.
func (d *Distribution) Prob(id int) float32 {
	if d.IDs == nil {
		if id < 0 || id >= len(d.P) {
			return 0
		}
		return d.P[id]
	}
	for i, x := range d.IDs {
		if int(x) == id {
			return d.P[i]
		}
	}
	return 0
}

// Len is the number of entries: the support size when sparse, the vocabulary when dense.
func (d *Distribution) Len() int { return len(d.P) }

// ID is the token id of entry i (i itself when dense).
func (d *Distribution) ID(i int) int {
	if d.IDs == nil {
		return i
	}
	return int(d.IDs[i])
}

func (d *Distribution) setSparse(n int) {
	if d.IDs == nil {
		d.IDs = make([]int32, 0, max(n, 1))
	}
	d.IDs = d.IDs[:0]
	d.P = d.P[:0]
}

func (d *Distribution) setDense(n int) {
	d.IDs = nil
	if cap(d.P) < n {
		d.P = make([]float32, n)
	}
	d.P = d.P[:n]
}

// OneHot makes d the sparse distribution certain of id.
func (d *Distribution) OneHot(id int) {
	d.setSparse(1)
	d.IDs = append(d.IDs, int32(id))
	d.P = append(d.P, 1)
}

// Argmax is the id of the largest logit; the lowest id wins ties, so greedy decoding is
// deterministic and the target and a greedy draft agree on tied rows. NaN logits never win
// (unless every logit is NaN, when 0 is returned); -1 for an empty slice.
func Argmax(logits []float32) int {
	best, bi := float32(math.Inf(-1)), -1
	for i, v := range logits {
		// Strictly greater: a later id with an equal logit loses the tie.
		if v > best {
			best, bi = v, i
		}
	}
	if bi < 0 {
		return firstNotNaN(logits)
	}
	return bi
}

// firstNotNaN is the argmax when no logit exceeds -Inf: the lowest id among the -Inf ones.
func firstNotNaN(logits []float32) int {
	if len(logits) == 0 {
		return -1
	}
	for i, v := range logits {
		if v == v {
			return i
		}
	}
	return 0
}

// Residual writes norm(max(p - q, 0)) into dst: the distribution a rejected speculative token is
// replaced from, so that accept-or-resample yields exactly p. dst is dense when p is dense and
// sparse (over p's support, zeros dropped) when p is sparse. A sparse q is looked up on its
// support only; p outside that support is left intact (q is 0 there). ok is false when the
// residual is all zero (q >= p everywhere, i.e. p == q), and then the caller draws from p. dst
// must not share buffers with p or q.
func Residual(dst *Distribution, p, q *Distribution) (ok bool) {
	var sum float64
	switch {
	case p.IDs == nil:
		dst.setDense(len(p.P))
		if q.IDs == nil {
			for i, pv := range p.P {
				var qv float32
				if i < len(q.P) {
					qv = q.P[i]
				}
				r := pv - qv
				if !(r > 0) {
					r = 0
				}
				dst.P[i] = r
				sum += float64(r)
			}
		} else {
			copy(dst.P, p.P)
			for j, id := range q.IDs {
				if id < 0 || int(id) >= len(dst.P) {
					continue
				}
				r := dst.P[id] - q.P[j]
				if !(r > 0) {
					r = 0
				}
				dst.P[id] = r
			}
			for _, r := range dst.P {
				sum += float64(r)
			}
		}
	case q.IDs == nil:
		dst.setSparse(len(p.P))
		for j, id := range p.IDs {
			r := p.P[j] - q.Prob(int(id))
			if r > 0 {
				dst.IDs = append(dst.IDs, id)
				dst.P = append(dst.P, r)
				sum += float64(r)
			}
		}
		sortByProb(dst.IDs, dst.P)
	default:
		// Both sparse: sort a copy of p by id once and binary-search q's support in it, so the
		// cost is O((|p| + |q|) log |p|) rather than |p| * |q| lookups.
		dst.setSparse(len(p.P))
		dst.IDs = append(dst.IDs, p.IDs...)
		dst.P = append(dst.P, p.P...)
		sortByID(dst.IDs, dst.P)
		for j, id := range q.IDs {
			if k := searchID(dst.IDs, id); k >= 0 {
				r := dst.P[k] - q.P[j]
				if !(r > 0) {
					r = 0
				}
				dst.P[k] = r
			}
		}
		n := 0
		for k, r := range dst.P {
			if r > 0 {
				dst.IDs[n], dst.P[n] = dst.IDs[k], r
				n++
				sum += float64(r)
			}
		}
		dst.IDs, dst.P = dst.IDs[:n], dst.P[:n]
		sortByProb(dst.IDs, dst.P)
	}
	if !(sum > 0) {
		return false
	}
	inv := float32(1 / sum)
	for i := range dst.P {
		dst.P[i] *= inv
	}
	return true
}

// searchID finds id in ids sorted ascending; -1 when absent.
func searchID(ids []int32, id int32) int {
	lo, hi := 0, len(ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ids[m] < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ids) && ids[lo] == id {
		return lo
	}
	return -1
}

// sortByProb orders parallel (ids, p) by descending p, ties by ascending id: the order a sparse
// Distribution promises.
func sortByProb(ids []int32, p []float32) {
	heapSort(len(ids), func(a, b int) bool {
		return p[a] > p[b] || (p[a] == p[b] && ids[a] < ids[b])
	}, func(a, b int) {
		ids[a], ids[b] = ids[b], ids[a]
		p[a], p[b] = p[b], p[a]
	})
}

func sortByID(ids []int32, p []float32) {
	heapSort(len(ids), func(a, b int) bool { return ids[a] < ids[b] }, func(a, b int) {
		ids[a], ids[b] = ids[b], ids[a]
		p[a], p[b] = p[b], p[a]
	})
}

// heapSort sorts n elements so that less holds between neighbours, without allocating (the
// standard library's sort.Sort would box parallel slices in an interface).
func heapSort(n int, less func(a, b int) bool, swap func(a, b int)) {
	down := func(i, n int) {
		for {
			c := 2*i + 1
			if c >= n {
				return
			}
			// A max-heap under less puts the element that sorts last at the root.
			if c+1 < n && less(c, c+1) {
				c++
			}
			if !less(i, c) {
				return
			}
			swap(i, c)
			i = c
		}
	}
	for i := n/2 - 1; i >= 0; i-- {
		down(i, n)
	}
	for end := n - 1; end > 0; end-- {
		swap(0, end)
		down(0, end)
	}
}
