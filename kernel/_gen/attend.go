package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// scoresRows emits scoresRowsF32x<ISA>(y *float32, ldy int, qt *float32, nq int, kt *float32,
// ldk, d, nv int): y[i*ldy+t] = sum_j qt[j*nq+i]*kt[j*ldk+t] for i < nq, j < d and t < nv*lanes.
// It is attention's scores of nq queries (transposed: element j of every query together) over
// one head-major key head: each key vector is loaded once for four queries, and four queries by
// two vectors keep eight fused multiply-add chains in flight. Every y[t] starts at 0 and takes
// its products in order j = 0, 1, ..., the bits of axpyRowsMax, so a query's scores depend
// neither on nq nor on the other queries. Whole vectors only: the caller pads kt rows and y
// past the positions it needs.
func scoresRows(is isa) {
	name := "scoresRowsF32x" + is.name
	TEXT(name, NOSPLIT, "func(y *float32, ldy int, qt *float32, nq int, kt *float32, ldk, d, nv int)")
	Pragma("noescape")
	Doc(name + " sets y[i*ldy+t] = sum_j qt[j*nq+i]*kt[j*ldk+t] for nq queries, d elements and nv whole vectors of positions.")
	y := Load(Param("y"), GP64())
	ldy := Load(Param("ldy"), GP64())
	q := Load(Param("qt"), GP64())
	nq := Load(Param("nq"), GP64())
	ldq := GP64() // bytes from element j of the queries to element j+1
	MOVQ(nq, ldq)
	SHLQ(U8(2), ldq)
	ldk := Load(Param("ldk"), GP64())
	SHLQ(U8(2), ldy)
	SHLQ(U8(2), ldk)
	ldy3 := GP64()
	LEAQ(Mem{Base: ldy, Index: ldy, Scale: 2}, ldy3)
	lanes := 16 / is.halves
	vb := lanes * 4

	// block computes g queries (at q) by u vectors (at kp) into yp.
	block := func(tag string, g, u int, yp, kp reg.GPVirtual) {
		acc := make([][]reg.VecVirtual, g)
		for i := range acc {
			acc[i] = make([]reg.VecVirtual, u)
			for v := range acc[i] {
				acc[i][v] = is.vec()
				zero(is, acc[i][v])
			}
		}
		mp, qp, cnt := GP64(), GP64(), GP64()
		MOVQ(kp, mp)
		MOVQ(q, qp)
		Load(Param("d"), cnt)
		Label(name + tag)
		w := make([]reg.VecVirtual, u)
		for v := range w {
			w[v] = is.vec()
			VMOVUPS(Mem{Base: mp, Disp: v * vb}, w[v])
		}
		for i := 0; i < g; i++ {
			b := is.vec()
			VBROADCASTSS(Mem{Base: qp, Disp: 4 * i}, b)
			for v := range w {
				VFMADD231PS(w[v], b, acc[i][v])
			}
		}
		ADDQ(ldk, mp)
		ADDQ(ldq, qp)
		DECQ(cnt)
		JNZ(LabelRef(name + tag))
		for i := 0; i < g; i++ {
			for v := 0; v < u; v++ {
				VMOVUPS(acc[i][v], scaled(yp, ldy, ldy3, i, v*vb))
			}
		}
	}
	// group runs g queries over all vectors, then advances q and y past them.
	group := func(tag string, g int) {
		yp, kp, left := GP64(), GP64(), GP64()
		MOVQ(y, yp)
		Load(Param("kt"), kp)
		Load(Param("nv"), left)
		Label(name + tag + "pair")
		CMPQ(left, U8(2))
		JL(LabelRef(name + tag + "single"))
		block(tag+"p", g, 2, yp, kp)
		ADDQ(U32(2*vb), yp)
		ADDQ(U32(2*vb), kp)
		SUBQ(U8(2), left)
		JMP(LabelRef(name + tag + "pair"))
		Label(name + tag + "single")
		TESTQ(left, left)
		JE(LabelRef(name + tag + "next"))
		block(tag+"s", g, 1, yp, kp)
		Label(name + tag + "next")
		for i := 0; i < g; i++ {
			ADDQ(ldy, y)
		}
		ADDQ(U8(4*g), q)
		SUBQ(U8(g), nq)
	}
	byQueryGroups(name, nq, group)
}

