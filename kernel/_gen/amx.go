package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// AMX kernels. The Go assembler knows no AMX instruction, so they are emitted as bytes (see
// amxOp); their operands are therefore fixed registers, and the whole kernel is written with
// physical registers only (the allocator has nothing to place).
//
// The planes of the split activations are rows of their own: row r's plane p is tile row
// planes*r + p, so one A tile of 3*rows rows (at most 5 rows, 15 tile rows) carries all planes
// and one TDPBF16PS per K-block and panel computes them, each tile row summing its plane's
// products over K by itself; the kernel then adds a row's planes, (p0 + p1) + p2, with AVX-512.
// A row's arithmetic is thus the same in any tile position and any row group, and a single row
// costs one product of 3 tile rows per block, not three dependent ones. Tiles, fixed by the
// tile configuration package kernel builds (amxConfig in amx.go):
//
//	tmm0-tmm3  C: tile rows x 16 f32, the sums of four panels
//	tmm4       A: tile rows x 32 bf16, one K-block of the activations' planes
//	tmm5-tmm7  B: 16 pairs x 16 columns x 2 bf16, one K-block of a panel (1 KiB, contiguous),
//	           three in turn so that a panel's load need not wait for an earlier one's product
//
// Four panels per pass share each A load and keep four accumulation chains in flight. Each
// call loads the configuration at entry and releases the tiles before it returns, so no tile
// state outlives a call: the goroutine may run on another thread at the next one.

// Tile numbers.
const (
	tC = 0 // tC+i: panel i of a pass
	tA = 4
	tB = 5 // tB+i%3: panel i's weights
)

// amxOp emits one instruction's bytes, the first carrying the name for the listing's reader.
func amxOp(name string, bs ...byte) {
	Comment(name)
	for _, c := range bs {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(c)}})
	}
}

// gpIndex is the hardware number of a 64-bit general register.
func gpIndex(r reg.Register) int { return int(r.(reg.Physical).PhysicalIndex()) }

// vex3 is the 3-byte VEX prefix of map 0F38, W0, L0 with prefix pp: rr extends ModRM.reg, x
// SIB.index, b ModRM.rm or SIB.base; v is the vvvv operand (stored inverted, as R, X, B are).
func vex3(rr, x, b, v int, pp byte) []byte {
	b1 := byte(0x02)
	if rr&8 == 0 {
		b1 |= 0x80
	}
	if x&8 == 0 {
		b1 |= 0x40
	}
	if b&8 == 0 {
		b1 |= 0x20
	}
	return []byte{0xc4, b1, byte((^v&0xf)<<3) | pp}
}

// memSIB is ModRM and SIB for [base + index*1] with ModRM.reg r. RBP and R13 cannot be a base
// without a displacement, RSP cannot be an index: the kernels never pass them.
func memSIB(r int, base, index reg.Register) []byte {
	bi, ii := gpIndex(base), gpIndex(index)
	if bi&7 == 5 || ii == 4 {
		panic(fmt.Sprintf("memSIB: base %d index %d", bi, ii))
	}
	return []byte{byte(r&7)<<3 | 0x04, byte(ii&7)<<3 | byte(bi&7)}
}

// ldtilecfg emits LDTILECFG [base] (VEX.128.NP.0F38.W0 49 /0).
func ldtilecfg(base reg.Register) {
	bi := gpIndex(base)
	if bi&7 == 4 || bi&7 == 5 {
		panic("ldtilecfg: base needs a SIB or displacement")
	}
	amxOp(fmt.Sprintf("LDTILECFG (%s)", base.Asm()), append(vex3(0, 0, bi, 0, 0), 0x49, byte(bi&7))...)
}

// tilerelease emits TILERELEASE (VEX.128.NP.0F38.W0 49 C0).
func tilerelease() { amxOp("TILERELEASE", 0xc4, 0xe2, 0x78, 0x49, 0xc0) }

// tilezero emits TILEZERO tmm t (VEX.128.F2.0F38.W0 49 11:t:000).
func tilezero(t int) {
	amxOp(fmt.Sprintf("TILEZERO tmm%d", t), 0xc4, 0xe2, 0x7b, 0x49, byte(0xc0|t<<3))
}

