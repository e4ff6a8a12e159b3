package main

import (
	"fmt"
	"go/format"
	"os"
	"strconv"
	"strings"

	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The quantized panel kernels (AVX-512 with VNNI). Package kernel's qmatrix.go defines the
// panel-block layouts and qact.go the quantized activation blocks; the offsets below must match
// them. Each kernel computes, for np whole panels and rows r < R (R = 1..4), y[r*ldy + 16p + l]
// = the dot product of panel p's row l with activation row r, with exactly the integer sums and
// float steps of the portable reference (qportable.go): integer sums are exact in any order, and
// the float steps per block are the same multiplies and adds, operands swapped at most (IEEE
// multiplication and addition commute bitwise). A row's result therefore never depends on R, on
// the other rows, or on the panels a call covers.
//
// One vpdpbusd adds, in each 32-bit lane (output row l), the four products of the lane's four
// weight bytes (unsigned) with a broadcast group of four activation bytes (signed). The weights
// are therefore stored unsigned (Q8_0 as q+128, nibbles as they are) and the activation blocks
// carry the bias sums that undo the offsets.

// qPanels1 is how many panels the one-row AVX-512 kernels of the 32-block types stream at once
// (1..4). Alternated runs (loaded machine, weights cold, one thread) gave Q8_0 and Q4_0 about
// 10% more bandwidth over 4 panels than over 1, and the K-quants, whose blocks are 4-6 times
// larger, nothing or a loss; they stream one panel.
var qPanels1 = 4

// qtype describes one quantized panel-block type for the generator.
type qtype struct {
	name   string
	pbytes int // bytes of one panel block (qinfos in package kernel)
	abytes int // bytes of one activation block (act32Bytes / act256Bytes)
	// prefetch is how far ahead (bytes) the one-row kernel prefetches weights, every line of a
	// block issued at the block's start (0: none). Alternated cold streams over 512 MB of
	// 1024x1024 matrices, two threads (BENCHMARKS.md section 22): 256 bytes, i.e. mostly the
	// lines of the block about to be read, streamed Q4_K 12% and Q8_0 5% faster than 2048,
	// whose lines the hardware prefetcher mostly fetches anyway; Q6_K, whose blocks are read
	// in two places at once (nibbles and high bits), was flat from 768 to 2048 and 8% slower
	// at 256.
	prefetch int
	// spread issues the block's prefetches a share per sub-block (pfTick) rather than all at
	// the block's start. Q6_K, 53 lines a block: spread at 2368 bytes ahead streamed 8% faster
	// than all at the start 1024 ahead, on one thread and on two (alternated, one core busy
	// with another process); Q4_K was best unspread at 256.
	spread bool
	body   func(k *qk)
}

// qk holds the registers of one kernel being emitted.
type qk struct {
	rows   int
	w      reg.GPVirtual // current panel block
	a      reg.GPVirtual // current activation block of row 0
	lda    reg.GPVirtual // activation row stride, bytes
	lda3   reg.GPVirtual
	ps     reg.GPVirtual // panel stride, bytes
	ps3    reg.GPVirtual
	pi     int              // panel of the pass the body works on (0..3)
	acc    []reg.VecVirtual // per row: the f32 sums of the 16 output rows
	mask0f reg.VecVirtual   // 0x0f in every byte
	maskHi reg.VecVirtual   // the type's high-bit mask (0x10 Q5_K, 0x33 Q6_K), when it has one
	pfq    []Mem            // prefetches the body still has to issue (pfTick)
}

// pfTick issues the share of the pending prefetches due at sub-block s of n.
func (k *qk) pfTick(s, n int) {
	if len(k.pfq) == 0 {
		return
	}
	c := (len(k.pfq) + n - s - 1) / (n - s)
	for _, m := range k.pfq[:c] {
		PREFETCHT0(m)
	}
	k.pfq = k.pfq[c:]
}

// act is the address of byte off of the current activation block of row r.
func (k *qk) act(r, off int) Mem { return scaled(k.a, k.lda, k.lda3, r, off) }

// wm is the address of byte off of the current panel block of panel pi of the pass.
func (k *qk) wm(off int) Mem { return scaled(k.w, k.ps, k.ps3, k.pi, off) }

// vpdpbusdBcst emits VPDPBUSD.BCST m32, u8, acc (acc += per lane dot of u8's four unsigned
// bytes with the four signed bytes at m). avo's instruction table predates AVX512_VNNI, so the
// instruction is added by hand with its register use spelled out for the allocator.
func vpdpbusdBcst(m Mem, u8, acc reg.VecVirtual) {
	Instruction(&ir.Instruction{Opcode: "VPDPBUSD", Suffixes: []string{"BCST"},
		Operands: []Op{m, u8, acc}, Inputs: []Op{m, u8, acc}, Outputs: []Op{acc}, ISA: []string{"AVX512_VNNI"}})
}

// vpdpwssdBcst emits VPDPWSSD.BCST m32, w16, acc (acc += per lane dot of two signed words).
func vpdpwssdBcst(m Mem, w16, acc reg.VecVirtual) {
	Instruction(&ir.Instruction{Opcode: "VPDPWSSD", Suffixes: []string{"BCST"},
		Operands: []Op{m, w16, acc}, Inputs: []Op{m, w16, acc}, Outputs: []Op{acc}, ISA: []string{"AVX512_VNNI"}})
}

// zeroZ clears v. avo's VPXORD does not mark v^v as independent of v, which would keep every
// cleared register live from the function's entry; this one has no inputs.
func zeroZ(v reg.VecVirtual) {
	Instruction(&ir.Instruction{Opcode: "VPXORD", Operands: []Op{v, v, v}, Outputs: []Op{v}, ISA: []string{"AVX512F"}})
}

// bcastByte returns a zmm with byte b in every byte.
func bcastByte(b byte) reg.VecVirtual {
	t := GP32()
	MOVL(U32(uint32(b)*0x01010101), t)
	v := ZMM()
	VPBROADCASTD(t, v)
	return v
}

var qtypes = []qtype{
	{name: "Q8_0", pbytes: 544, abytes: 48, prefetch: 256, body: bodyQ8_0},
	{name: "Q4_0", pbytes: 288, abytes: 48, prefetch: 256, body: bodyQ4_0},
	{name: "Q4_K", pbytes: 2368, abytes: 352, prefetch: 256, body: func(k *qk) { bodyQ45K(k, false) }},
	{name: "Q5_K", pbytes: 2880, abytes: 352, prefetch: 256, body: func(k *qk) { bodyQ45K(k, true) }},
	{name: "Q6_K", pbytes: 3360, abytes: 352, prefetch: 2368, spread: true, body: bodyQ6_K},
}

func quantKernels() {
	for _, t := range qtypes {
		for r := 1; r <= 4; r++ {
			qpanels(t, r)
		}
	}
}

// qpanels emits qpanels<T>R<R>x512(w, a *byte, y *float32, nb, np, lda, ldy int): np whole
// panels of nb blocks each from w, activation rows at a + r*lda (bytes), outputs at
// y + r*ldy (floats).
func qpanels(t qtype, rows int) {
	xc := xcfg{pf: t.prefetch, pk: 1}
	if t.spread {
		xc.pft = 4
	}
	qpanelsNamed(t, rows, fmt.Sprintf("qpanels%sR%dx512", t.name, rows), xc)
}

// xcfg is one variant of a one-row kernel: prefetch distance (bytes, -1 the type's), prefetch
// kind (0 t0, 1 t1, 2 t2, 3 nta, all at the block's start; 4 t0 spread over the sub-blocks),
// panels per pass (1..4; 1 means the type's default), and body (0 the type's, else
// xbodies[name+body]).
type xcfg struct {
	pf, pft, pk, body int
}

// quantExperiments is an A/B tool for the one-row kernels: with QX="pf:pft:pk:body;..." set it
// also emits each listed variant of the Q8_0, Q4_K and Q6_K one-row kernels as qx<T>R1v<i>,
// and writes their table to ../qx_vars_test.go (build tag qx), which BenchmarkQX (qx_test.go)
// alternates pass by pass in one process:
//
//	cd kernel/_gen && QX="-1:0:1:0;256:0:1:0" go run . -out ../asm_amd64.s -stubs ../asm_amd64_stubs.go -pkg kernel
//	cd .. && QXT=2 go test -tags qx -run XXX -bench QX -benchtime=10x .
//
// Regenerate without QX (go generate) before committing.
func quantExperiments() {
	spec := os.Getenv("QX")
	if spec == "" {
		return
	}
	vars := strings.Split(spec, ";")
	for i, v := range vars {
		var c xcfg
		if _, err := fmt.Sscanf(v, "%d:%d:%d:%d", &c.pf, &c.pft, &c.pk, &c.body); err != nil {
			panic(fmt.Sprintf("QX %q: %v", v, err))
		}
		for _, t := range xtypes {
			tt, cc := qtypeByName(t), c
			if cc.pf < 0 {
				cc.pf = tt.prefetch
			}
			if b := xbodies[t+strconv.Itoa(c.body)]; c.body != 0 && b != nil {
				tt.body = b // a type without that body keeps its own
			}
			qpanelsNamed(tt, 1, fmt.Sprintf("qx%sR1v%d", t, i), cc)
		}
	}
	var b strings.Builder
	b.WriteString("// Code generated by kernel/_gen with QX set (quantExperiments). DO NOT EDIT.\n\n//go:build amd64 && qx\n\npackage kernel\n\n")
	fmt.Fprintf(&b, "// qxSpec is the QX the variants were generated from.\nconst qxSpec = %q\n\n", spec)
	b.WriteString("var qxVariants = map[DType][]func(w, a *byte, y *float32, nb, np, lda, ldy int){\n")
	for _, t := range xtypes {
		fmt.Fprintf(&b, "\t%s: {", t)
		for i := range vars {
			fmt.Fprintf(&b, "qx%sR1v%d, ", t, i)
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n")
	src, err := format.Source([]byte(b.String()))
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile("../qx_vars_test.go", src, 0o644); err != nil {
		panic(err)
	}
}

// xtypes are the types quantExperiments emits variants of.
var xtypes = []string{"Q8_0", "Q4_K", "Q6_K"}

func qtypeByName(name string) qtype {
	for _, t := range qtypes {
		if t.name == name {
			return t
		}
	}
	panic(name)
}

// xbodies holds experimental bodies by type name and body number (quantExperiments).
var xbodies = map[string]func(k *qk){}

// qpanelsNamed emits the kernel qpanels describes under name, one-row variant xc.
func qpanelsNamed(t qtype, rows int, name string, xc xcfg) {
	TEXT(name, NOSPLIT, "func(w, a *byte, y *float32, nb, np, lda, ldy int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes %d activation rows against np whole %s panels of nb blocks.", name, rows, t.name))
	k := &qk{rows: rows}
	k.w = Load(Param("w"), GP64()).(reg.GPVirtual)
	a0 := Load(Param("a"), GP64())
	y := Load(Param("y"), GP64())
	nb := Load(Param("nb"), GP64())
	np := Load(Param("np"), GP64())
	k.lda = Load(Param("lda"), GP64()).(reg.GPVirtual)
	ldy := Load(Param("ldy"), GP64())
	SHLQ(Imm(2), ldy)
	k.lda3 = GP64()
	LEAQ(Mem{Base: k.lda, Index: k.lda, Scale: 2}, k.lda3)
	ldy3 := GP64()
	LEAQ(Mem{Base: ldy, Index: ldy, Scale: 2}, ldy3)
	k.mask0f = bcastByte(0x0f)
	switch t.name {
	case "Q5_K":
		k.maskHi = bcastByte(0x10)
	case "Q6_K":
		k.maskHi = bcastByte(0x33) // crumbs 0 and 2 of each byte (bodyQ6_K)
	}
	k.a = GP64()
	cnt := GP64()
	// Panel stride, for passes over several panels at once.
	k.ps = GP64()
	IMUL3Q(U32(uint32(t.pbytes)), nb, k.ps)
	k.ps3 = GP64()
	LEAQ(Mem{Base: k.ps, Index: k.ps, Scale: 2}, k.ps3)

	// One row streams qPanels1 panels at a time (independent weight streams, as the bf16 one-row
	// kernels stream 4), then single panels; more rows go a panel at a time, their several rows
	// already giving the independent work.
	passes := []int{1}
	if rows == 1 && qPanels1 > 1 && t.pbytes < 1024 {
		passes = []int{qPanels1, 1}
	}
	if v := xc.pk; rows == 1 && v > 1 {
		passes = []int{v, 1}
	}
	for _, np1 := range passes {
		tag := fmt.Sprintf("P%d", np1)
		L := func(s string) string { return name + tag + s }
		Label(L("panel"))
		CMPQ(np, U8(np1))
		JL(LabelRef(L("end")))
		accs := make([][]reg.VecVirtual, np1)
		for pi := range accs {
			accs[pi] = make([]reg.VecVirtual, rows)
			for r := range accs[pi] {
				accs[pi][r] = ZMM()
				zeroZ(accs[pi][r])
			}
		}
		MOVQ(a0, k.a)
		MOVQ(nb, cnt)
		Label(L("block"))
		for pi := 0; pi < np1; pi++ {
			k.pi, k.acc = pi, accs[pi]
			if rows == 1 && xc.pf > 0 {
				// One row streams the weights once: prefetch the lines of the block
				// t.prefetch bytes ahead, as the bf16 one-row kernels do.
				pf := xc.pf
				// Spread: the body issues them over its sub-blocks (pfTick), the rest
				// after it.
				if xc.pft == 4 {
					for off := 0; off < t.pbytes; off += 64 {
						k.pfq = append(k.pfq, k.wm(pf+off))
					}
				}
				for off := 0; off < t.pbytes && xc.pft != 4; off += 64 {
					switch xc.pft {
					case 0:
						PREFETCHT0(k.wm(pf + off))
					case 1:
						PREFETCHT1(k.wm(pf + off))
					case 2:
						PREFETCHT2(k.wm(pf + off))
					case 3:
						PREFETCHNTA(k.wm(pf + off))
					}
				}
			}
			t.body(k)
			for _, m := range k.pfq {
				PREFETCHT0(m)
			}
			k.pfq = nil
		}
		k.pi = 0
		ADDQ(U32(t.pbytes), k.w)
		ADDQ(U32(t.abytes), k.a)
		DECQ(cnt)
		JNZ(LabelRef(L("block")))
		for pi := 0; pi < np1; pi++ {
			for r := 0; r < rows; r++ {
				VMOVUPS(accs[pi][r], scaled(y, ldy, ldy3, r, 64*pi))
			}
		}
		// w has advanced one panel; skip the other np1-1 of the pass.
		for pi := 1; pi < np1; pi++ {
			ADDQ(k.ps, k.w)
		}
		ADDQ(U32(uint32(64*np1)), y)
		SUBQ(U8(np1), np)
		JMP(LabelRef(L("panel")))
		Label(L("end"))
	}
	VZEROUPPER()
	RET()
}

// nibbles loads the vector at off and returns its low and high nibbles as bytes.
func (k *qk) nibbles(off int) (lo, hi reg.VecVirtual) {
	raw := ZMM()
	VMOVDQU64(k.wm(off), raw)
	lo, hi = ZMM(), ZMM()
	VPANDD(k.mask0f, raw, lo)
	VPSRLW(U8(4), raw, hi)
	VPANDD(k.mask0f, hi, hi)
	return lo, hi
}

// scale32 finishes a 32-input block: acc += f32(s) * (d*dx), with d the block's 16 f16 scales
// at offset 0 and dx the activation scale at byte 32 of the activation block.
func (k *qk) scale32(s []reg.VecVirtual) {
	d := ZMM()
	VCVTPH2PS(k.wm(0), d)
	for r := 0; r < k.rows; r++ {
		t := ZMM()
		VMULPS_BCST(k.act(r, 32), d, t)
		VCVTDQ2PS(s[r], s[r])
		VMULPS(t, s[r], s[r])
		VADDPS(s[r], k.acc[r], k.acc[r])
	}
}

// bodyQ8_0: s = bias(-128*sum x) + sum (q+128)*x over 8 groups, then the scale step.
func bodyQ8_0(k *qk) {
	s := make([]reg.VecVirtual, k.rows)
	for r := range s {
		s[r] = ZMM()
		VPBROADCASTD(k.act(r, 36), s[r])
	}
	for g := 0; g < 8; g++ {
		wv := ZMM()
		VMOVDQU64(k.wm(32+64*g), wv)
		for r := range s {
			vpdpbusdBcst(k.act(r, 4*g), wv, s[r])
		}
	}
	k.scale32(s)
}

// bodyQ4_0: s = bias(-8*sum x) + sum n*x, nibble vectors holding groups 2v and 2v+1.
func bodyQ4_0(k *qk) {
	s := make([]reg.VecVirtual, k.rows)
	for r := range s {
		s[r] = ZMM()
		VPBROADCASTD(k.act(r, 40), s[r])
	}
	for v := 0; v < 4; v++ {
		lo, hi := k.nibbles(32 + 64*v)
		for r := range s {
			vpdpbusdBcst(k.act(r, 4*(2*v)), lo, s[r])
			vpdpbusdBcst(k.act(r, 4*(2*v+1)), hi, s[r])
		}
	}
	k.scale32(s)
}

// highBits ORs into q (nibbles 0..15) Q5_K's fifth bit of one group from hb, moved to bit 4 by
// a word shift of shift bits (left if positive) and kept by maskHi, in one vpternlogd: the bit
// the mask keeps never crosses a byte.
func (k *qk) highBits(hb reg.VecVirtual, shift int, q reg.VecVirtual) {
	t := hb
	switch {
	case shift > 0:
		t = ZMM()
		VPSLLW(U8(shift), hb, t)
	case shift < 0:
		t = ZMM()
		VPSRLW(U8(-shift), hb, t)
	}
	VPTERNLOGD(U8(orAnd), k.maskHi, t, q)
}

// orAnd is the vpternlogd immediate of dst = dst | (B & C) (B, C the second and third operands).
const orAnd = 0xf8

// bodyQ45K: per sub-block j, t = sum q*x (q the nibble plus, for Q5_K, the fifth bit),
// sumi += sc_j*t; summ = sum m_j * sum32_j by word dot products on the min pairs; then
// acc += f32(sumi)*(d*dx) - f32(summ)*(dmin*dx).
func bodyQ45K(k *qk, five bool) {
	sumi := make([]reg.VecVirtual, k.rows)
	summ := make([]reg.VecVirtual, k.rows)
	for r := range sumi {
		sumi[r], summ[r] = ZMM(), ZMM()
		zeroZ(sumi[r])
		zeroZ(summ[r])
	}
	for j := 0; j < 8; j++ {
		k.pfTick(j, 8)
		t := make([]reg.VecVirtual, k.rows)
		for r := range t {
			t[r] = ZMM()
			zeroZ(t[r])
		}
		var hb reg.VecVirtual
		if five {
			hb = ZMM()
			VMOVDQU64(k.wm(2368+64*j), hb)
		}
		for v := 0; v < 4; v++ {
			lo, hi := k.nibbles(320 + 256*j + 64*v)
			if five {
				k.highBits(hb, 4-2*v, lo)
				k.highBits(hb, 4-(2*v+1), hi)
			}
			for r := range t {
				vpdpbusdBcst(k.act(r, 32*j+4*(2*v)), lo, t[r])
				vpdpbusdBcst(k.act(r, 32*j+4*(2*v+1)), hi, t[r])
			}
		}
		sc := ZMM()
		VPMOVZXBD(k.wm(64+16*j), sc)
		for r := range t {
			VPMULLD(sc, t[r], t[r])
			VPADDD(t[r], sumi[r], sumi[r])
		}
	}
	for p := 0; p < 4; p++ {
		mw := ZMM()
		VPMOVZXBW(k.wm(192+32*p), mw)
		for r := range summ {
			vpdpwssdBcst(k.act(r, 264+4*p), mw, summ[r])
		}
	}
	d, dm := ZMM(), ZMM()
	VCVTPH2PS(k.wm(0), d)
	VCVTPH2PS(k.wm(32), dm)
	for r := 0; r < k.rows; r++ {
		dd, dmm := ZMM(), ZMM()
		VMULPS_BCST(k.act(r, 256), d, dd)
		VMULPS_BCST(k.act(r, 256), dm, dmm)
		VCVTDQ2PS(sumi[r], sumi[r])
		VMULPS(dd, sumi[r], sumi[r])
		VCVTDQ2PS(summ[r], summ[r])
		VMULPS(dmm, summ[r], summ[r])
		VSUBPS(summ[r], sumi[r], sumi[r])
		VADDPS(sumi[r], k.acc[r], k.acc[r])
	}
}

// selLo is the vpternlogd immediate of dst = C ? dst : B per bit (C the third operand): with
// C = 0x0f per byte it keeps dst's low nibble and takes bits 4-7 from B.
const selLo = 0xe4

// bodyQ6_K: per sub-block s of 16, t = bias(-32*sum16 x) + sum q*x (q the nibble plus the two
// high bits, group c's at bits 2c of the crumb vector hb), sumi += sc_s*t; then
// acc += f32(sumi)*(d*dx). The crumb vector is split once per sub-block into hbm = hb & 0x33
// (crumbs 0 and 2 at bits 0-1 and 4-5 of each byte) and hbm2 = (hb >> 2) & 0x33 (crumbs 1 and
// 3); crumb c of a byte then sits at bits 4-5, bits 6-7 clear, in hbm<<4 (c=0), hbm2<<4 (c=1),
// hbm (c=2) and hbm2 (c=3), and one vpternlogd per group merges it above the group's nibble
// (selLo: bits 0-3 from the nibble, 4-7 from the crumb vector; the word shifts move bits across
// bytes only into the bits the select drops). Against the previous body (nibbles masked, then
// each group's crumbs shifted, masked and ORed in: 18 vector ALU instructions per sub-block
// besides the dot products, now 11) the one-row kernel ran 16% faster from L2.
func bodyQ6_K(k *qk) {
	sumi := make([]reg.VecVirtual, k.rows)
	for r := range sumi {
		sumi[r] = ZMM()
		zeroZ(sumi[r])
	}
	for s := 0; s < 16; s++ {
		k.pfTick(s, 16)
		t := make([]reg.VecVirtual, k.rows)
		for r := range t {
			t[r] = ZMM()
			VPBROADCASTD(k.act(r, 280+4*s), t[r])
		}
		hbm, hbm2 := ZMM(), ZMM()
		VPANDD(k.wm(2336+64*s), k.maskHi, hbm)
		VPSRLW(U8(2), k.wm(2336+64*s), hbm2)
		VPANDD(k.maskHi, hbm2, hbm2)
		crumb := [4]reg.VecVirtual{ZMM(), ZMM(), hbm, hbm2}
		VPSLLW(U8(4), hbm, crumb[0])
		VPSLLW(U8(4), hbm2, crumb[1])
		for v := 0; v < 2; v++ {
			lo, hi := ZMM(), ZMM()
			VMOVDQU64(k.wm(288+128*s+64*v), lo)
			VPSRLW(U8(4), lo, hi)
			VPTERNLOGD(U8(selLo), k.mask0f, crumb[2*v], lo)
			VPTERNLOGD(U8(selLo), k.mask0f, crumb[2*v+1], hi)
			for r := range t {
				vpdpbusdBcst(k.act(r, 16*s+4*(2*v)), lo, t[r])
				vpdpbusdBcst(k.act(r, 16*s+4*(2*v+1)), hi, t[r])
			}
		}
		sc := ZMM()
		VPMOVSXBD(k.wm(32+16*s), sc)
		for r := range t {
			VPMULLD(sc, t[r], t[r])
			VPADDD(t[r], sumi[r], sumi[r])
		}
	}
	d := ZMM()
	VCVTPH2PS(k.wm(0), d)
	for r := 0; r < k.rows; r++ {
		dd := ZMM()
		VMULPS_BCST(k.act(r, 256), d, dd)
		VCVTDQ2PS(sumi[r], sumi[r])
		VMULPS(dd, sumi[r], sumi[r])
		VADDPS(sumi[r], k.acc[r], k.acc[r])
	}
}

// The AVX2 quantized kernels (qpanels<T>R1x256): one activation row, each panel as two ymm
// halves of 8 output rows. Without VNNI a 4-input dot per 32-bit lane is vpmaddubsw (u8 x s8
// pairs into saturating int16) and vpmaddwd by ones (int16 pairs into int32). No int16 sum
// saturates: |xq| <= 127 (act kinds in package kernel), and per int16 lane at most two pairs
// of one nibble vector are added (Q4: 2*2*15*127, Q5: 2*2*31*127, Q6: 2*2*63*127 = 32004).
// Q8_0's weights are signed, so the pair bound needs |w| as the unsigned operand and the
// activation given w's sign (vpsignb; -128 has |w| = 128 as u8): 2*128*127 = 32512. Integer
// sums are exact, and the float steps those of the portable path, so results are bitwise its.

// qk2 holds the registers of one AVX2 kernel.
type qk2 struct {
	w, a   reg.GPVirtual
	acc    [2]reg.VecVirtual
	mask0f reg.VecVirtual
	maskHi reg.VecVirtual
	ones   reg.VecVirtual // int16 ones
	m80    reg.VecVirtual // 0x80 in every byte (Q8_0)
}

// zeroY clears a ymm register without reading it (see zeroZ).
func zeroY(v reg.VecVirtual) {
	Instruction(&ir.Instruction{Opcode: "VPXOR", Operands: []Op{v, v, v}, Outputs: []Op{v}, ISA: []string{"AVX2"}})
}

// vpmovzxbwY emits VPMOVZXBW m128, ymm by hand: avo lists the AVX-512 forms of the instruction
// among its requirements, though with a low ymm register the assembler encodes it with VEX
// (AVX2), and the AVX2 kernels' requirements must say what they need.
func vpmovzxbwY(m Mem, dst reg.VecVirtual) {
	Instruction(&ir.Instruction{Opcode: "VPMOVZXBW", Operands: []Op{m, dst}, Inputs: []Op{m}, Outputs: []Op{dst}, ISA: []string{"AVX2"}})
}

// bcastY returns a ymm with the 32-bit value u in every lane.
func bcastY(u uint32) reg.VecVirtual {
	t := GP32()
	MOVL(U32(u), t)
	x := XMM()
	VMOVD(t, x)
	v := YMM()
	VPBROADCASTD(x, v)
	return v
}

func (k *qk2) act(off int) Mem { return Mem{Base: k.a, Disp: off} }
func (k *qk2) wm(off int) Mem  { return Mem{Base: k.w, Disp: off} }

// xbcast broadcasts the activation group at off.
func (k *qk2) xbcast(off int) reg.VecVirtual {
	x := YMM()
	VPBROADCASTD(k.act(off), x)
	return x
}

// nib returns the low or high nibbles of the 32 bytes at off.
func (k *qk2) nib(off int, hi bool) reg.VecVirtual {
	v := YMM()
	if hi {
		VMOVDQU(k.wm(off), v)
		VPSRLW(U8(4), v, v)
		VPAND(k.mask0f, v, v)
	} else {
		VPAND(k.wm(off), k.mask0f, v)
	}
	return v
}

// high ORs into q the high bits in hb shifted by shift (see highBits). The shifts take a
// register: their memory forms are AVX-512 only.
func (k *qk2) high(hb reg.VecVirtual, shift int, q reg.Register) {
	t := YMM()
	switch {
	case shift > 0:
		VPSLLW(U8(shift), hb, t)
	case shift < 0:
		VPSRLW(U8(-shift), hb, t)
	default:
		VMOVDQA(hb, t)
	}
	VPAND(k.maskHi, t, t)
	VPOR(t, q, q)
}

// loadY loads the 32 bytes at m.
func loadY(m Mem) reg.VecVirtual {
	v := YMM()
	VMOVDQU(m, v)
	return v
}

// pairDot adds to s (int32 lanes) the dots of q0 with group g0 and q1 with group g1 (u8 weights).
func (k *qk2) pairDot(q0 reg.VecVirtual, g0 int, q1 reg.VecVirtual, g1 int, s reg.VecVirtual) {
	x0 := k.xbcast(g0)
	VPMADDUBSW(x0, q0, q0)
	x1 := k.xbcast(g1)
	VPMADDUBSW(x1, q1, q1)
	VPADDW(q1, q0, q0)
	VPMADDWD(k.ones, q0, q0)
	VPADDD(q0, s, s)
}

// scale2 finishes a block: acc[h] += f32(s[h]) * (d*dx), d at byte dOff (8 f16 per half).
func (k *qk2) scale2(s [2]reg.Register, dOff, dxOff int) {
	for h := 0; h < 2; h++ {
		d := YMM()
		VCVTPH2PS(k.wm(dOff+16*h), d)
		dx := YMM()
		VBROADCASTSS(k.act(dxOff), dx)
		VMULPS(dx, d, d)
		VCVTDQ2PS(s[h], s[h])
		VMULPS(d, s[h], s[h])
		VADDPS(s[h], k.acc[h], k.acc[h])
	}
}

func quantKernels256() {
	for _, t := range qtypes {
		qpanels256(t)
	}
	for _, t := range qtypes {
		for r := 1; r <= 2; r++ {
			qpanelsV256(t, r)
		}
	}
}

// qpanels256 emits qpanels<T>R1x256(w, a *byte, y *float32, nb, np int): np whole panels of
// nb blocks from w against one activation row a, outputs at y.
func qpanels256(t qtype) {
	name := fmt.Sprintf("qpanels%sR1x256", t.name)
	TEXT(name, NOSPLIT, "func(w, a *byte, y *float32, nb, np int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one activation row against np whole %s panels of nb blocks.", name, t.name))
	k := &qk2{}
	k.w = Load(Param("w"), GP64()).(reg.GPVirtual)
	a0 := Load(Param("a"), GP64())
	y := Load(Param("y"), GP64())
	nb := Load(Param("nb"), GP64())
	np := Load(Param("np"), GP64())
	k.mask0f = bcastY(0x0f0f0f0f)
	k.ones = bcastY(0x00010001)
	switch {
	case t.name == "Q8_0":
		k.m80 = bcastY(0x80808080)
	case t.name == "Q5_K":
		k.maskHi = bcastY(0x10101010)
	case t.name == "Q6_K":
		k.maskHi = bcastY(0x30303030)
	}
	k.a = GP64()
	cnt := GP64()
	Label(name + "panel")
	TESTQ(np, np)
	JZ(LabelRef(name + "done"))
	for h := range k.acc {
		k.acc[h] = YMM()
		zeroY(k.acc[h])
	}
	MOVQ(a0, k.a)
	MOVQ(nb, cnt)
	Label(name + "block")
	switch {
	case t.name == "Q8_0":
		body256Q8_0(k)
	case t.name == "Q4_0":
		body256Q4_0(k)
	case t.name == "Q4_K":
		body256Q45K(k, false)
	case t.name == "Q5_K":
		body256Q45K(k, true)
	case t.name == "Q6_K":
		body256Q6_K(k)
	}
	ADDQ(U32(t.pbytes), k.w)
	ADDQ(U32(t.abytes), k.a)
	DECQ(cnt)
	JNZ(LabelRef(name + "block"))
	VMOVUPS(k.acc[0], Mem{Base: y})
	VMOVUPS(k.acc[1], Mem{Base: y, Disp: 32})
	ADDQ(U8(64), y)
	DECQ(np)
	JMP(LabelRef(name + "panel"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// body256Q8_0: s = sum w*x with the signed weights (stored ^ 0x80), per group |w| (u8) times x
// given w's sign.
func body256Q8_0(k *qk2) {
	var s [2]reg.VecVirtual
	for h := range s {
		s[h] = YMM()
		zeroY(s[h])
	}
	for g := 0; g < 8; g++ {
		x := k.xbcast(4 * g)
		for h := 0; h < 2; h++ {
			w := YMM()
			VPXOR(k.wm(32+64*g+32*h), k.m80, w)
			xs := YMM()
			VPSIGNB(w, x, xs)
			VPABSB(w, w)
			VPMADDUBSW(xs, w, w)
			VPMADDWD(k.ones, w, w)
			VPADDD(w, s[h], s[h])
		}
	}
	k.scale2([2]reg.Register{s[0], s[1]}, 0, 32)
}

// body256Q4_0: s = bias(-8*sum x) + sum n*x.
func body256Q4_0(k *qk2) {
	var s [2]reg.VecVirtual
	for h := range s {
		s[h] = YMM()
		VPBROADCASTD(k.act(40), s[h])
	}
	for v := 0; v < 4; v++ {
		for h := 0; h < 2; h++ {
			off := 32 + 64*v + 32*h
			k.pairDot(k.nib(off, false), 4*(2*v), k.nib(off, true), 4*(2*v+1), s[h])
		}
	}
	k.scale2([2]reg.Register{s[0], s[1]}, 0, 32)
}

// body256Q45K: as bodyQ45K, half by half within each sub-block.
func body256Q45K(k *qk2, five bool) {
	var sumi, summ [2]reg.VecVirtual
	for h := 0; h < 2; h++ {
		sumi[h], summ[h] = YMM(), YMM()
		zeroY(sumi[h])
		zeroY(summ[h])
	}
	for j := 0; j < 8; j++ {
		for h := 0; h < 2; h++ {
			t := YMM()
			zeroY(t)
			var hb reg.VecVirtual
			if five {
				hb = loadY(k.wm(2368 + 64*j + 32*h))
			}
			for v := 0; v < 4; v++ {
				off := 320 + 256*j + 64*v + 32*h
				lo, hi := k.nib(off, false), k.nib(off, true)
				if five {
					k.high(hb, 4-2*v, lo)
					k.high(hb, 4-(2*v+1), hi)
				}
				k.pairDot(lo, 32*j+4*(2*v), hi, 32*j+4*(2*v+1), t)
			}
			sc := YMM()
			VPMOVZXBD(k.wm(64+16*j+8*h), sc)
			VPMULLD(sc, t, t)
			VPADDD(t, sumi[h], sumi[h])
		}
	}
	for p := 0; p < 4; p++ {
		b := k.xbcast(264 + 4*p)
		for h := 0; h < 2; h++ {
			mw := YMM()
			vpmovzxbwY(k.wm(192+32*p+16*h), mw)
			VPMADDWD(b, mw, mw)
			VPADDD(mw, summ[h], summ[h])
		}
	}
	for h := 0; h < 2; h++ {
		dx := YMM()
		VBROADCASTSS(k.act(256), dx)
		dd, dm := YMM(), YMM()
		VCVTPH2PS(k.wm(16*h), dd)
		VMULPS(dx, dd, dd)
		VCVTPH2PS(k.wm(32+16*h), dm)
		VMULPS(dx, dm, dm)
		VCVTDQ2PS(sumi[h], sumi[h])
		VMULPS(dd, sumi[h], sumi[h])
		VCVTDQ2PS(summ[h], summ[h])
		VMULPS(dm, summ[h], summ[h])
		VSUBPS(summ[h], sumi[h], sumi[h])
		VADDPS(sumi[h], k.acc[h], k.acc[h])
	}
}

// body256Q6_K: as bodyQ6_K, half by half within each sub-block.
func body256Q6_K(k *qk2) {
	var sumi [2]reg.VecVirtual
	for h := range sumi {
		sumi[h] = YMM()
		zeroY(sumi[h])
	}
	for s := 0; s < 16; s++ {
		for h := 0; h < 2; h++ {
			t := YMM()
			VPBROADCASTD(k.act(280+4*s), t)
			hb := loadY(k.wm(2336 + 64*s + 32*h))
			for v := 0; v < 2; v++ {
				off := 288 + 128*s + 64*v + 32*h
				lo, hi := k.nib(off, false), k.nib(off, true)
				k.high(hb, 4-2*(2*v), lo)
				k.high(hb, 4-2*(2*v+1), hi)
				k.pairDot(lo, 16*s+4*(2*v), hi, 16*s+4*(2*v+1), t)
			}
			sc := YMM()
			VPMOVSXBD(k.wm(32+16*s+8*h), sc)
			VPMULLD(sc, t, t)
			VPADDD(t, sumi[h], sumi[h])
		}
	}
	k.scale2([2]reg.Register{sumi[0], sumi[1]}, 0, 256)
}

// The activation quantizers (AVX-512): quantAct32x512 and quantAct256x512 write nb blocks of
// package kernel's act32 and act256 kinds from x, bitwise as its Go quantizers do: the maximum
// magnitude compared as bit patterns (so NaN and Inf are found as such), scalar divisions for the
// scales, the product x*scale rounded by VCVTPS2DQ (to nearest even, the MXCSR default, as rne),
// the clamp to -127..127, exact integer sums.

// hreduce reduces the 16 dword lanes of z to a scalar in a GP register with op (VPMAXUD or
// VPADDD, whose 128/256-bit forms are VEX).
func hreduce(z reg.VecVirtual, op func(ops ...Op)) reg.GPVirtual {
	y := YMM()
	VEXTRACTI64X4(U8(1), z, y)
	op(y, z.AsY(), y)
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	op(x, y.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	op(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	op(t, x, x)
	r := GP32()
	VMOVD(x, r)
	return r.(reg.GPVirtual)
}

func vpmaxud(ops ...Op) { VPMAXUD(ops[0], ops[1], ops[2]) }
func vpaddd(ops ...Op)  { VPADDD(ops[0], ops[1], ops[2]) }

func zbcast32(u uint32) reg.VecVirtual {
	t := GP32()
	MOVL(U32(u), t)
	v := ZMM()
	VPBROADCASTD(t, v)
	return v
}

func quantActs() {
	quantAct(32)
	quantAct(256)
}

// quantAct emits quantAct<B>x512(dst *byte, x *float32, nb int).
func quantAct(bs int) {
	name := fmt.Sprintf("quantAct%dx512", bs)
	TEXT(name, NOSPLIT, "func(dst *byte, x *float32, nb int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s quantizes nb blocks of %d activations (package kernel's act%d kind).", name, bs, bs))
	dst := Load(Param("dst"), GP64())
	x := Load(Param("x"), GP64())
	nb := Load(Param("nb"), GP64())
	abs := zbcast32(0x7fffffff)
	hi := zbcast32(127)
	lo := zbcast32(uint32(0xffffffff - 126)) // -127
	nvec := bs / 16
	bbytes := 48
	if bs == 256 {
		bbytes = 352
	}
	L := func(s string) LabelRef { return LabelRef(name + s) }
	Label(name + "block")
	TESTQ(nb, nb)
	JZ(L("done"))
	// Maximum magnitude, as bits.
	var m reg.VecVirtual
	for v := 0; v < nvec; v++ {
		a := ZMM()
		VPANDD(Mem{Base: x, Disp: 64 * v}, abs, a)
		if m == nil {
			m = a
		} else {
			VPMAXUD(a, m, m)
		}
	}
	amax := hreduce(m, vpmaxud)
	zmmZero := ZMM()
	zeroZ(zmmZero)
	// Zero the block's header words (bs == 32: [32,48); 256: [256,352)); the quants follow.
	if bs == 32 {
		VMOVDQU(zmmZero.AsX(), Mem{Base: dst, Disp: 32})
	} else {
		VMOVDQU64(zmmZero, Mem{Base: dst, Disp: 256})
		VMOVDQU(zmmZero.AsY(), Mem{Base: dst, Disp: 320})
	}
	CMPL(amax, U32(0x7f7fffff))
	JA(L("special"))
	TESTL(amax, amax)
	JZ(L("zero"))
	am := XMM()
	VMOVD(amax, am)
	c := XMM()
	cg := GP32()
	MOVL(U32(0x42fe0000), cg) // 127.0
	VMOVD(cg, c)
	var scale reg.VecVirtual
	if bs == 32 {
		// d = amax/127, id = 1/d (d > 0 here).
		d := XMM()
		VDIVSS(c, am, d)
		one := XMM()
		MOVL(U32(0x3f800000), cg)
		VMOVD(cg, one)
		id := XMM()
		VDIVSS(d, one, id)
		scale = ZMM()
		VBROADCASTSS(id, scale)
		// d rounded to f16 and back.
		h := XMM()
		VCVTPS2PH(U8(0), d, h)
		VCVTPH2PS(h, d)
		VMOVSS(d, Mem{Base: dst, Disp: 32})
	} else {
		is := XMM()
		VDIVSS(am, c, is) // 127/amax
		scale = ZMM()
		VBROADCASTSS(is, scale)
		one := XMM()
		MOVL(U32(0x3f800000), cg)
		VMOVD(cg, one)
		d := XMM()
		VDIVSS(is, one, d)
		VMOVSS(d, Mem{Base: dst, Disp: 256})
	}
	quants := func(v int) reg.VecVirtual {
		q := ZMM()
		VMULPS(Mem{Base: x, Disp: 64 * v}, scale, q)
		VCVTPS2DQ(q, q)
		VPMINSD(hi, q, q)
		VPMAXSD(lo, q, q)
		VPMOVDB(q, Mem{Base: dst, Disp: 16 * v})
		return q
	}
	if bs == 32 {
		q0, q1 := quants(0), quants(1)
		VPADDD(q1, q0, q0)
		sum := hreduce(q0, vpaddd)
		b := GP32()
		IMUL3L(U32(0xffffff80), sum, b) // -128*sum
		MOVL(b, Mem{Base: dst, Disp: 36})
		IMUL3L(U32(0xfffffff8), sum, b) // -8*sum
		MOVL(b, Mem{Base: dst, Disp: 40})
	} else {
		for j := 0; j < 16; j += 2 {
			s0 := hreduce(quants(j), vpaddd)
			s1 := hreduce(quants(j+1), vpaddd)
			b := GP32()
			IMUL3L(U32(0xffffffe0), s0, b) // -32*sum16
			MOVL(b, Mem{Base: dst, Disp: 280 + 4*j})
			IMUL3L(U32(0xffffffe0), s1, b)
			MOVL(b, Mem{Base: dst, Disp: 280 + 4*(j+1)})
			ADDL(s1, s0)
			MOVW(s0.As16(), Mem{Base: dst, Disp: 264 + j})
		}
	}
	JMP(L("next"))
	// NaN or Inf in the block: zero quants and a NaN scale (the block's results are NaN).
	Label(name + "special")
	for v := 0; v < bs/64; v++ {
		VMOVDQU64(zmmZero, Mem{Base: dst, Disp: 64 * v})
	}
	if bs == 32 {
		VMOVDQU(zmmZero.AsY(), Mem{Base: dst})
	}
	nan := GP32()
	MOVL(U32(0x7fc00000), nan)
	MOVL(nan, Mem{Base: dst, Disp: bs})
	JMP(L("next"))
	// All zero: zero quants and scale.
	Label(name + "zero")
	for v := 0; v < bs/64; v++ {
		VMOVDQU64(zmmZero, Mem{Base: dst, Disp: 64 * v})
	}
	if bs == 32 {
		VMOVDQU(zmmZero.AsY(), Mem{Base: dst})
	}
	Label(name + "next")
	ADDQ(U32(uint32(4*bs)), x)
	ADDQ(U32(uint32(bbytes)), dst)
	DECQ(nb)
	JMP(L("block"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// quantActsY emits the AVX2 activation quantizers quantAct32x256 and quantAct256x256, bitwise
// as the Go ones (see quantAct). The 32-bit quants become bytes with two saturating packs (no
// value saturates: they are clamped to -127..127) and a dword permutation that undoes the packs'
// in-lane interleave.
func quantActsY() {
	perm := GLOBL("quantperm256", attr.RODATA|attr.NOPTR)
	for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		DATA(4*i, U32(v))
	}
	quantActY(32, perm)
	quantActY(256, perm)
}

// hreduceY reduces the 8 dword lanes of y to a scalar with op (VPMAXUD or VPADDD).
func hreduceY(y reg.VecVirtual, op func(ops ...Op)) reg.GPVirtual {
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	op(x, y.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	op(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	op(t, x, x)
	r := GP32()
	VMOVD(x, r)
	return r.(reg.GPVirtual)
}

func quantActY(bs int, perm Mem) {
	name := fmt.Sprintf("quantAct%dx256", bs)
	TEXT(name, NOSPLIT, "func(dst *byte, x *float32, nb int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s quantizes nb blocks of %d activations (package kernel's act%d kind).", name, bs, bs))
	dst := Load(Param("dst"), GP64())
	x := Load(Param("x"), GP64())
	nb := Load(Param("nb"), GP64())
	abs := bcastY(0x7fffffff)
	hi := bcastY(127)
	lo := bcastY(uint32(0xffffffff - 126)) // -127
	pv := YMM()
	VMOVDQU(perm, pv)
	nvec := bs / 8
	bbytes := 48
	if bs == 256 {
		bbytes = 352
	}
	L := func(s string) LabelRef { return LabelRef(name + s) }
	Label(name + "block")
	TESTQ(nb, nb)
	JZ(L("done"))
	var m reg.VecVirtual
	for v := 0; v < nvec; v++ {
		a := YMM()
		VPAND(Mem{Base: x, Disp: 32 * v}, abs, a)
		if m == nil {
			m = a
		} else {
			VPMAXUD(a, m, m)
		}
	}
	amax := hreduceY(m, vpmaxud)
	z := YMM()
	zeroY(z)
	if bs == 32 {
		VMOVDQU(z.AsX(), Mem{Base: dst, Disp: 32})
	} else {
		for off := 256; off < 352; off += 32 {
			VMOVDQU(z, Mem{Base: dst, Disp: off})
		}
	}
	CMPL(amax, U32(0x7f7fffff))
	JA(L("special"))
	TESTL(amax, amax)
	JZ(L("zero"))
	am := XMM()
	VMOVD(amax, am)
	c := XMM()
	cg := GP32()
	MOVL(U32(0x42fe0000), cg) // 127.0
	VMOVD(cg, c)
	one := XMM()
	MOVL(U32(0x3f800000), cg)
	VMOVD(cg, one)
	scale := YMM()
	if bs == 32 {
		d := XMM()
		VDIVSS(c, am, d)
		id := XMM()
		VDIVSS(d, one, id)
		VBROADCASTSS(id, scale)
		h := XMM()
		VCVTPS2PH(U8(0), d, h)
		VCVTPH2PS(h, d)
		VMOVSS(d, Mem{Base: dst, Disp: 32})
	} else {
		is := XMM()
		VDIVSS(am, c, is)
		VBROADCASTSS(is, scale)
		d := XMM()
		VDIVSS(is, one, d)
		VMOVSS(d, Mem{Base: dst, Disp: 256})
	}
	// quants32 quantizes elements e..e+31, stores them as bytes and returns their four
	// vectors of int32 quants.
	quants32 := func(e int) [4]reg.VecVirtual {
		var q [4]reg.VecVirtual
		for v := range q {
			q[v] = YMM()
			VMULPS(Mem{Base: x, Disp: 4 * (e + 8*v)}, scale, q[v])
			VCVTPS2DQ(q[v], q[v])
			VPMINSD(hi, q[v], q[v])
			VPMAXSD(lo, q[v], q[v])
		}
		w01, w23 := YMM(), YMM()
		VPACKSSDW(q[1], q[0], w01)
		VPACKSSDW(q[3], q[2], w23)
		b := YMM()
		VPACKSSWB(w23, w01, b)
		VPERMD(b, pv, b)
		VMOVDQU(b, Mem{Base: dst, Disp: e})
		return q
	}
	if bs == 32 {
		q := quants32(0)
		VPADDD(q[1], q[0], q[0])
		VPADDD(q[3], q[2], q[2])
		VPADDD(q[2], q[0], q[0])
		sum := hreduceY(q[0], vpaddd)
		b := GP32()
		IMUL3L(U32(0xffffff80), sum, b) // -128*sum
		MOVL(b, Mem{Base: dst, Disp: 36})
		IMUL3L(U32(0xfffffff8), sum, b) // -8*sum
		MOVL(b, Mem{Base: dst, Disp: 40})
	} else {
		for g := 0; g < 8; g++ { // sub-blocks 2g and 2g+1
			q := quants32(32 * g)
			VPADDD(q[1], q[0], q[0])
			VPADDD(q[3], q[2], q[2])
			s0 := hreduceY(q[0], vpaddd)
			s1 := hreduceY(q[2], vpaddd)
			b := GP32()
			IMUL3L(U32(0xffffffe0), s0, b) // -32*sum16
			MOVL(b, Mem{Base: dst, Disp: 280 + 8*g})
			IMUL3L(U32(0xffffffe0), s1, b)
			MOVL(b, Mem{Base: dst, Disp: 284 + 8*g})
			ADDL(s1, s0)
			MOVW(s0.As16(), Mem{Base: dst, Disp: 264 + 2*g})
		}
	}
	JMP(L("next"))
	Label(name + "special")
	for off := 0; off < bs; off += 32 {
		VMOVDQU(z, Mem{Base: dst, Disp: off})
	}
	nan := GP32()
	MOVL(U32(0x7fc00000), nan)
	MOVL(nan, Mem{Base: dst, Disp: bs})
	JMP(L("next"))
	Label(name + "zero")
	for off := 0; off < bs; off += 32 {
		VMOVDQU(z, Mem{Base: dst, Disp: off})
	}
	Label(name + "next")
	ADDQ(U32(uint32(4*bs)), x)
	ADDQ(U32(uint32(bbytes)), dst)
	DECQ(nb)
	JMP(L("block"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// The AVX-VNNI variants (qpanels<T>R<1,2>vx256) of the AVX2 kernels take the AVX-512 kernels'
// arithmetic on ymm halves: VEX VPDPBUSD (u8 weights, the bias sums of the activations), no
// int16 stage, and two rows per weight load. The Go assembler encodes VPDPBUSD only with EVEX
// (AVX512_VNNI), so the VEX form is emitted as bytes; its operands are therefore fixed registers,
// which the allocator keeps clear of: vS the block sums of rows and halves (32-blocks), vT a
// sub-block's sum per row (K-quants, which go half by half to fit 16 registers), vX the
// broadcast activation group, vLo and vHi the weight bytes.

var (
	vS       = [2][2]reg.VecPhysical{{reg.Y8, reg.Y9}, {reg.Y10, reg.Y11}}
	vT       = [2]reg.VecPhysical{reg.Y13, reg.Y7}
	vX       = reg.Y12
	vLo, vHi = reg.Y14, reg.Y15
)

// vpdpbusdY emits VEX.256.66.0F38.W0 50 /r, VPDPBUSD dst, w, x: dst += u8(w) . s8(x) per dword.
func vpdpbusdY(dst, w, x reg.VecPhysical) {
	d, v, b := int(dst.PhysicalIndex()), int(w.PhysicalIndex()), int(x.PhysicalIndex())
	b1 := byte(0x40 | 0x02) // X clear (no index), map 0F38
	if d < 8 {
		b1 |= 0x80 // R is stored inverted
	}
	if b < 8 {
		b1 |= 0x20 // B is stored inverted
	}
	b2 := byte((^v&0xf)<<3 | 0x04 | 0x01) // W0, vvvv inverted, L 256, pp 66
	modrm := byte(0xc0 | (d&7)<<3 | b&7)
	for i, c := range []byte{0xc4, b1, b2, 0x50, modrm} {
		ins := &ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(c)}}
		if i == 0 {
			ins.Inputs, ins.Outputs, ins.ISA = []Op{dst, w, x}, []Op{dst}, []string{"AVXVNNI"}
		}
		Instruction(ins)
	}
}

// qkv holds the registers of one AVX-VNNI kernel.
type qkv struct {
	rows   int
	w, a   reg.GPVirtual
	lda    reg.GPVirtual
	acc    [2][2]reg.VecVirtual // [row][half]
	mask0f reg.VecVirtual
	maskHi reg.VecVirtual
	q2     *qk2 // for the shared helpers (wm, high)
}

func (k *qkv) act(r, off int) Mem {
	if r == 0 {
		return Mem{Base: k.a, Disp: off}
	}
	return Mem{Base: k.a, Index: k.lda, Scale: 1, Disp: off}
}
func (k *qkv) wm(off int) Mem { return Mem{Base: k.w, Disp: off} }

// vdot adds the dot of the bytes in w with row r's activation group at off into dst.
func (k *qkv) vdot(dst, w reg.VecPhysical, r, off int) {
	VPBROADCASTD(k.act(r, off), vX)
	vpdpbusdY(dst, w, vX)
}

// vnib loads the low (into vLo) and high (into vHi) nibbles of the 32 bytes at off.
func (k *qkv) vnib(off int) {
	VPAND(k.wm(off), k.mask0f, vLo)
	VMOVDQU(k.wm(off), vHi)
	VPSRLW(U8(4), vHi, vHi)
	VPAND(k.mask0f, vHi, vHi)
}

// scaleRow finishes half h of a block for row r: acc += f32(s) * (d*dx).
func (k *qkv) scaleRow(s reg.Register, r, h, dOff, dxOff int) {
	d := YMM()
	VCVTPH2PS(k.wm(dOff+16*h), d)
	dx := YMM()
	VBROADCASTSS(k.act(r, dxOff), dx)
	VMULPS(dx, d, d)
	VCVTDQ2PS(s, s)
	VMULPS(d, s, s)
	VADDPS(s, k.acc[r][h], k.acc[r][h])
}

// qpanelsV256 emits qpanels<T>R<R>vx256(w, a *byte, y *float32, nb, np, lda, ldy int).
func qpanelsV256(t qtype, rows int) {
	name := fmt.Sprintf("qpanels%sR%dvx256", t.name, rows)
	TEXT(name, NOSPLIT, "func(w, a *byte, y *float32, nb, np, lda, ldy int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes %d activation rows against np whole %s panels of nb blocks with AVX-VNNI.", name, rows, t.name))
	k := &qkv{rows: rows}
	k.w = Load(Param("w"), GP64()).(reg.GPVirtual)
	a0 := Load(Param("a"), GP64())
	y := Load(Param("y"), GP64())
	nb := Load(Param("nb"), GP64())
	np := Load(Param("np"), GP64())
	k.lda = Load(Param("lda"), GP64()).(reg.GPVirtual)
	ldy := Load(Param("ldy"), GP64())
	SHLQ(Imm(2), ldy)
	k.mask0f = bcastY(0x0f0f0f0f)
	switch t.name {
	case "Q5_K":
		k.maskHi = bcastY(0x10101010)
	case "Q6_K":
		k.maskHi = bcastY(0x30303030)
	}
	k.q2 = &qk2{maskHi: k.maskHi}
	k.a = GP64()
	cnt := GP64()
	Label(name + "panel")
	TESTQ(np, np)
	JZ(LabelRef(name + "done"))
	for r := 0; r < rows; r++ {
		for h := 0; h < 2; h++ {
			k.acc[r][h] = YMM()
			zeroY(k.acc[r][h])
		}
	}
	MOVQ(a0, k.a)
	MOVQ(nb, cnt)
	Label(name + "block")
	switch t.name {
	case "Q8_0":
		bodyVQ32(k, false)
	case "Q4_0":
		bodyVQ32(k, true)
	case "Q4_K":
		bodyVQ45K(k, false)
	case "Q5_K":
		bodyVQ45K(k, true)
	case "Q6_K":
		bodyVQ6_K(k)
	}
	ADDQ(U32(t.pbytes), k.w)
	ADDQ(U32(t.abytes), k.a)
	DECQ(cnt)
	JNZ(LabelRef(name + "block"))
	for r := 0; r < rows; r++ {
		base := Mem{Base: y}
		if r == 1 {
			base = Mem{Base: y, Index: ldy, Scale: 1}
		}
		VMOVUPS(k.acc[r][0], base)
		VMOVUPS(k.acc[r][1], base.Offset(32))
	}
	ADDQ(U8(64), y)
	DECQ(np)
	JMP(LabelRef(name + "panel"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// bodyVQ32: Q8_0 (nib false) or Q4_0 blocks as bodyQ8_0 and bodyQ4_0.
func bodyVQ32(k *qkv, nib bool) {
	bias := 36
	if nib {
		bias = 40
	}
	for r := 0; r < k.rows; r++ {
		for h := 0; h < 2; h++ {
			VPBROADCASTD(k.act(r, bias), vS[r][h])
		}
	}
	if !nib {
		for g := 0; g < 8; g++ {
			for h := 0; h < 2; h++ {
				VMOVDQU(k.wm(32+64*g+32*h), vLo)
				for r := 0; r < k.rows; r++ {
					k.vdot(vS[r][h], vLo, r, 4*g)
				}
			}
		}
	} else {
		for v := 0; v < 4; v++ {
			for h := 0; h < 2; h++ {
				k.vnib(32 + 64*v + 32*h)
				for r := 0; r < k.rows; r++ {
					k.vdot(vS[r][h], vLo, r, 4*(2*v))
					k.vdot(vS[r][h], vHi, r, 4*(2*v+1))
				}
			}
		}
	}
	for r := 0; r < k.rows; r++ {
		for h := 0; h < 2; h++ {
			k.scaleRow(vS[r][h], r, h, 0, 32)
		}
	}
}

// bodyVQ45K: as bodyQ45K, one half of the panel after the other.
func bodyVQ45K(k *qkv, five bool) {
	for h := 0; h < 2; h++ {
		var sumi [2]reg.VecVirtual
		for r := 0; r < k.rows; r++ {
			sumi[r] = YMM()
			zeroY(sumi[r])
		}
		for j := 0; j < 8; j++ {
			for r := 0; r < k.rows; r++ {
				VPXOR(vT[r], vT[r], vT[r])
			}
			var hb reg.VecVirtual
			if five {
				hb = loadY(k.wm(2368 + 64*j + 32*h))
			}
			for v := 0; v < 4; v++ {
				k.vnib(320 + 256*j + 64*v + 32*h)
				if five {
					k.q2.high(hb, 4-2*v, vLo)
					k.q2.high(hb, 4-(2*v+1), vHi)
				}
				for r := 0; r < k.rows; r++ {
					k.vdot(vT[r], vLo, r, 32*j+4*(2*v))
					k.vdot(vT[r], vHi, r, 32*j+4*(2*v+1))
				}
			}
			sc := YMM()
			VPMOVZXBD(k.wm(64+16*j+8*h), sc)
			for r := 0; r < k.rows; r++ {
				VPMULLD(sc, vT[r], vT[r])
				VPADDD(vT[r], sumi[r], sumi[r])
			}
		}
		for r := 0; r < k.rows; r++ {
			summ := YMM()
			zeroY(summ)
			for p := 0; p < 4; p++ {
				b := YMM()
				VPBROADCASTD(k.act(r, 264+4*p), b)
				mw := YMM()
				vpmovzxbwY(k.wm(192+32*p+16*h), mw)
				VPMADDWD(b, mw, mw)
				VPADDD(mw, summ, summ)
			}
			dx := YMM()
			VBROADCASTSS(k.act(r, 256), dx)
			dd, dm := YMM(), YMM()
			VCVTPH2PS(k.wm(16*h), dd)
			VMULPS(dx, dd, dd)
			VCVTPH2PS(k.wm(32+16*h), dm)
			VMULPS(dx, dm, dm)
			VCVTDQ2PS(sumi[r], sumi[r])
			VMULPS(dd, sumi[r], sumi[r])
			VCVTDQ2PS(summ, summ)
			VMULPS(dm, summ, summ)
			VSUBPS(summ, sumi[r], sumi[r])
			VADDPS(sumi[r], k.acc[r][h], k.acc[r][h])
		}
	}
}

// bodyVQ6_K: as bodyQ6_K, one half of the panel after the other.
func bodyVQ6_K(k *qkv) {
	for h := 0; h < 2; h++ {
		var sumi [2]reg.VecVirtual
		for r := 0; r < k.rows; r++ {
			sumi[r] = YMM()
			zeroY(sumi[r])
		}
		for s := 0; s < 16; s++ {
			for r := 0; r < k.rows; r++ {
				VPBROADCASTD(k.act(r, 280+4*s), vT[r])
			}
			hb := loadY(k.wm(2336 + 64*s + 32*h))
			for v := 0; v < 2; v++ {
				k.vnib(288 + 128*s + 64*v + 32*h)
				k.q2.high(hb, 4-2*(2*v), vLo)
				k.q2.high(hb, 4-2*(2*v+1), vHi)
				for r := 0; r < k.rows; r++ {
					k.vdot(vT[r], vLo, r, 16*s+4*(2*v))
					k.vdot(vT[r], vHi, r, 16*s+4*(2*v+1))
				}
			}
			sc := YMM()
			VPMOVSXBD(k.wm(32+16*s+8*h), sc)
			for r := 0; r < k.rows; r++ {
				VPMULLD(sc, vT[r], vT[r])
				VPADDD(vT[r], sumi[r], sumi[r])
			}
		}
		for r := 0; r < k.rows; r++ {
			k.scaleRow(sumi[r], r, h, 0, 256)
		}
	}
}