// weightedRows8 emits weightedRows8F32x<ISA>(out *float32, p *float32, ldp, nq int, v *float32,
// ldv, n int): out[i*8+e] = sum_t p[i*ldp+t]*v[t*ldv+e] for i < nq, e < 8, t < n.
// It is attention's weighted sum of values for heads of 8 over a row-major cache: a value row
// is one ymm register, loaded once for four queries; even and odd t go to two accumulators
// per query (eight chains), added at the end. The order of a query's sum depends only on t, so
// zero weights past a query's own span change nothing and nq does not matter. Both ISAs use
// ymm registers.
func weightedRows8(is isa) {
	name := "weightedRows8F32x" + is.name
	TEXT(name, NOSPLIT, "func(out *float32, p *float32, ldp, nq int, v *float32, ldv, n int)")
	Pragma("noescape")
	Doc(name + " sets out[i*8+e] = sum_t p[i*ldp+t]*v[t*ldv+e] for nq queries, 8 elements and n positions.")
	out := Load(Param("out"), GP64())
	p := Load(Param("p"), GP64())
	ldp := Load(Param("ldp"), GP64())
	nq := Load(Param("nq"), GP64())
	ldv := Load(Param("ldv"), GP64())
	SHLQ(U8(2), ldp)
	SHLQ(U8(2), ldv)
	ldp3 := GP64()
	LEAQ(Mem{Base: ldp, Index: ldp, Scale: 2}, ldp3)

	group := func(tag string, g int) {
		even := make([]reg.VecVirtual, g)
		odd := make([]reg.VecVirtual, g)
		for i := range even {
			even[i], odd[i] = YMM(), YMM()
			VXORPS(even[i], even[i], even[i])
			VXORPS(odd[i], odd[i], odd[i])
		}
		vp, pp, left := GP64(), GP64(), GP64()
		Load(Param("v"), vp)
		MOVQ(p, pp)
		Load(Param("n"), left)
		Label(name + tag + "pair")
		CMPQ(left, U8(2))
		JL(LabelRef(name + tag + "last"))
		w0, w1 := YMM(), YMM()
		VMOVUPS(Mem{Base: vp}, w0)
		VMOVUPS(Mem{Base: vp, Index: ldv, Scale: 1}, w1)
		for i := 0; i < g; i++ {
			b0, b1 := YMM(), YMM()
			VBROADCASTSS(scaled(pp, ldp, ldp3, i, 0), b0)
			VFMADD231PS(w0, b0, even[i])
			VBROADCASTSS(scaled(pp, ldp, ldp3, i, 4), b1)
			VFMADD231PS(w1, b1, odd[i])
		}
		LEAQ(Mem{Base: vp, Index: ldv, Scale: 2}, vp)
		ADDQ(U8(8), pp)
		SUBQ(U8(2), left)
		JMP(LabelRef(name + tag + "pair"))
		Label(name + tag + "last")
		TESTQ(left, left)
		JE(LabelRef(name + tag + "store"))
		w := YMM()
		VMOVUPS(Mem{Base: vp}, w)
		for i := 0; i < g; i++ {
			b := YMM()
			VBROADCASTSS(scaled(pp, ldp, ldp3, i, 0), b)
			VFMADD231PS(w, b, even[i])
		}
		Label(name + tag + "store")
		for i := 0; i < g; i++ {
			VADDPS(odd[i], even[i], even[i])
			VMOVUPS(even[i], Mem{Base: out, Disp: 32 * i})
		}
		ADDQ(U8(32*g), out)
		for i := 0; i < g; i++ {
			ADDQ(ldp, p)
		}
		SUBQ(U8(g), nq)
	}
	byQueryGroups(name, nq, group)
}

// maxF32 emits maxF32x<ISA>(x []float32) float32: the largest element, -Inf for none.
func maxF32(is isa) {
	name := "maxF32x" + is.name
	TEXT(name, NOSPLIT, "func(x []float32) float32")
	Pragma("noescape")
	Doc(name + " returns the largest element of x, or -Inf for an empty x.")
	xp := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	lanes := 16 / is.halves
	vb := lanes * 4
	m0, m1 := is.vec(), is.vec()
	VMOVUPS(expTab.Offset(ecNegInf*64), m0)
	VMOVUPS(expTab.Offset(ecNegInf*64), m1)
	Label(name + "pair")
	CMPQ(n, U32(2*lanes))
	JL(LabelRef(name + "vec"))
	VMAXPS(Mem{Base: xp}, m0, m0)
	VMAXPS(Mem{Base: xp, Disp: vb}, m1, m1)
	ADDQ(U32(2*vb), xp)
	SUBQ(U32(2*lanes), n)
	JMP(LabelRef(name + "pair"))
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "tail"))
	VMAXPS(Mem{Base: xp}, m0, m0)
	ADDQ(U32(vb), xp)
	SUBQ(U32(lanes), n)
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "reduce"))
	tm := newTailMask(is, n)
	t := is.vec()
	tm.load(Mem{Base: xp}, t)
	if is.halves == 1 {
		VMAXPS(t, m1, tm.k, m1) // merge-masked: dead lanes keep m1
	} else {
		ni := is.vec()
		VMOVUPS(expTab.Offset(ecNegInf*64), ni)
		VBLENDVPS(tm.mask, t, ni, ni)
		VMAXPS(ni, m1, m1)
	}
	Label(name + "reduce")
	VMAXPS(m1, m0, m0)
	r := hmax(is, m0)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// siluMul emits siluMulF32x<ISA>(g, u []float32): g[i] = (u[i]*g[i]) / (1 + exp(-g[i])) over len(g)