// tileloadd emits TILELOADD tmm t, [base + stride] (VEX.128.F2.0F38.W0 4B): row r of the tile
// is read at base + r*stride.
func tileloadd(t int, base, stride reg.Register) {
	b := append(vex3(0, gpIndex(stride), gpIndex(base), 0, 0x03), 0x4b)
	amxOp(fmt.Sprintf("TILELOADD tmm%d, (%s)(%s*1)", t, base.Asm(), stride.Asm()), append(b, memSIB(t, base, stride)...)...)
}

// tilestored emits TILESTORED [base + stride], tmm t (VEX.128.F3.0F38.W0 4B).
func tilestored(t int, base, stride reg.Register) {
	b := append(vex3(0, gpIndex(stride), gpIndex(base), 0, 0x02), 0x4b)
	amxOp(fmt.Sprintf("TILESTORED (%s)(%s*1), tmm%d", base.Asm(), stride.Asm(), t), append(b, memSIB(t, base, stride)...)...)
}

// tdpbf16ps emits TDPBF16PS tmm c, tmm a, tmm b (VEX.128.F3.0F38.W0 5C): c[m][n] += sum over
// pairs k of a[m][2k]*b[k][2n] + a[m][2k+1]*b[k][2n+1], bf16 products accumulated in f32.
func tdpbf16ps(c, a, b int) {
	amxOp(fmt.Sprintf("TDPBF16PS tmm%d, tmm%d, tmm%d", c, a, b), append(vex3(0, 0, 0, b, 0x02), 0x5c, byte(0xc0|c<<3|a))...)
}

// amxKLoop emits the K loop of one group of width panels, shared by the kernels: nb whole
// K-blocks from the panels at wp (block(width, pbytes) each, the activations at a advancing by
// bs), then, when tw is not nil, the K tail block of each panel from tw (1 KiB apart), which it
// advances past the group; it ends at the label pre+"store".
func amxKLoop(pre string, width int, wp, bp, ap, bs, nb, blk, pbytes reg.Register, tw Mem, block func(int, reg.Register)) {
	MOVQ(wp, bp)
	Load(Param("a"), ap)
	Load(Param("bs"), bs)
	MOVQ(nb, blk)
	Label(pre + "blk")
	TESTQ(blk, blk)
	JZ(LabelRef(pre + "tail"))
	block(width, pbytes)
	ADDQ(U32(1024), bp)
	ADDQ(bs, ap)
	DECQ(blk)
	JMP(LabelRef(pre + "blk"))
	Label(pre + "tail")
	MOVQ(tw, bp)
	TESTQ(bp, bp)
	JZ(LabelRef(pre + "store"))
	MOVQ(U32(1024), blk) // the tail blocks' panel stride
	block(width, blk)
	ADDQ(U32(uint32(1024*width)), bp)
	MOVQ(bp, tw)
	Label(pre + "store")
}

// amxGroups emits the loop over panel groups that the AMX kernels share: for each width in
// turn, while np >= width, body(width, pre) computes width panels from wp into yp (pre: the
// group's label prefix), then yp, wp and np move past them; it ends at the label name+"done".
func amxGroups(name string, widths []int, np, wp, yp, pbytes reg.Register, body func(width int, pre string)) {
	for k, width := range widths {
		pre, next := fmt.Sprintf("%sw%d", name, width), name+"done"
		if k+1 < len(widths) {
			next = fmt.Sprintf("%sw%d", name, widths[k+1])
		}
		Label(pre)
		CMPQ(np, U32(width))
		JL(LabelRef(next))
		body(width, pre)
		ADDQ(U32(uint32(64*width)), yp)
		for i := 0; i < width; i++ {
			ADDQ(pbytes, wp)
		}
		SUBQ(U32(uint32(width)), np)
		JMP(LabelRef(pre))
	}
	Label(name + "done")
}

