// Command gen writes the amd64 assembly of package kernel (AVX-512 and AVX2+FMA paths) with avo.
// It lives in its own module under a leading-underscore folder so that avo never becomes a
// dependency of dflash itself; run it through `go generate ./kernel/`.
//
// Every panel kernel it emits keeps one accumulator per output element and adds the products in
// input order i = 0..K-1 with a fused multiply-add, whatever the number of rows or panels a call
// covers. That is what makes a row's result bitwise independent of the batch width and of the way
// MatMul splits panels across threads.
package main

import (
	"fmt"
	"math"

	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const panel = 16 // output rows per panel; must equal kernel.Panel

// prefetchAhead is how many bytes ahead of each panel stream the one-row kernels prefetch
// (0: none).
var prefetchAhead = 1024

// isa describes one vector instruction set the panel kernels are emitted for.
type isa struct {
	name   string // function-name suffix
	halves int    // vector registers per 16-lane panel row (1 for zmm, 2 for ymm)
	vec    func() reg.VecVirtual
	// panelsFor lists the panel counts of the passes for r rows, widest first, the last one 1.
	// A pass must fit its accumulators, weights and broadcasts in the register file (32 zmm /
	// 16 ymm) and should hold at least 8 independent accumulator chains, so that the 4-cycle
	// FMA latency does not limit two FMA pipes.
	panelsFor func(r int) []int
}

var (
	avx512 = isa{name: "512", halves: 1, vec: ZMM, panelsFor: func(r int) []int {
		if r == 1 {
			return []int{8, 4, 1}
		}
		return []int{4, 1}
	}}
	avx2 = isa{name: "256", halves: 2, vec: YMM, panelsFor: func(r int) []int {
		switch r {
		case 1:
			return []int{4, 1}
		case 2:
			return []int{2, 1}
		}
		return []int{1}
	}}
)

// dtype describes a weight element type stored in panels [np][K][16].
type dtype struct {
	name  string
	gotyp string
	size  int // bytes per element
}

var (
	bf16 = dtype{name: "BF16", gotyp: "uint16", size: 2}
	f32  = dtype{name: "F32", gotyp: "float32", size: 4}
)

func main() {
	ConstraintExpr("amd64,!purego")
	expConsts()
	for _, is := range []isa{avx512, avx2} {
		for _, dt := range []dtype{bf16, f32} {
			for r := 1; r <= 4; r++ {
				panels(is, dt, r)
			}
		}
		dot(is)
		axpy(is)
		expShift(is)
		axpyRowsMax(is)
		dotRows(is)
		scoresRows(is)
		weightedRows8(is)
		maxF32(is)
		siluMul(is)
		for _, dt := range []dtype{f32, bf16} {
			dotsRows(is, dt)
			axpyRows(is, dt)
		}
	}
	deltaRule()
	sum256()
	cpuid()
	xgetbv()
	quantKernels()
	quantExperiments()
	quantKernels256()
	quantActs()
	quantActsY()
	// 3 planes are the amx path's; 1 and 2 exist for benchmarks that price the split.
	for planes := 1; planes <= 3; planes++ {
		amxBF16(planes)
	}
	amxEmuBF16P3()
	amxBF16Pair(2)
	amxBF16Pair(3)
	splitBF16Row(2)
	splitBF16Row(3)
	Generate()
}

// scaled returns the address base + off*m + disp for m in 0..3, using index registers s1 (=off)
// and s3 (=3*off).
func scaled(base, s1, s3 reg.Register, m, disp int) Mem {
	switch m {
	case 0:
		return Mem{Base: base, Disp: disp}
	case 1:
		return Mem{Base: base, Index: s1, Scale: 1, Disp: disp}
	case 2:
		return Mem{Base: base, Index: s1, Scale: 2, Disp: disp}
	case 3:
		return Mem{Base: base, Index: s3, Scale: 1, Disp: disp}
	}
	panic(fmt.Sprintf("scaled: m=%d", m))
}

// panels emits panels<DT>R<R>x<ISA>(w, x, y, k, np, ldx, ldy): for np whole panels starting at
// w and rows r < R, y[r*ldy + p*16 + l] = sum_i W[p][i][l] * x[r*ldx + i].
//
// f32 panels are [K][16] floats. bf16 panels pair inputs: [ceil(K/2)][16][2], so one 32-bit lane
// l of a 64-byte load holds W[2t][l] in its low half and W[2t+1][l] in its high half. Shifting
// the lane left by 16 gives the first as f32, masking off the low half gives the second: two
// in-lane operations widen 32 weights exactly, with no shuffle.
func panels(is isa, dt dtype, rows int) {
	name := fmt.Sprintf("panels%sR%dx%s", dt.name, rows, is.name)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(w *%s, x, y *float32, k, np, ldx, ldy int)", dt.gotyp))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes %d activation rows against np whole %s panels.", name, rows, dt.name))
	w := Load(Param("w"), GP64())
	x := Load(Param("x"), GP64())
	y := Load(Param("y"), GP64())
	k := Load(Param("k"), GP64())
	np := Load(Param("np"), GP64())
	ldx := Load(Param("ldx"), GP64())
	ldy := Load(Param("ldy"), GP64())
	SHLQ(Imm(2), ldx)
	SHLQ(Imm(2), ldy)
	ldx3 := GP64()
	LEAQ(Mem{Base: ldx, Index: ldx, Scale: 2}, ldx3)
	ldy3 := GP64()
	LEAQ(Mem{Base: ldy, Index: ldy, Scale: 2}, ldy3)
	ps := GP64() // panel stride in bytes
	MOVQ(k, ps)
	if dt.size == 2 {
		// bf16: ceil(K/2) pairs of 64 bytes.
		INCQ(ps)
		ANDQ(I8(-2), ps)
		SHLQ(U8(5), ps)
	} else {
		SHLQ(U8(6), ps)
	}
	ps3 := GP64()
	LEAQ(Mem{Base: ps, Index: ps, Scale: 2}, ps3)

	var mask reg.VecVirtual // 0xffff0000 in every lane, for the high bf16 of a pair
	if dt.size == 2 {
		mask = is.vec()
		if is.halves == 1 {
			VPTERNLOGD(U8(0xff), mask, mask, mask)
		} else {
			VPCMPEQD(mask, mask, mask)
		}
		VPSLLD(U8(16), mask, mask)
	}
	hbytes := 64 / is.halves // bytes per vector register of weights

	pass := func(p int, tag string) {
		// acc[pi][h][r]
		acc := make([][][]reg.VecVirtual, p)
		for pi := range acc {
			acc[pi] = make([][]reg.VecVirtual, is.halves)
			for h := range acc[pi] {
				acc[pi][h] = make([]reg.VecVirtual, rows)
				for r := range acc[pi][h] {
					a := is.vec()
					zero(is, a)
					acc[pi][h][r] = a
				}
			}
		}
		wi := GP64()
		MOVQ(w, wi)
		var wi4 reg.GPVirtual // panel 4 of a pass wider than 4
		if p > 4 {
			wi4 = GP64()
			LEAQ(Mem{Base: wi, Index: ps, Scale: 4}, wi4)
		}
		advance := func(bytes int) {
			ADDQ(U32(bytes), wi)
			if p > 4 {
				ADDQ(U32(bytes), wi4)
			}
		}
		xi := GP64()
		MOVQ(x, xi)
		cnt := GP64()
		MOVQ(k, cnt)

		// fma (zmm) adds the weights of all panels times x[i] (x byte offset dx) into every
		// row; with 32 registers one broadcast per row serves all panels. The ymm kernels go
		// panel by panel (fmaPanel) and reload the broadcast, so that only one panel's weights
		// are live in the 16 registers.
		fma := func(wv [][]reg.VecVirtual, dx int) {
			for r := 0; r < rows; r++ {
				b := is.vec()
				VBROADCASTSS(scaled(xi, ldx, ldx3, r, dx), b)
				for pi := range wv {
					VFMADD231PS(wv[pi][0], b, acc[pi][0][r])
				}
			}
		}
		// load reads the weights at byte offset dw of panels p0..p1-1 and transforms each
		// register with f (identity for f32, the pair widening for bf16).
		load := func(dw, p0, p1 int, f func(raw reg.VecVirtual) (reg.VecVirtual, reg.VecVirtual)) (lo, hi [][]reg.VecVirtual) {
			for pi := p0; pi < p1; pi++ {
				var l, u []reg.VecVirtual
				for h := 0; h < is.halves; h++ {
					raw := is.vec()
					base, m := reg.Register(wi), pi
					if pi >= 4 {
						base, m = wi4, pi-4
					}
					src := scaled(base, ps, ps3, m, dw+h*hbytes)
					VMOVUPS(src, raw)
					a, b := f(raw)
					l, u = append(l, a), append(u, b)
				}
				lo, hi = append(lo, l), append(hi, u)
			}
			return lo, hi
		}
		// fmaPanel adds one panel's weights (both ymm halves) times x[i] into every row.
		fmaPanel := func(pi int, wv []reg.VecVirtual, dx int) {
			for r := 0; r < rows; r++ {
				b := is.vec()
				VBROADCASTSS(scaled(xi, ldx, ldx3, r, dx), b)
				for h := range wv {
					VFMADD231PS(wv[h], b, acc[pi][h][r])
				}
			}
		}
		// step handles input u of the unrolled block: one i for f32, the pair 2u, 2u+1 for bf16
		// (single: only the first of the pair, for an odd K's last input).
		step := func(u int, single bool) {
			if dt.size == 4 {
				if is.halves == 1 {
					wv, _ := load(u*64, 0, p, func(raw reg.VecVirtual) (reg.VecVirtual, reg.VecVirtual) { return raw, nil })
					fma(wv, u*4)
					return
				}
				for pi := 0; pi < p; pi++ {
					wv, _ := load(u*64, pi, pi+1, func(raw reg.VecVirtual) (reg.VecVirtual, reg.VecVirtual) { return raw, nil })
					fmaPanel(pi, wv[0], u*4)
				}
				return
			}
			widen := func(raw reg.VecVirtual) (reg.VecVirtual, reg.VecVirtual) {
				if single {
					VPSLLD(U8(16), raw, raw)
					return raw, nil
				}
				o := is.vec()
				if is.halves == 1 {
					VPANDD(mask, raw, o)
				} else {
					VPAND(mask, raw, o)
				}
				VPSLLD(U8(16), raw, raw)
				return raw, o
			}
			if is.halves == 1 {
				ev, od := load(u*64, 0, p, widen)
				fma(ev, 2*u*4)
				if !single {
					fma(od, (2*u+1)*4)
				}
				return
			}
			// ymm: panel by panel, so only one panel's weights need registers; each
			// accumulator still takes input 2u before 2u+1.
			for pi := 0; pi < p; pi++ {
				ev, od := load(u*64, pi, pi+1, widen)
				fmaPanel(pi, ev[0], 2*u*4)
				if !single {
					fmaPanel(pi, od[0], (2*u+1)*4)
				}
			}
		}
		per := 1 // inputs per step
		if dt.size == 2 {
			per = 2
		}
		const unroll = 2 // steps per loop iteration
		L := func(s string) string { return name + tag + s }
		Label(L("big"))
		CMPQ(cnt, U8(unroll*per))
		JL(LabelRef(L("one")))
		for u := 0; u < unroll; u++ {
			if prefetchAhead > 0 && rows == 1 {
				for pi := 0; pi < p; pi++ {
					base, m := reg.Register(wi), pi
					if pi >= 4 {
						base, m = wi4, pi-4
					}
					PREFETCHT0(scaled(base, ps, ps3, m, u*64+prefetchAhead))
				}
			}
			step(u, false)
		}
		advance(unroll * 64)
		ADDQ(U8(unroll*per*4), xi)
		SUBQ(U8(unroll*per), cnt)
		JMP(LabelRef(L("big")))
		Label(L("one"))
		CMPQ(cnt, U8(per))
		JL(LabelRef(L("last")))
		step(0, false)
		advance(64)
		ADDQ(U8(per*4), xi)
		SUBQ(U8(per), cnt)
		JMP(LabelRef(L("one")))
		Label(L("last"))
		if dt.size == 2 {
			TESTQ(cnt, cnt)
			JE(LabelRef(L("store")))
			step(0, true)
		}
		Label(L("store"))
		vbytes := panel * 4 / is.halves
		for pi := 0; pi < p; pi++ {
			for h := 0; h < is.halves; h++ {
				for r := 0; r < rows; r++ {
					VMOVUPS(acc[pi][h][r], scaled(y, ldy, ldy3, r, pi*panel*4+h*vbytes))
				}
			}
		}
	}

	passes := is.panelsFor(rows)
	if dt.size == 2 && rows == 1 && passes[0] > 4 {
		// One bf16 row streams from memory at 29-32 GB/s over 4 panels at a time and at
		// 26-30 over 8 (fewer concurrent streams suit the DRAM better), and drops to 19-25
		// when two threads each run 8; its arithmetic, twice f32's per byte, still keeps
		// up with 4 accumulators.
		passes = passes[1:]
	}
	for _, p := range passes {
		tag := fmt.Sprintf("P%d", p)
		Label(name + tag)
		CMPQ(np, U8(p))
		JL(LabelRef(name + tag + "end"))
		pass(p, tag)
		for i := 0; i < p; i++ {
			ADDQ(ps, w)
		}
		ADDQ(U32(p*panel*4), y)
		SUBQ(U8(p), np)
		JMP(LabelRef(name + tag))
		Label(name + tag + "end")
	}
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// zero clears v; the EVEX form of VXORPS needs AVX512DQ, so zmm registers use VPXORD (AVX512F).
func zero(is isa, v reg.VecVirtual) {
	if is.halves == 1 {
		VPXORD(v, v, v)
		return
	}
	VXORPS(v, v, v)
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}

