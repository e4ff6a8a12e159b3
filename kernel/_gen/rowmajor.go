package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// dotsRows emits dotsRowsF32x<ISA>(y *float32, ldy int, q *float32, ldq, nq int, k *float32,
// ldk, d, n int, scale float32): y[i*ldy+t] = dot(q[i*ldq:], k[t*ldk:]) * scale over d elements,
// for i < nq and t < n. It is attention's scores of several queries over a row-major key head:
// keys are the outer loop, so each key row comes from memory once and is reused from L1 for every
// pair of queries. Each dot is dotF32x<ISA>'s (the same four accumulators over blocks of four
// vectors, single vectors into the first, the same reduction and scalar tail), then one scalar
// multiply: the bits of Dot(q_i, k_t) * scale, whatever nq or n is.
//
// With dt bf16 (dotsRowsBF16x<ISA>, k *uint16) the keys are a bf16 cache's: each key vector is
// widened exactly as it is loaded (zero-extend, shift into the high half), then the same
// operations run, so the bits are those of the f32 kernel over the widened keys.
func dotsRows(is isa, dt dtype) {
	name := "dotsRows" + dt.name + "x" + is.name
	TEXT(name, NOSPLIT, "func(y *float32, ldy int, q *float32, ldq, nq int, k *"+dt.gotyp+", ldk, d, n int, scale float32)")
	Pragma("noescape")
	Doc(name + " sets y[i*ldy+t] = Dot(q[i*ldq:], k[t*ldk:]) * scale over d elements for nq queries and n keys.")
	es := dt.size // bytes per key element
	yc := Load(Param("y"), GP64())
	ldy := Load(Param("ldy"), GP64())
	ldq := Load(Param("ldq"), GP64())
	kp := Load(Param("k"), GP64())
	left := Load(Param("n"), GP64())
	scale := Load(Param("scale"), XMM())
	SHLQ(U8(2), ldy)
	SHLQ(U8(2), ldq)
	lanes := 16 / is.halves
	vb := lanes * 4
	kb := lanes * es // key bytes per vector

	// group computes g queries (at qp, ldq apart) against the key at kp into yr (ldy apart).
	group := func(tag string, g int, qp, yr reg.GPVirtual) {
		qm := func(i, disp int) Mem {
			if i == 0 {
				return Mem{Base: qp, Disp: disp}
			}
			return Mem{Base: qp, Index: ldq, Scale: 1, Disp: disp}
		}
		acc := make([][]reg.VecVirtual, g)
		for i := range acc {
			acc[i] = make([]reg.VecVirtual, 4)
			for j := range acc[i] {
				acc[i][j] = is.vec()
				zero(is, acc[i][j])
			}
		}
		a, cnt := GP64(), GP64()
		MOVQ(kp, a)
		Load(Param("d"), cnt)
		// qp walks with the key; it is restored from the pass's start below.
		q0 := GP64()
		MOVQ(qp, q0)
		Label(name + tag + "block")
		CMPQ(cnt, U32(4*lanes))
		JL(LabelRef(name + tag + "vec"))
		for j := 0; j < 4; j++ {
			v := loadElems(is, dt, Mem{Base: a, Disp: j * kb})
			for i := 0; i < g; i++ {
				VFMADD231PS(qm(i, j*vb), v, acc[i][j])
			}
		}
		ADDQ(U32(4*kb), a)
		ADDQ(U32(4*vb), qp)
		SUBQ(U32(4*lanes), cnt)
		JMP(LabelRef(name + tag + "block"))
		Label(name + tag + "vec")
		CMPQ(cnt, U32(lanes))
		JL(LabelRef(name + tag + "reduce"))
		v := loadElems(is, dt, Mem{Base: a})
		for i := 0; i < g; i++ {
			VFMADD231PS(qm(i, 0), v, acc[i][0])
		}
		ADDQ(U32(kb), a)
		ADDQ(U32(vb), qp)
		SUBQ(U32(lanes), cnt)
		JMP(LabelRef(name + tag + "vec"))
		Label(name + tag + "reduce")
		s := make([]reg.VecVirtual, g)
		for i := 0; i < g; i++ {
			VADDPS(acc[i][1], acc[i][0], acc[i][0])
			VADDPS(acc[i][3], acc[i][2], acc[i][2])
			VADDPS(acc[i][2], acc[i][0], acc[i][0])
			s[i] = hsum(is, acc[i][0])
		}
		Label(name + tag + "tail")
		TESTQ(cnt, cnt)
		JE(LabelRef(name + tag + "store"))
		t := loadElem(dt, Mem{Base: a})
		for i := 0; i < g; i++ {
			VFMADD231SS(qm(i, 0), t, s[i])
		}
		ADDQ(Imm(uint64(es)), a)
		ADDQ(Imm(4), qp)
		DECQ(cnt)
		JMP(LabelRef(name + tag + "tail"))
		Label(name + tag + "store")
		MOVQ(q0, qp)
		for i := 0; i < g; i++ {
			VMULSS(scale, s[i], s[i])
		}
		VMOVSS(s[0], Mem{Base: yr})
		if g == 2 {
			VMOVSS(s[1], Mem{Base: yr, Index: ldy, Scale: 1})
		}
	}

	Label(name + "key")
	TESTQ(left, left)
	JE(LabelRef(name + "done"))
	qp, yr, qn := GP64(), GP64(), GP64()
	// Prefetch the key rowsAhead rows on, every line of its d elements. A cache's key rows
	// of one head are a row of all heads apart (4 KiB for Qwen3-0.6B's f32 cache), so each
	// is in a page of its own, where the hardware's stream prefetchers do not follow: without
	// this a long context's scores wait on memory row by row.
	pf, pe := GP64(), GP64()
	Load(Param("ldk"), pf)
	IMUL3Q(U32(rowsAhead*es), pf, pf)
	ADDQ(kp, pf)
	Load(Param("d"), pe)
	if es == 4 {
		SHLQ(U8(2), pe)
	} else {
		SHLQ(U8(1), pe)
	}
	ADDQ(pf, pe)
	Label(name + "pf")
	PREFETCHT0(Mem{Base: pf})
	ADDQ(U8(64), pf)
	CMPQ(pf, pe)
	JL(LabelRef(name + "pf"))
	Load(Param("q"), qp)
	MOVQ(yc, yr)
	Load(Param("nq"), qn)
	Label(name + "two")
	CMPQ(qn, U8(2))
	JL(LabelRef(name + "one"))
	group("G2", 2, qp, yr)
	LEAQ(Mem{Base: qp, Index: ldq, Scale: 2}, qp)
	LEAQ(Mem{Base: yr, Index: ldy, Scale: 2}, yr)
	SUBQ(U8(2), qn)
	JMP(LabelRef(name + "two"))
	Label(name + "one")
	TESTQ(qn, qn)
	JE(LabelRef(name + "next"))
	group("G1", 1, qp, yr)
	Label(name + "next")
	Load(Param("ldk"), qn)
	LEAQ(Mem{Base: kp, Index: qn, Scale: uint8(es)}, kp)
	ADDQ(U8(4), yc)
	DECQ(left)
	JMP(LabelRef(name + "key"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// axpyRows emits axpyRowsF32x<ISA>(out *float32, ldo int, p *float32, ldp, nq int, v *float32,
// ldv, d, n int): out[i*ldo+e] += p[i*ldp+t]*v[t*ldv+e] for t = 0, 1, ..., n-1 in order, e < d,
// i < nq. It is attention's weighted sum of values over a row-major value head for several
// queries: a pair of queries shares each value vector load, and each output element keeps one
// accumulator taking one fused multiply-add per t, which is what axpyF32x<ISA> does to it (its
// vector blocks, single vectors and scalar tail are all one FMA per element): the bits of
// Axpy(out_i, p_i[t], v_t) called for t = 0, 1, ..., whatever nq is. n must be positive.
// With dt bf16 (axpyRowsBF16x<ISA>, v *uint16) values are widened as they load, as dotsRows
// widens keys: the bits of the f32 kernel over the widened values.
func axpyRows(is isa, dt dtype) {
	name := "axpyRows" + dt.name + "x" + is.name
	TEXT(name, NOSPLIT, "func(out *float32, ldo int, p *float32, ldp, nq int, v *"+dt.gotyp+", ldv, d, n int)")
	Pragma("noescape")
	Doc(name + " adds p[i*ldp+t]*v[t*ldv:][:d] into out[i*ldo:][:d] for t < n in order, for nq queries; n > 0.")
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	p := Load(Param("p"), GP64())
	ldp := Load(Param("ldp"), GP64())
	qn := Load(Param("nq"), GP64())
	ldv := Load(Param("ldv"), GP64())
	SHLQ(U8(2), ldo)
	SHLQ(U8(2), ldp)
	es := dt.size // bytes per value element
	if es == 4 {
		SHLQ(U8(2), ldv)
	} else {
		SHLQ(U8(1), ldv)
	}
	lanes := 16 / is.halves
	vb := lanes * 4
	eb := lanes * es // value bytes per vector

	// chunk accumulates u vectors (or, scalar, one element) of g queries at element offset
	// ob/ve over all n positions.
	chunk := func(tag string, g, u int, scalar bool, ob, ve reg.GPVirtual) {
		om := func(i, disp int) Mem {
			if i == 0 {
				return Mem{Base: ob, Disp: disp}
			}
			return Mem{Base: ob, Index: ldo, Scale: 1, Disp: disp}
		}
		acc := make([][]reg.VecVirtual, g)
		for i := range acc {
			acc[i] = make([]reg.VecVirtual, u)
			for j := range acc[i] {
				if scalar {
					acc[i][j] = XMM()
					VMOVSS(om(i, 0), acc[i][j])
				} else {
					acc[i][j] = is.vec()
					VMOVUPS(om(i, j*vb), acc[i][j])
				}
			}
		}
		pp, vp, cnt := GP64(), GP64(), GP64()
		MOVQ(p, pp)
		MOVQ(ve, vp)
		Load(Param("n"), cnt)
		// The value rowsAhead rows on is prefetched, the lines of this chunk's vectors (see
		// dotsRows: each value row of a head is in a page of its own).
		pfd := GP64()
		Load(Param("ldv"), pfd)
		IMUL3Q(U32(rowsAhead*es), pfd, pfd)
		Label(name + tag + "t")
		if !scalar {
			for off := 0; off < u*eb; off += 64 {
				PREFETCHT0(Mem{Base: vp, Index: pfd, Scale: 1, Disp: off})
			}
		}
		w := make([]reg.VecVirtual, u)
		for j := range w {
			if scalar {
				w[j] = loadElem(dt, Mem{Base: vp})
			} else {
				w[j] = loadElems(is, dt, Mem{Base: vp, Disp: j * eb})
			}
		}
		for i := 0; i < g; i++ {
			pm := Mem{Base: pp}
			if i == 1 {
				pm = Mem{Base: pp, Index: ldp, Scale: 1}
			}
			if scalar {
				VFMADD231SS(pm, w[0], acc[i][0])
				continue
			}
			b := is.vec()
			VBROADCASTSS(pm, b)
			for j := range w {
				VFMADD231PS(w[j], b, acc[i][j])
			}
		}
		ADDQ(ldv, vp)
		ADDQ(U8(4), pp)
		DECQ(cnt)
		JNZ(LabelRef(name + tag + "t"))
		for i := range acc {
			for j := range acc[i] {
				if scalar {
					VMOVSS(acc[i][j], om(i, 0))
				} else {
					VMOVUPS(acc[i][j], om(i, j*vb))
				}
			}
		}
	}

	// group runs g queries over all d elements, then advances out and p past them.
	group := func(tag string, g int) {
		ob, ve, rem := GP64(), GP64(), GP64()
		MOVQ(out, ob)
		Load(Param("v"), ve)
		Load(Param("d"), rem)
		Label(name + tag + "four")
		CMPQ(rem, U32(4*lanes))
		JL(LabelRef(name + tag + "vec"))
		chunk(tag+"F", g, 4, false, ob, ve)
		ADDQ(U32(4*vb), ob)
		ADDQ(U32(4*eb), ve)
		SUBQ(U32(4*lanes), rem)
		JMP(LabelRef(name + tag + "four"))
		Label(name + tag + "vec")
		CMPQ(rem, U32(lanes))
		JL(LabelRef(name + tag + "scalar"))
		chunk(tag+"V", g, 1, false, ob, ve)
		ADDQ(U32(vb), ob)
		ADDQ(U32(eb), ve)
		SUBQ(U32(lanes), rem)
		JMP(LabelRef(name + tag + "vec"))
		Label(name + tag + "scalar")
		TESTQ(rem, rem)
		JE(LabelRef(name + tag + "next"))
		chunk(tag+"S", g, 1, true, ob, ve)
		ADDQ(Imm(4), ob)
		ADDQ(Imm(uint64(es)), ve)
		DECQ(rem)
		JMP(LabelRef(name + tag + "scalar"))
		Label(name + tag + "next")
		for i := 0; i < g; i++ {
			ADDQ(ldo, out)
			ADDQ(ldp, p)
		}
		SUBQ(U8(g), qn)
	}

	Label(name + "two")
	CMPQ(qn, U8(2))
	JL(LabelRef(name + "one"))
	group("G2", 2)
	JMP(LabelRef(name + "two"))
	Label(name + "one")
	TESTQ(qn, qn)
	JE(LabelRef(name + "done"))
	group("G1", 1)
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// rowsAhead is how many key or value rows ahead dotsRows and axpyRows prefetch.
const rowsAhead = 8

// loadElems loads one vector of f32 elements from m: as is for f32, or, for bf16, half as many
// bytes zero-extended to 32-bit lanes and shifted into their high halves, which is the exact
// f32 value of each bf16 (VPMOVZXWD zmm is AVX512F, ymm AVX2).
func loadElems(is isa, dt dtype, m Mem) reg.VecVirtual {
	v := is.vec()
	if dt.size == 4 {
		VMOVUPS(m, v)
		return v
	}
	VPMOVZXWD(m, v)
	VPSLLD(U8(16), v, v)
	return v
}

// loadElem loads one f32 element from m into the low lane of an xmm, widening a bf16 as
// loadElems does.
func loadElem(dt dtype, m Mem) reg.VecVirtual {
	t := XMM()
	if dt.size == 4 {
		VMOVSS(m, t)
		return t
	}
	g := GP32()
	MOVWLZX(m, g)
	SHLL(U8(16), g)
	VMOVD(g, t)
	return t
}