// amxBF16 emits amxBF16P<planes>(cfg, w, tw, a, y, c, nb, np, rows, lda, bs, pbytes, ldy):
// for np whole bf16 panels from w (pbytes apart) and rows activation rows, y[r][p*16+l] (rows
// ldy bytes apart) = sum over K of W[p][l][i] * x[r][i], where row r's activations x come as
// planes bf16 plane rows whose sum is the f32 activation (see splitBF16Go in package kernel),
// by K-blocks of 32 inputs: the block's plane rows from a, lda bytes apart (row r's plane q is
// tile row planes*r + q; with one plane, row r's first plane), the next block's bs bytes
// further; the loaded configuration has planes*rows tile rows. Each tile row adds its K-blocks
// (16 pairs, 1 KiB of a panel) in order: nb blocks from the panels, then, when tw is not nil,
// the K tail, one block per panel at tw (1 KiB apart, zero-padded to 16 pairs: see
// Matrix.bf16Tail). With 2 or 3 planes the tiles go through the scratch c (4 KiB) and y[r] =
// (plane 0 + plane 1) + plane 2. A panel's arithmetic is the same whether it goes in a group
// of four or alone.
func amxBF16(planes int) {
	name := fmt.Sprintf("amxBF16P%d", planes)
	TEXT(name, NOSPLIT, "func(cfg *byte, w, tw, a *uint16, y, c *float32, nb, np, rows, lda, bs, pbytes, ldy int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes np whole bf16 panels with AMX from %d bf16 planes of activations.", name, planes))
	var (
		cfg, wp, ap, yp       = reg.RDI, reg.RSI, reg.RDX, reg.RCX
		nb, np, lda, bs       = reg.R8, reg.R9, reg.R10, reg.R11
		pbytes, blk, ldy, tmp = reg.R12, reg.R13, reg.R14, reg.R15
		bp, bi, s64           = reg.RAX, reg.RDI, reg.RBX
		resolve               = func(n string) Mem {
			b, err := Param(n).Resolve()
			if err != nil {
				panic(err)
			}
			return b.Addr
		}
	)
	tw, rows := resolve("tw"), resolve("rows") // every register is taken: these live in the frame
	Load(Param("cfg"), cfg)
	ldtilecfg(cfg)
	Load(Param("w"), wp)
	Load(Param("y"), yp)
	Load(Param("nb"), nb)
	Load(Param("np"), np)
	Load(Param("lda"), lda)
	Load(Param("pbytes"), pbytes)
	Load(Param("ldy"), ldy)
	MOVQ(U32(64), s64)

	// block emits the products of one K-block of width panels: the A tile from ap, then per
	// panel its B tile from bp + i*stride and the product.
	block := func(width int, stride reg.Register) {
		tileloadd(tA, ap, lda)
		for i := 0; i < width; i++ {
			src := bp
			if i > 0 {
				if i == 3 {
					LEAQ(Mem{Base: bp, Index: stride, Scale: 2}, bi)
					ADDQ(stride, bi)
				} else {
					LEAQ(Mem{Base: bp, Index: stride, Scale: uint8(i)}, bi)
				}
				src = bi
			}
			tileloadd(tB+i%3, src, s64)
			tdpbf16ps(tC+i, tA, tB+i%3)
		}
	}
	// group emits the loop over groups of width panels.
	group := func(width int, pre string) {
		for i := 0; i < width; i++ {
			tilezero(tC + i)
		}
		amxKLoop(pre, width, wp, bp, ap, bs, nb, blk, pbytes, tw, block)
		cs := bs // the block stride is not needed again for this group: the register takes c
		Load(Param("c"), cs)
		if planes == 1 {
			for i := 0; i < width; i++ {
				dst := yp
				if i > 0 {
					LEAQ(Mem{Base: yp, Disp: 64 * i}, tmp)
					dst = tmp
				}
				tilestored(tC+i, dst, ldy)
			}
		} else {
			for i := 0; i < width; i++ {
				dst := cs
				if i > 0 {
					LEAQ(Mem{Base: cs, Disp: 1024 * i}, tmp)
					dst = tmp
				}
				tilestored(tC+i, dst, s64)
			}
			// y[r] = (c[3r] + c[3r+1]) + c[3r+2] per panel.
			MOVQ(rows, blk)
			MOVQ(cs, tmp)
			MOVQ(yp, bp)
			Label(pre + "sum")
			for i := 0; i < width; i++ {
				z := reg.Z0
				if i%2 == 1 {
					z = reg.Z1
				}
				VMOVUPS(Mem{Base: tmp, Disp: 1024 * i}, z)
				for q := 1; q < planes; q++ {
					VADDPS(Mem{Base: tmp, Disp: 1024*i + 64*q}, z, z)
				}
				VMOVUPS(z, Mem{Base: bp, Disp: 64 * i})
			}
			ADDQ(U32(uint32(64*planes)), tmp)
			ADDQ(ldy, bp)
			DECQ(blk)
			JNZ(LabelRef(pre + "sum"))
		}
	}
	amxGroups(name, []int{4, 1}, np, wp, yp, pbytes, group)
	if planes > 1 {
		VZEROUPPER()
	}
	tilerelease()
	RET()
}