// hsum reduces a vector to its lane sum in the low lane of the returned xmm, in a fixed order.
func hsum(is isa, v reg.VecVirtual) reg.VecVirtual {
	y := v.AsY().(reg.VecVirtual)
	if is.halves == 1 {
		hi := YMM()
		VEXTRACTF64X4(Imm(1), v, hi)
		VADDPS(hi, v.AsY(), hi)
		y = hi
	}
	x := XMM()
	VEXTRACTF128(Imm(1), y, x)
	lo := XMM()
	VADDPS(x, y.AsX(), lo)
	t := XMM()
	VMOVHLPS(lo, lo, t)
	VADDPS(t, lo, lo)
	VMOVSHDUP(lo, t)
	VADDSS(t, lo, lo)
	return lo
}

// dot emits dotF32x<ISA>(a, b []float32) float32 over len(a) elements: four vector
// accumulators over blocks of 4 vectors, then single vectors into the first, a fixed reduction,
// and a scalar tail added last.
func dot(is isa) {
	name := "dotF32x" + is.name
	TEXT(name, NOSPLIT, "func(a, b []float32) float32")
	Pragma("noescape")
	Doc(name + " returns sum a[i]*b[i] over len(a) elements.")
	a := Load(Param("a").Base(), GP64())
	b := Load(Param("b").Base(), GP64())
	n := Load(Param("a").Len(), GP64())
	lanes := 16 / is.halves
	vb := lanes * 4
	acc := make([]reg.VecVirtual, 4)
	for i := range acc {
		acc[i] = is.vec()
		zero(is, acc[i])
	}
	Label(name + "block")
	CMPQ(n, U32(4*lanes))
	JL(LabelRef(name + "vec"))
	for i := range acc {
		v := is.vec()
		VMOVUPS(Mem{Base: a, Disp: i * vb}, v)
		VFMADD231PS(Mem{Base: b, Disp: i * vb}, v, acc[i])
	}
	ADDQ(U32(4*vb), a)
	ADDQ(U32(4*vb), b)
	SUBQ(U32(4*lanes), n)
	JMP(LabelRef(name + "block"))
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "reduce"))
	v := is.vec()
	VMOVUPS(Mem{Base: a}, v)
	VFMADD231PS(Mem{Base: b}, v, acc[0])
	ADDQ(U32(vb), a)
	ADDQ(U32(vb), b)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "reduce")
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	s := hsum(is, acc[0])
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "done"))
	t := XMM()
	VMOVSS(Mem{Base: a}, t)
	VFMADD231SS(Mem{Base: b}, t, s)
	ADDQ(Imm(4), a)
	ADDQ(Imm(4), b)
	DECQ(n)
	JMP(LabelRef(name + "tail"))
	Label(name + "done")
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}

