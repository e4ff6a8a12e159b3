package kernel

import "unsafe"

// DeltaRule runs one head's update and read of the gated delta rule over its state s, len(k)
// rows of len(u) floats: for each row e in order, se = s[e*dv:(e+1)*dv] becomes
// se + decay·se, then se + k[e]·u, and o (len(u), overwritten) accumulates q[e]·se from 0. Each
// element gets the bits of Axpy(se, decay, se), Axpy(se, k[e], u) and Axpy(o, q[e], se) called
// row by row onto a cleared o on the same path; the avx512 and amx paths do it in one pass over
// s instead of three (for len(u) a multiple of 16). q must hold len(k) floats.
func DeltaRule(s, o, k, q, u []float32, decay float32) {
	dk, dv := len(k), len(u)
	o = o[:dv]
	if dk == 0 || dv == 0 {
		clear(o)
		return
	}
	_, _ = s[dk*dv-1], q[dk-1]
	if active.deltaRule != nil && dv%16 == 0 {
		active.deltaRule(unsafe.SliceData(s), unsafe.SliceData(k), unsafe.SliceData(q), unsafe.SliceData(u), unsafe.SliceData(o), dk, dv, decay)
		return
	}
	deltaRuleAxpy(active, s, o, k, q, u, decay)
}

// deltaRuleAxpy is DeltaRule as three Axpy passes of path p per row.
func deltaRuleAxpy(p *impl, s, o, k, q, u []float32, decay float32) {
	dv := len(u)
	clear(o)
	for e, ke := range k {
		se := s[e*dv : (e+1)*dv]
		p.axpy(se, decay, se)
		p.axpy(se, ke, u)
		p.axpy(o, q[e], se)
	}
}