// splitBF16Row emits splitBF16Row<planes>x512(dst *uint16, x *float32, n, kp, bs int): the 2
// or 3 bf16 planes of one activation row of n floats, bitwise as splitBF16Go writes them: for
// each K-block of 32 inputs (kp/32 of them, zero past n), plane p's 32 values at dst + 64*p
// bytes, and the next block bs bytes further. Per 16 lanes: round to nearest even by integer
// addition (bits + 0x7fff + bit 16), keep the truncation where that reaches the exponent's
// all ones from a finite value, keep Inf and NaN whole (NaN quiet) with a zero remainder, and
// subtract to get the next plane's value.
func splitBF16Row(planes int) {
	name := fmt.Sprintf("splitBF16Row%dx512", planes)
	TEXT(name, NOSPLIT, "func(dst *uint16, x *float32, n, kp, bs int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s writes the %d bf16 planes of one row of n activations by K-blocks.", name, planes))
	dst := Load(Param("dst"), GP64())
	x := Load(Param("x"), GP64())
	rem := Load(Param("n"), GP64())
	cnt := Load(Param("kp"), GP64())
	bs := Load(Param("bs"), GP64())
	SHRQ(U8(5), cnt)
	bcast := func(c uint32) reg.VecVirtual {
		t, v := GP32(), ZMM()
		MOVL(U32(c), t)
		VPBROADCASTD(t, v)
		return v
	}
	c1, c7fff, cHi := bcast(1), bcast(0x7fff), bcast(0xffff0000)
	cExp, cMant, cQuiet := bcast(0x7f800000), bcast(0x007fffff), bcast(0x00400000)

	// body splits the 16 floats of v into the planes at dst + off.
	body := func(v reg.VecVirtual, off int) {
		kNF, kF, kNaN, kOV := K(), K(), K(), K()
		t, hi, tr := ZMM(), ZMM(), ZMM()
		VPANDD(cExp, v, t)
		VPCMPEQD(cExp, t, kNF)
		KNOTW(kNF, kF)
		VPTESTMD(cMant, v, kNF, kNaN)
		for p := 0; p < planes; p++ {
			VPSRLD(U8(16), v, t)
			VPANDD(c1, t, t)
			VPADDD(c7fff, t, t)
			VPADDD(v, t, t)
			VPANDD(cHi, t, hi)
			VPANDD(cHi, v, tr)
			VPANDD(cExp, hi, t)
			VPCMPEQD(cExp, t, kOV)
			VMOVDQA32(tr, kOV, hi)
			if p == 0 {
				VMOVDQA32(tr, kNF, hi)
				VPORD(cQuiet, hi, kNaN, hi)
			}
			VPSRLD(U8(16), hi, t)
			VPMOVDW(t, Mem{Base: dst, Disp: off + 64*p})
			if p < planes-1 {
				if p == 0 {
					VSUBPS_Z(hi, v, kF, v)
				} else {
					VSUBPS(hi, v, v)
				}
			}
		}
	}
	v := ZMM()
	// Whole blocks.
	Label(name + "full")
	CMPQ(rem, U8(32))
	JL(LabelRef(name + "part"))
	VMOVUPS(Mem{Base: x}, v)
	body(v, 0)
	VMOVUPS(Mem{Base: x, Disp: 64}, v)
	body(v, 32)
	ADDQ(U32(128), x)
	ADDQ(bs, dst)
	SUBQ(U8(32), rem)
	DECQ(cnt)
	JMP(LabelRef(name + "full"))
	// A partial block: rem in 1..31 inputs, masked loads zero the rest.
	Label(name + "part")
	TESTQ(rem, rem)
	JZ(LabelRef(name + "zero"))
	k, tb, r1 := K(), GP64(), GP64()
	LEAQ(expMask512, tb)
	MOVQ(rem, r1)
	CMPQ(rem, U8(16))
	JL(LabelRef(name + "half"))
	VMOVUPS(Mem{Base: x}, v)
	body(v, 0)
	SUBQ(U8(16), r1)
	KMOVW(Mem{Base: tb, Index: r1, Scale: 2}, k)
	VMOVUPS_Z(Mem{Base: x, Disp: 64}, k, v)
	body(v, 32)
	JMP(LabelRef(name + "partdone"))
	Label(name + "half")
	KMOVW(Mem{Base: tb, Index: r1, Scale: 2}, k)
	VMOVUPS_Z(Mem{Base: x}, k, v)
	body(v, 0)
	VPXORD(v, v, v)
	body(v, 32)
	Label(name + "partdone")
	ADDQ(bs, dst)
	DECQ(cnt)
	// Blocks past n.
	Label(name + "zero")
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "done"))
	z := ZMM()
	VPXORD(z, z, z)
	Label(name + "zeroloop")
	for p := 0; p < planes; p++ {
		VMOVDQU64(z, Mem{Base: dst, Disp: 64 * p})
	}
	ADDQ(bs, dst)
	DECQ(cnt)
	JNZ(LabelRef(name + "zeroloop"))
	Label(name + "done")
	VZEROUPPER()
	RET()
}