// axpy emits axpyF32x<ISA>(y []float32, a float32, x []float32): y[i] += a*x[i] over len(y).
func axpy(is isa) {
	name := "axpyF32x" + is.name
	TEXT(name, NOSPLIT, "func(y []float32, a float32, x []float32)")
	Pragma("noescape")
	Doc(name + " does y[i] += a*x[i] over len(y) elements.")
	yp := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	xp := Load(Param("x").Base(), GP64())
	as := Load(Param("a"), XMM())
	av := is.vec()
	VBROADCASTSS(as, av)
	lanes := 16 / is.halves
	vb := lanes * 4
	Label(name + "block")
	CMPQ(n, U32(4*lanes))
	JL(LabelRef(name + "vec"))
	for i := 0; i < 4; i++ {
		v := is.vec()
		VMOVUPS(Mem{Base: yp, Disp: i * vb}, v)
		VFMADD231PS(Mem{Base: xp, Disp: i * vb}, av, v)
		VMOVUPS(v, Mem{Base: yp, Disp: i * vb})
	}
	ADDQ(U32(4*vb), yp)
	ADDQ(U32(4*vb), xp)
	SUBQ(U32(4*lanes), n)
	JMP(LabelRef(name + "block"))
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "tail"))
	v := is.vec()
	VMOVUPS(Mem{Base: yp}, v)
	VFMADD231PS(Mem{Base: xp}, av, v)
	VMOVUPS(v, Mem{Base: yp})
	ADDQ(U32(vb), yp)
	ADDQ(U32(vb), xp)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "done"))
	t := XMM()
	VMOVSS(Mem{Base: yp}, t)
	VFMADD231SS(Mem{Base: xp}, as, t)
	VMOVSS(t, Mem{Base: yp})
	ADDQ(Imm(4), yp)
	ADDQ(Imm(4), xp)
	DECQ(n)
	JMP(LabelRef(name + "tail"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// sum256 emits sumF32x256(a []float32) float32 for the bandwidth probe: eight independent ymm
// adds per 256 bytes, so the loop is limited by memory, not by add latency. len(a) must be a
// multiple of 64.
func sum256() {
	TEXT("sumF32x256", NOSPLIT, "func(a []float32) float32")
	Pragma("noescape")
	Doc("sumF32x256 reads a (len a multiple of 64) and returns a sum of its elements.")
	p := Load(Param("a").Base(), GP64())
	n := Load(Param("a").Len(), GP64())
	acc := make([]reg.VecVirtual, 8)
	for i := range acc {
		acc[i] = YMM()
		VXORPS(acc[i], acc[i], acc[i])
	}
	Label("sumloop")
	CMPQ(n, Imm(64))
	JL(LabelRef("sumdone"))
	for i := range acc {
		VADDPS(Mem{Base: p, Disp: 32 * i}, acc[i], acc[i])
	}
	ADDQ(U32(256), p)
	SUBQ(Imm(64), n)
	JMP(LabelRef("sumloop"))
	Label("sumdone")
	for s := 4; s >= 1; s /= 2 {
		for i := 0; i < s; i++ {
			VADDPS(acc[i+s], acc[i], acc[i])
		}
	}
	r := hsum(avx2, acc[0])
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

func cpuid() {
	TEXT("cpuid", NOSPLIT, "func(leaf, sub uint32) (a, b, c, d uint32)")
	Doc("cpuid executes CPUID with EAX=leaf, ECX=sub.")
	Load(Param("leaf"), reg.EAX)
	Load(Param("sub"), reg.ECX)
	CPUID()
	Store(reg.EAX, Return("a"))
	Store(reg.EBX, Return("b"))
	Store(reg.ECX, Return("c"))
	Store(reg.EDX, Return("d"))
	RET()
}

func xgetbv() {
	TEXT("xgetbv", NOSPLIT, "func() (a, d uint32)")
	Doc("xgetbv reads XCR0, the register of state components the OS saves (EAX, EDX).")
	XORL(reg.ECX, reg.ECX)
	XGETBV()
	Store(reg.EAX, Return("a"))
	Store(reg.EDX, Return("d"))
	RET()
}

// Constants of the vectorized exp, each repeated over 16 lanes (64 bytes) so that zmm and ymm
// code can take them as full-width memory operands, keeping registers for the data.
const (
	ecLo = iota // clamp: exp(-105) is below half the smallest float32 denormal
	ecHi        // clamp: exp(89) overflows to +Inf; keeps Inf inputs from making NaN
	ecLog2e
	ecLn2Hi // ln 2 split so that n*ecLn2Hi is exact for |n| < 2^9
	ecLn2Lo
	ecC7 // Taylor coefficients 1/k!, k = 7 down to 0
	ecC6
	ecC5
	ecC4
	ecC3
	ecC2
	ecC1
	ecC0
	ecBias   // int32 127, the float32 exponent bias
	ecNegInf // -Inf, the start of a running maximum
	ecCount
)

var expTab, expMask256, expMask512 Mem

// expConsts emits the constant tables of expShift: the coefficients, the AVX2 tail masks (8
// all-ones lanes then 8 zero lanes: loading 8 lanes at offset 4*(8-rem) gives rem ones) and the
// AVX-512 opmasks (1<<rem)-1 for rem = 0..15.
func expConsts() {
	vals := [ecCount]float32{
		ecLo: -105, ecHi: 89, ecLog2e: 1.44269504088896341,
		ecLn2Hi: 0.693359375, ecLn2Lo: -2.12194440e-4,
		ecC7: 1.0 / 5040, ecC6: 1.0 / 720, ecC5: 1.0 / 120, ecC4: 1.0 / 24,
		ecC3: 1.0 / 6, ecC2: 0.5, ecC1: 1, ecC0: 1,
	}
	expTab = GLOBL("expconsts", attr.RODATA|attr.NOPTR)
	for c := 0; c < ecCount; c++ {
		bits := math.Float32bits(vals[c])
		switch c {
		case ecBias:
			bits = 127
		case ecNegInf:
			bits = 0xff800000
		}
		for l := 0; l < 16; l++ {
			DATA(c*64+l*4, U32(bits))
		}
	}
	expMask256 = GLOBL("expmask256", attr.RODATA|attr.NOPTR)
	for l := 0; l < 16; l++ {
		v := uint32(0)
		if l < 8 {
			v = 0xffffffff
		}
		DATA(l*4, U32(v))
	}
	expMask512 = GLOBL("expmask512", attr.RODATA|attr.NOPTR)
	for r := 0; r < 16; r++ {
		DATA(r*2, U16(uint16(1)<<r-1))
	}
}

// expShift emits expShiftF32x<ISA>(dst, src []float32, shift, scale float32) float32 over len(dst)
// elements: dst[i] = exp((src[i]-shift)*scale), returning their sum.
//
// x = n ln2 + r with n = round(x log2e) and |r| <= ln2/2 (Cody-Waite with a two-part ln 2), then
// e^r by the degree-7 Taylor polynomial (remainder below 1e-8 relative) in Horner form with
// fused multiply-adds, then the scaling by 2^n: VSCALEFPS on AVX-512, which underflows gradually
// to 0; on AVX2 two multiplications by 2^(n/2) and 2^(n-n/2), each a normal number over the
// clamped range, so the result is rounded once even when it is denormal. Every element is
// computed alone, so dst does not depend on the length or alignment of the call. The sum adds
// lanes into fixed accumulators and reduces them in a fixed order: it depends only on the data
// and its length.
func expShift(is isa) {
	name := "expShiftF32x" + is.name
	TEXT(name, NOSPLIT, "func(dst, src []float32, shift, scale float32) float32")
	Pragma("noescape")
	Doc(name + " sets dst[i] = exp((src[i]-shift)*scale) over len(dst) elements and returns their sum.")
	dp := Load(Param("dst").Base(), GP64())
	sp := Load(Param("src").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	lanes := 16 / is.halves
	vb := lanes * 4
	unroll := 4
	if is.halves == 2 {
		unroll = 2 // 16 ymm registers
	}
	shv, scv := is.vec(), is.vec()
	{
		t := Load(Param("shift"), XMM())
		VBROADCASTSS(t, shv)
		u := Load(Param("scale"), XMM())
		VBROADCASTSS(u, scv)
	}
	acc := make([]reg.VecVirtual, unroll)
	for i := range acc {
		acc[i] = is.vec()
		zero(is, acc[i])
	}
	body := func(x reg.VecVirtual) { expVec(is, x, shv, scv) }
	Label(name + "block")
	CMPQ(n, U32(unroll*lanes))
	JL(LabelRef(name + "vec"))
	for u := 0; u < unroll; u++ {
		x := is.vec()
		VMOVUPS(Mem{Base: sp, Disp: u * vb}, x)
		body(x)
		VMOVUPS(x, Mem{Base: dp, Disp: u * vb})
		VADDPS(x, acc[u], acc[u])
	}
	ADDQ(U32(unroll*vb), sp)
	ADDQ(U32(unroll*vb), dp)
	SUBQ(U32(unroll*lanes), n)
	JMP(LabelRef(name + "block"))
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "tail"))
	{
		x := is.vec()
		VMOVUPS(Mem{Base: sp}, x)
		body(x)
		VMOVUPS(x, Mem{Base: dp})
		VADDPS(x, acc[0], acc[0])
	}
	ADDQ(U32(vb), sp)
	ADDQ(U32(vb), dp)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "reduce"))
	x := is.vec()
	tm := newTailMask(is, n)
	tm.load(Mem{Base: sp}, x)
	body(x)
	tm.store(x, Mem{Base: dp})
	if is.halves == 1 {
		VADDPS(x, acc[0], tm.k, acc[0])
	} else {
		VANDPS(tm.mask, x, x)
		VADDPS(x, acc[0], acc[0])
	}
	Label(name + "reduce")
	for s := unroll / 2; s >= 1; s /= 2 {
		for i := 0; i < s; i++ {
			VADDPS(acc[i+s], acc[i], acc[i])
		}
	}
	r := hsum(is, acc[0])
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// expVec sets x = exp((x-shv)*scv) in place with the constants of expShift; every kernel
// that calls it computes the same bits for the same inputs.
func expVec(is isa, x, shv, scv reg.VecVirtual) {
	c := func(i int) Mem { return expTab.Offset(i * 64) }
	VSUBPS(shv, x, x)
	VMULPS(scv, x, x)
	VMAXPS(c(ecLo), x, x)
	VMINPS(c(ecHi), x, x)
	nv := is.vec()
	VMULPS(c(ecLog2e), x, nv)
	if is.halves == 1 {
		VRNDSCALEPS(U8(0), nv, nv)
	} else {
		VROUNDPS(U8(0), nv, nv)
	}
	VFNMADD231PS(c(ecLn2Hi), nv, x)
	VFNMADD231PS(c(ecLn2Lo), nv, x)
	p := is.vec()
	VMOVUPS(c(ecC7), p)
	for k := ecC6; k <= ecC0; k++ {
		VFMADD213PS(c(k), x, p)
	}
	if is.halves == 1 {
		VSCALEFPS(nv, p, x)
		return
	}
	n1, n2 := is.vec(), is.vec()
	VCVTPS2DQ(nv, n2)
	VPSRAD(U8(1), n2, n1)
	VPSUBD(n1, n2, n2)
	VPADDD(c(ecBias), n1, n1)
	VPADDD(c(ecBias), n2, n2)
	VPSLLD(U8(23), n1, n1)
	VPSLLD(U8(23), n2, n2)
	VMULPS(n1, p, p)
	VMULPS(n2, p, x)
}

// hmax reduces a vector to its lane maximum in the low lane of the returned xmm.
func hmax(is isa, v reg.VecVirtual) reg.VecVirtual {
	y := v.AsY().(reg.VecVirtual)
	if is.halves == 1 {
		hi := YMM()
		VEXTRACTF64X4(Imm(1), v, hi)
		VMAXPS(hi, v.AsY(), hi)
		y = hi
	}
	x := XMM()
	VEXTRACTF128(Imm(1), y, x)
	lo := XMM()
	VMAXPS(x, y.AsX(), lo)
	t := XMM()
	VMOVHLPS(lo, lo, t)
	VMAXPS(t, lo, lo)
	VMOVSHDUP(lo, t)
	VMAXSS(t, lo, lo)
	return lo
}

// axpyRowsMax emits axpyRowsMaxF32x<ISA>(y []float32, a []float32, m *float32, ld int) float32:
// y[t] = sum_j a[j]*m[j*ld+t] for t < len(y), j < len(a), returning max_t y[t] (-Inf for an
// empty y). Each y[t] starts at 0 and takes its products in order j = 0, 1, ... with one fused
// multiply-add each: the bits of Axpy applied row by row onto a cleared y, in one pass.
func axpyRowsMax(is isa) {
	name := "axpyRowsMaxF32x" + is.name
	TEXT(name, NOSPLIT, "func(y, a []float32, m *float32, ld int) float32")
	Pragma("noescape")
	Doc(name + " sets y[t] = sum_j a[j]*m[j*ld+t] over len(y) and len(a) and returns the largest y[t].")
	yp := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	ab := Load(Param("a").Base(), GP64())
	d := Load(Param("a").Len(), GP64())
	mb := Load(Param("m"), GP64())
	ld := Load(Param("ld"), GP64())
	SHLQ(U8(2), ld)
	lanes := 16 / is.halves
	vb := lanes * 4
	const unroll, wide = 2, 8
	mx := is.vec()
	VMOVUPS(expTab.Offset(ecNegInf*64), mx)
	// column computes the columns of one or unroll vectors at byte offset 0 of mb; load
	// reads row data (with a mask in the tail).
	column := func(tag string, nv int, load func(src Mem, dst reg.VecVirtual)) []reg.VecVirtual {
		acc := make([]reg.VecVirtual, nv)
		for u := range acc {
			acc[u] = is.vec()
			zero(is, acc[u])
		}
		mp, ap, cnt := GP64(), GP64(), GP64()
		MOVQ(mb, mp)
		MOVQ(ab, ap)
		MOVQ(d, cnt)
		Label(name + tag + "j")
		TESTQ(cnt, cnt)
		JE(LabelRef(name + tag + "jdone"))
		b := is.vec()
		VBROADCASTSS(Mem{Base: ap}, b)
		for u := range acc {
			w := is.vec()
			load(Mem{Base: mp, Disp: u * vb}, w)
			VFMADD231PS(w, b, acc[u])
		}
		ADDQ(ld, mp)
		ADDQ(U8(4), ap)
		DECQ(cnt)
		JMP(LabelRef(name + tag + "j"))
		Label(name + tag + "jdone")
		return acc
	}
	plain := func(src Mem, dst reg.VecVirtual) { VMOVUPS(src, dst) }
	// blocks emits the loop at label name+tag over blocks of width vectors of columns (column
	// tag ct), going on to name+next when fewer remain.
	blocks := func(tag, ct, next string, width int) {
		Label(name + tag)
		CMPQ(n, U32(width*lanes))
		JL(LabelRef(name + next))
		for u, a := range column(ct, width, plain) {
			VMOVUPS(a, Mem{Base: yp, Disp: u * vb})
			VMAXPS(a, mx, mx)
		}
		ADDQ(U32(width*vb), yp)
		ADDQ(U32(width*vb), mb)
		SUBQ(U32(width*lanes), n)
		JMP(LabelRef(name + tag))
	}
	if is.halves == 1 {
		// Blocks of wide vectors first: one pass reads 8 whole cache lines of each row, where
		// the 2-vector blocks stride through the rows 8/unroll times (a delta-rule state of 128
		// columns from memory, whose rows lie 512 bytes apart). Every lane of mx still sees its
		// columns in ascending order, so the bits and the max are those of the narrower blocks.
		blocks("wide", "W", "block", wide)
	}
	blocks("block", "B", "vec", unroll)
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "tail"))
	acc := column("V", 1, plain)
	VMOVUPS(acc[0], Mem{Base: yp})
	VMAXPS(acc[0], mx, mx)
	ADDQ(U32(vb), yp)
	ADDQ(U32(vb), mb)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "reduce"))
	tm := newTailMask(is, n)
	acc = column("T", 1, tm.load)
	tm.store(acc[0], Mem{Base: yp})
	if is.halves == 1 {
		VMAXPS(acc[0], mx, tm.k, mx)
	} else {
		t := is.vec()
		VMOVUPS(expTab.Offset(ecNegInf*64), t)
		VBLENDVPS(tm.mask, acc[0], t, t)
		VMAXPS(t, mx, mx)
	}
	Label(name + "reduce")
	r := hmax(is, mx)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// dotRows emits dotRowsF32x<ISA>(out, x []float32, m *float32, ld int): out[j] = sum_t x[t] *