// elements, SwiGLU's activation. The exponential is expVec with shift 0 and scale -1, the bits
// ExpShift(g, g, 0, -1) gives, and the product, sum and quotient are single IEEE operations:
// the same bits as multiplying, calling ExpShift and dividing element by element on this path.
func siluMul(is isa) {
	name := "siluMulF32x" + is.name
	TEXT(name, NOSPLIT, "func(g, u []float32)")
	Pragma("noescape")
	Doc(name + " sets g[i] = u[i]*g[i] / (1 + exp(-g[i])) over len(g) elements.")
	gp := Load(Param("g").Base(), GP64())
	n := Load(Param("g").Len(), GP64())
	up := Load(Param("u").Base(), GP64())
	lanes := 16 / is.halves
	vb := lanes * 4
	zeroV, minus, ones := is.vec(), is.vec(), is.vec()
	zero(is, zeroV)
	VMOVUPS(expTab.Offset(ecC0*64), ones) // the polynomial's constant term is 1
	VSUBPS(ones, zeroV, minus)            // 0 - 1
	one := func(load func(src Mem, dst reg.VecVirtual), store func(src reg.VecVirtual, dst Mem)) {
		g, u := is.vec(), is.vec()
		load(Mem{Base: gp}, g)
		load(Mem{Base: up}, u)
		prod := is.vec()
		VMULPS(g, u, prod)
		expVec(is, g, zeroV, minus)
		VADDPS(ones, g, g)
		VDIVPS(g, prod, prod)
		store(prod, Mem{Base: gp})
	}
	plainLoad := func(src Mem, dst reg.VecVirtual) { VMOVUPS(src, dst) }
	plainStore := func(src reg.VecVirtual, dst Mem) { VMOVUPS(src, dst) }
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "tail"))
	one(plainLoad, plainStore)
	ADDQ(U32(vb), gp)
	ADDQ(U32(vb), up)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "done"))
	tm := newTailMask(is, n)
	one(tm.load, tm.store)
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// byQueryGroups emits the query loop of the attention kernels and their return: group(tag, g)
// handles g queries and subtracts g from nq; groups of four run while four remain, then one of
// two (the two query heads of a decode step's kv head share a pass), then single queries.
func byQueryGroups(name string, nq reg.Register, group func(tag string, g int)) {
	Label(name + "four")
	CMPQ(nq, U8(4))
	JL(LabelRef(name + "two"))
	group("G4", 4)
	JMP(LabelRef(name + "four"))
	Label(name + "two")
	CMPQ(nq, U8(2))
	JL(LabelRef(name + "one"))
	group("G2", 2)
	Label(name + "one")
	TESTQ(nq, nq)
	JE(LabelRef(name + "done"))
	group("G1", 1)
	JMP(LabelRef(name + "one"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// tailMask selects the first n lanes (0 < n < lanes) of a kernel's last, partial vector: an
// opmask on AVX-512, a vector with all-ones lanes on AVX2 (building it negates n).
type tailMask struct {
	is   isa
	k    reg.Register   // AVX-512
	mask reg.VecVirtual // AVX2
}

func newTailMask(is isa, n reg.Register) tailMask {
	t := tailMask{is: is}
	tb := GP64()
	if is.halves == 1 {
		t.k = K()
		LEAQ(expMask512, tb)
		KMOVW(Mem{Base: tb, Index: n, Scale: 2}, t.k)
		return t
	}
	t.mask = is.vec()
	LEAQ(expMask256, tb)
	NEGQ(n)
	VMOVUPS(Mem{Base: tb, Index: n, Scale: 4, Disp: 32}, t.mask)
	return t
}

// load reads the selected lanes of src into dst and zeroes the others.
func (t tailMask) load(src Mem, dst reg.VecVirtual) {
	if t.is.halves == 1 {
		VMOVUPS_Z(src, t.k, dst)
		return
	}
	VMASKMOVPS(src, t.mask, dst)
}

// store writes the selected lanes of src to dst.
func (t tailMask) store(src reg.VecVirtual, dst Mem) {
	if t.is.halves == 1 {
		VMOVUPS(src, t.k, dst)
		return
	}
	VMASKMOVPS(src, t.mask, dst)
}