// amxBF16Pair emits amxBF16P<planes>x2(cfg, w, tw, a, y, c, nb, np, rows, lda, pbytes, ldy,
// rows2, a2, y2): amxBF16P<planes> for two row groups at once (rows and rows2, at most
// 16/planes each, their planes
// stacked as there), so that each weight tile feeds both and a product of up to 2*16/planes
// rows passes over the weights once. Group 2's activations start a2 bytes after a, its outputs y2 bytes
// after y. Tiles: 0-1 C of group 1 and 2-3 of group 2 (two panels each), 4 and 5 their A, 6-7
// B. Each tile row's arithmetic is amxBF16P<planes>'s, so a row's bits do not depend on its
// group.
func amxBF16Pair(planes int) {
	name := fmt.Sprintf("amxBF16P%dx2", planes)
	TEXT(name, NOSPLIT, "func(cfg *byte, w, tw, a *uint16, y, c *float32, nb, np, rows, lda, bs, pbytes, ldy, rows2, a2, y2 int)")
	Pragma("noescape")
	Doc(name + " computes np whole bf16 panels with AMX for two stacked row groups.")
	var (
		cfg, wp, ap, yp       = reg.RDI, reg.RSI, reg.RDX, reg.RCX
		nb, np, lda, bs       = reg.R8, reg.R9, reg.R10, reg.R11
		pbytes, blk, ldy, tmp = reg.R12, reg.R13, reg.R14, reg.R15
		bp, bi, s64           = reg.RAX, reg.RDI, reg.RBX
		resolve               = func(n string) Mem {
			b, err := Param(n).Resolve()
			if err != nil {
				panic(err)
			}
			return b.Addr
		}
	)
	tw, rows, rows2, a2, y2 := resolve("tw"), resolve("rows"), resolve("rows2"), resolve("a2"), resolve("y2")
	Load(Param("cfg"), cfg)
	ldtilecfg(cfg)
	Load(Param("w"), wp)
	Load(Param("y"), yp)
	Load(Param("nb"), nb)
	Load(Param("np"), np)
	Load(Param("lda"), lda)
	Load(Param("pbytes"), pbytes)
	Load(Param("ldy"), ldy)
	MOVQ(U32(64), s64)
	const tA1, tA2, tB = 4, 5, 6
	block := func(width int, stride reg.Register) {
		tileloadd(tA1, ap, lda)
		MOVQ(a2, tmp)
		ADDQ(ap, tmp)
		tileloadd(tA2, tmp, lda)
		for i := 0; i < width; i++ {
			src := bp
			if i > 0 {
				LEAQ(Mem{Base: bp, Index: stride, Scale: 1}, bi)
				src = bi
			}
			tileloadd(tB+i, src, s64)
			tdpbf16ps(i, tA1, tB+i)
			tdpbf16ps(2+i, tA2, tB+i)
		}
	}
	// sum emits y[r] = (c[3r] + c[3r+1]) + c[3r+2] for the rows n of one group, its width
	// panels' tiles stored at c, 1 KiB apart, its outputs from bp.
	sum := func(pre string, width int, n Mem, cs reg.Register) {
		MOVQ(n, blk)
		MOVQ(cs, tmp)
		Label(pre)
		for i := 0; i < width; i++ {
			z := []reg.VecPhysical{reg.Z0, reg.Z1}[i]
			VMOVUPS(Mem{Base: tmp, Disp: 1024 * i}, z)
			for q := 1; q < planes; q++ {
				VADDPS(Mem{Base: tmp, Disp: 1024*i + 64*q}, z, z)
			}
			VMOVUPS(z, Mem{Base: bp, Disp: 64 * i})
		}
		ADDQ(U32(uint32(64*planes)), tmp)
		ADDQ(ldy, bp)
		DECQ(blk)
		JNZ(LabelRef(pre))
	}
	group := func(width int, pre string) {
		for i := 0; i < width; i++ {
			tilezero(i)
			tilezero(2 + i)
		}
		amxKLoop(pre, width, wp, bp, ap, bs, nb, blk, pbytes, tw, block)
		cs := bs // the block stride is not needed again for this group: the register takes c
		Load(Param("c"), cs)
		for g := 0; g < 2; g++ {
			for i := 0; i < width; i++ {
				dst := cs
				if i > 0 {
					LEAQ(Mem{Base: cs, Disp: 1024 * i}, tmp)
					dst = tmp
				}
				tilestored(2*g+i, dst, s64)
			}
			MOVQ(yp, bp)
			n := rows
			if g == 1 {
				ADDQ(y2, bp)
				n = rows2
			}
			sum(fmt.Sprintf("%ssum%d", pre, g), width, n, cs)
		}
	}
	amxGroups(name, []int{2, 1}, np, wp, yp, pbytes, group)
	VZEROUPPER()
	tilerelease()
	RET()
}