// m[j*ld+t] over len(out) rows and len(x) columns, each as dotF32x<ISA> computes it (the same
// four accumulators, blocks, reduction and scalar tail), so the bits equal Dot row by row.
func dotRows(is isa) {
	name := "dotRowsF32x" + is.name
	TEXT(name, NOSPLIT, "func(out, x []float32, m *float32, ld int)")
	Pragma("noescape")
	Doc(name + " sets out[j] = sum_t x[t]*m[j*ld+t] over len(out) rows and len(x) columns.")
	op := Load(Param("out").Base(), GP64())
	rows := Load(Param("out").Len(), GP64())
	xb := Load(Param("x").Base(), GP64())
	nx := Load(Param("x").Len(), GP64())
	mb := Load(Param("m"), GP64())
	ld := Load(Param("ld"), GP64())
	SHLQ(U8(2), ld)
	lanes := 16 / is.halves
	vb := lanes * 4
	Label(name + "row")
	TESTQ(rows, rows)
	JE(LabelRef(name + "done"))
	a, b, n := GP64(), GP64(), GP64()
	MOVQ(xb, a)
	MOVQ(mb, b)
	MOVQ(nx, n)
	acc := make([]reg.VecVirtual, 4)
	for i := range acc {
		acc[i] = is.vec()
		zero(is, acc[i])
	}
	Label(name + "block")
	CMPQ(n, U32(4*lanes))
	JL(LabelRef(name + "vec"))
	for i := range acc {
		v := is.vec()
		VMOVUPS(Mem{Base: a, Disp: i * vb}, v)
		VFMADD231PS(Mem{Base: b, Disp: i * vb}, v, acc[i])
	}
	ADDQ(U32(4*vb), a)
	ADDQ(U32(4*vb), b)
	SUBQ(U32(4*lanes), n)
	JMP(LabelRef(name + "block"))
	Label(name + "vec")
	CMPQ(n, U32(lanes))
	JL(LabelRef(name + "reduce"))
	v := is.vec()
	VMOVUPS(Mem{Base: a}, v)
	VFMADD231PS(Mem{Base: b}, v, acc[0])
	ADDQ(U32(vb), a)
	ADDQ(U32(vb), b)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "reduce")
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	s := hsum(is, acc[0])
	Label(name + "tail")
	TESTQ(n, n)
	JE(LabelRef(name + "store"))
	t := XMM()
	VMOVSS(Mem{Base: a}, t)
	VFMADD231SS(Mem{Base: b}, t, s)
	ADDQ(Imm(4), a)
	ADDQ(Imm(4), b)
	DECQ(n)
	JMP(LabelRef(name + "tail"))
	Label(name + "store")
	VMOVSS(s, Mem{Base: op})
	ADDQ(Imm(4), op)
	ADDQ(ld, mb)
	DECQ(rows)
	JMP(LabelRef(name + "row"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// deltaRule emits deltaRuleF32x512(s, k, q, u, o *float32, dk, dv int, decay float32): the
// update and read of one head of the gated delta rule over its state s [dk][dv] (dv a multiple
// of 16), in one pass over s. For each row e = 0..dk-1 and column t:
//
//	s[e][t] = fma(decay, s[e][t], s[e][t]); s[e][t] = fma(k[e], u[t], s[e][t]); o[t] = fma(q[e], s[e][t], o[t])
//
// with o starting at 0: per element the bits of Axpy(se, decay, se), Axpy(se, k[e], u) and
// Axpy(o, q[e], se) called row by row onto a cleared o, which read and write s three times.
// Columns go in groups of 8 vectors (then single vectors), each group's u and o in registers.
func deltaRule() {
	const name = "deltaRuleF32x512"
	TEXT(name, NOSPLIT, "func(s, k, q, u, o *float32, dk, dv int, decay float32)")
	Pragma("noescape")
	Doc(name + " runs one head's delta-rule update and read over s [dk][dv] (dv a multiple of 16) in one pass.")
	sp := Load(Param("s"), GP64())
	kb := Load(Param("k"), GP64())
	qb := Load(Param("q"), GP64())
	up := Load(Param("u"), GP64())
	op := Load(Param("o"), GP64())
	dk := Load(Param("dk"), GP64())
	n := Load(Param("dv"), GP64())
	ds := Load(Param("decay"), XMM())
	ld := GP64()
	MOVQ(n, ld)
	SHLQ(U8(2), ld)
	decay := ZMM()
	VBROADCASTSS(ds, decay)
	group := func(tag string, nv int) {
		u := make([]reg.VecVirtual, nv)
		o := make([]reg.VecVirtual, nv)
		for v := range u {
			u[v], o[v] = ZMM(), ZMM()
			VMOVUPS(Mem{Base: up, Disp: 64 * v}, u[v])
			VPXORD(o[v], o[v], o[v])
		}
		mp, kp, qp, cnt := GP64(), GP64(), GP64(), GP64()
		MOVQ(sp, mp)
		MOVQ(kb, kp)
		MOVQ(qb, qp)
		MOVQ(dk, cnt)
		Label(name + tag + "e")
		TESTQ(cnt, cnt)
		JE(LabelRef(name + tag + "edone"))
		kv, qv := ZMM(), ZMM()
		VBROADCASTSS(Mem{Base: kp}, kv)
		VBROADCASTSS(Mem{Base: qp}, qv)
		for v := range u {
			t := ZMM()
			VMOVUPS(Mem{Base: mp, Disp: 64 * v}, t)
			VFMADD231PS(t, decay, t)
			VFMADD231PS(u[v], kv, t)
			VMOVUPS(t, Mem{Base: mp, Disp: 64 * v})
			VFMADD231PS(t, qv, o[v])
		}
		ADDQ(ld, mp)
		ADDQ(U8(4), kp)
		ADDQ(U8(4), qp)
		DECQ(cnt)
		JMP(LabelRef(name + tag + "e"))
		Label(name + tag + "edone")
		for v := range o {
			VMOVUPS(o[v], Mem{Base: op, Disp: 64 * v})
		}
	}
	Label(name + "block")
	CMPQ(n, U32(8*16))
	JL(LabelRef(name + "vec"))
	group("B", 8)
	ADDQ(U32(8*64), sp)
	ADDQ(U32(8*64), up)
	ADDQ(U32(8*64), op)
	SUBQ(U32(8*16), n)
	JMP(LabelRef(name + "block"))
	Label(name + "vec")
	CMPQ(n, U32(16))
	JL(LabelRef(name + "done"))
	group("V", 1)
	ADDQ(U32(64), sp)
	ADDQ(U32(64), up)
	ADDQ(U32(64), op)
	SUBQ(U32(16), n)
	JMP(LabelRef(name + "vec"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}