// emuPrefetch is how far ahead of its loads amxEmuBF16P3 prefetches each panel's weights
// (bytes; 0: no software prefetch).
var emuPrefetch = 2048

// amxEmuBF16P3 emits amxEmuBF16P3(w, tw, a *uint16, y *float32, nb, np, bs, pbytes int): what
// amxBF16P3 computes for one activation row, bit for bit, with AVX-512 FMAs instead of tiles.
// A 1-row tile product streams its weights at about 0.87x the avx512 one-row kernel (amx.go),
// so decoding on the amx path runs this instead.
//
// The arithmetic it reproduces (found by experiment, checked bitwise by the tests): for each
// K-block of 16 pairs a TDPBF16PS keeps, per output, two f32 sums that start from zero, E over
// the pairs' first products and O over their second ones, each product added in pair order
// with one rounding (bf16 x bf16 is exact in f32, so an FMA rounds the same), and then adds
// them into its accumulator: acc = acc + (E + O). All of it reads denormal inputs as zero and
// flushes denormal results, which MXCSR's DAZ and FTZ give the FMAs here (set for the K loop;
// the caller's MXCSR is back for the plane sums and at return). Per panel and plane the row's
// accumulator lives in the frame; each block's activation planes are widened to f32 in the
// frame once per pass so that every FMA broadcasts its activation from memory. Four panels a
// pass, as the one-row avx512 kernel streams them; the operands are those of amxBF16P3 for
// rows = 1 (a: the block's three planes 64 bytes apart, bs bytes to the next block).
func amxEmuBF16P3() {
	const name, planes = "amxEmuBF16P3", 3
	// Not NOSPLIT: the frame (1.1 KiB) is past what a nosplit function may take.
	TEXT(name, 0, "func(w, tw, a *uint16, y *float32, nb, np, bs, pbytes int)")
	Pragma("noescape")
	Doc(name + " computes np whole bf16 panels for one row of 3 bf16 activation planes, bitwise as amxBF16P3.")
	acts := AllocLocal(64 * 2 * planes) // the block's planes as f32, plane q at 128*q (see block)
	accs := AllocLocal(64 * planes * 4) // panel i plane q's accumulator at 64*(planes*i+q)
	csr := AllocLocal(8)                // the caller's MXCSR at 0, the K loop's at 4
	twm, err := Param("tw").Resolve()
	if err != nil {
		panic(err)
	}
	tw := twm.Addr
	wp, yp, np, nb := GP64(), GP64(), GP64(), GP64()
	pbytes, bp, ap, bs, blk, b3 := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("w"), wp)
	Load(Param("y"), yp)
	Load(Param("np"), np)
	Load(Param("nb"), nb)
	Load(Param("pbytes"), pbytes)
	STMXCSR(csr)
	t := GP32()
	MOVL(csr, t)
	ORL(U32(0x8040), t) // FTZ (bit 15) and DAZ (bit 6)
	MOVL(t, csr.Offset(4))
	mask := ZMM() // 0xffff0000 in every lane: a pair's second bf16 as f32
	VPTERNLOGD(U8(0xff), mask, mask, mask)
	VPSLLD(U8(16), mask, mask)
	// zeros clears registers by a copy: avo reads VPXORD x, x, x as a use of x, which would
	// keep every block's sums live from the function's entry.
	zr := ZMM()
	VPXORD(zr, zr, zr)

	block := func(width int, stride reg.Register) {
		// Widen the block's three planes (16 pairs of bf16 each, 64 bytes apart) to f32,
		// as the weights are (AVX512F only): plane q's first inputs of the pairs at
		// 128*q, its second ones 64 bytes further.
		for q := 0; q < planes; q++ {
			v, hi := ZMM(), ZMM()
			VMOVDQU32(Mem{Base: ap, Disp: 64 * q}, v)
			VPANDD(mask, v, hi)
			VPSLLD(U8(16), v, v)
			VMOVUPS(v, acts.Offset(128*q))
			VMOVUPS(hi, acts.Offset(128*q+64))
		}
		if width > 3 {
			LEAQ(Mem{Base: bp, Index: stride, Scale: 2}, b3)
			ADDQ(stride, b3)
		}
		e := make([][planes]reg.VecVirtual, width)
		o := make([][planes]reg.VecVirtual, width)
		for i := range e {
			for q := 0; q < planes; q++ {
				e[i][q], o[i][q] = ZMM(), ZMM()
				VMOVAPS(zr, e[i][q])
				VMOVAPS(zr, o[i][q])
			}
		}
		for j := 0; j < 16; j++ {
			for i := 0; i < width; i++ {
				src := []Mem{
					{Base: bp, Disp: 64 * j},
					{Base: bp, Index: stride, Scale: 1, Disp: 64 * j},
					{Base: bp, Index: stride, Scale: 2, Disp: 64 * j},
					{Base: b3, Disp: 64 * j},
				}[i]
				if emuPrefetch > 0 {
					PREFETCHT0(src.Offset(emuPrefetch))
				}
				raw, odd := ZMM(), ZMM()
				VMOVDQU32(src, raw)
				VPANDD(mask, raw, odd)
				VPSLLD(U8(16), raw, raw)
				for q := 0; q < planes; q++ {
					VFMADD231PS_BCST(acts.Offset(128*q+4*j), raw, e[i][q])
					VFMADD231PS_BCST(acts.Offset(128*q+64+4*j), odd, o[i][q])
				}
			}
		}
		for i := 0; i < width; i++ {
			for q := 0; q < planes; q++ {
				a := accs.Offset(64 * (planes*i + q))
				VADDPS(o[i][q], e[i][q], e[i][q])
				VADDPS(a, e[i][q], e[i][q])
				VMOVUPS(e[i][q], a)
			}
		}
	}
	group := func(width int, pre string) {
		for i := 0; i < planes*width; i++ {
			VMOVUPS(zr, accs.Offset(64*i))
		}
		LDMXCSR(csr.Offset(4))
		amxKLoop(pre, width, wp, bp, ap, bs, nb, blk, pbytes, tw, block)
		LDMXCSR(csr)
		// y = (plane 0 + plane 1) + plane 2 per panel, as amxBF16P3 adds them.
		for i := 0; i < width; i++ {
			s := ZMM()
			VMOVUPS(accs.Offset(64*planes*i), s)
			for q := 1; q < planes; q++ {
				VADDPS(accs.Offset(64*(planes*i+q)), s, s)
			}
			VMOVUPS(s, Mem{Base: yp, Disp: 64 * i})
		}
	}
	amxGroups(name, []int{4, 1}, np, wp, yp, pbytes, group)
	VZEROUPPER()
	RET()
}
