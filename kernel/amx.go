//go:build amd64 && !purego

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The "amx" path: the avx512 path with bf16 products on Intel AMX tiles (TDPBF16PS), so that
// a product of many rows (speculative verification) costs much less than on the AVX-512
// kernels, which are compute-bound beyond a few rows. F32 and quantized matrices and the
// attention helpers keep the avx512 kernels.
//
// The bf16 panel layout (see Panel) is already the B-tile layout: for K-block b (32 inputs, 16
// pairs) of a panel, 16 pairs x 16 columns x 2 bf16 are 1 KiB contiguous at panel + b*1024, so
// no weight is repacked. The kernels read weights by whole 16-pair blocks; a K tail of fewer
// pairs is read from a zero-padded copy of each panel's last block (Matrix.bf16Tail), so no
// load reads past a panel (an odd K's last pair is the layout's zero pad times a zero
// activation).
//
// Precision: AMX multiplies bf16 by bf16 into f32, so each activation is split into three
// bf16 planes that sum to it exactly (hi = x rounded to bf16, then the remainders; bf16split.go,
// once per call, before the thread split, by a generated AVX-512 splitter). Products of bf16
// weights with bf16 planes are exact in f32; only the f32 sums round, inside the float32 bound
// every path is tested against (times 1+2^-7). Two planes (hi + lo) leave up to 2^-17 |x| of
// each activation out (derived in bf16split.go; the tests keep that variant, amxPlanes = 2,
// checked against its own bound amxRel) and make a 16-row product about 20% cheaper, but a tiny
// random Qwen3.5 target's logits then missed the reference test's 1e-4 (1.13e-4): the path
// runs three. One plane leaves about 2^-9.
// Measured on random normal data (16 rows, 512 outputs), as the largest |y - y_ref| / sum|w*x|
// against a float64 reference: K=64: avx512 2.6e-7, three planes 7.4e-8, two 2.4e-6 (bound
// 1.2e-5), one plane 1.2e-3; K=1024: 1.8e-7, 3.3e-8, 4.3e-7 (6.9e-5), 3.7e-4; K=3072: 2.1e-7,
// 3.8e-8, 2.7e-7 (1.9e-4), 2.1e-4 (AMX's f32 accumulation is a little more accurate than an
// FMA chain here).
//
// Layout of the products: a row's planes are consecutive rows of the A tile (row r, plane p at
// tile row amxPlanes*r+p), so a tile holds the planes of up to 8 rows (5 with three planes) and
// each tile row sums its plane's products over K on its own; after the last K-block the kernel
// adds a row's planes, p0 + p1 (or (p0 + p1) + p2), with AVX-512. A single row is then one
// product of 2 tile rows per K-block and panel; stacking the planes into one accumulator row
// instead (C += hi*B, C += lo*B) makes dependent products, and with three planes made a 1-row
// product about 1.3x the avx512 one (rough measurements, shared machine). The kernels
// (_gen/amx.go) take two row groups of up to 8 rows per pass over the weights, so up to 16
// rows stream each weight once, and 2 or 4 panels per pass share each A tile load. Sixteen rows
// are 32 tile rows per block and panel, bound by the tile products rather than memory: with
// three planes (48 tile rows) a 16-row product took 2-2.2x a 1-row one, with two 1.6-1.8x and
// one plane 1.2-1.3x (the avx512 16-row one takes 3.2-3.5x its 1-row one; rough, shared
// machine, one thread, Qwen3-0.6B's shapes; TestAMXTimes with DFLASH_AMX_TIMES=1 measures
// them). Kernels with one panel per pass (all 16 rows' planes in three A tiles, or a tile per
// plane) were slower still: each A tile must feed several panels.
//
// Streaming (decode, 1 row): on weights far past L3 a 1-row amx product streams about 0.90-0.93x
// the avx512 one-row kernel's bandwidth on one thread (BenchmarkAMXDecode: 1 GiB of 3072x1024
// matrices, alternated; rough, shared machine), against 1.05x on weights in L2. Tried, none of
// which closed the gap (each within the noise, or slower): software prefetch of each panel's
// blocks 1-16 KiB ahead (PREFETCHT0 or T1, one per line, as the avx512 kernel does), T1
// prefetch of the next pass's panels (all of them, or their first 2-8 KiB at a pass's start),
// demand loads ahead, TILELOADDT1, tiles double-buffered by K-block parity (two panels per
// pass, so no load waits on a product to free its tile), and one kernel call per thread part
// instead of per chunk (kept); every software prefetch made it slower. Probes with parts of the
// kernel removed: the tile loads alone (4 or 8 panels per pass) stream at about 0.97-0.98x the
// avx512 kernel, with each pass's tile stores and plane sums 0.955x, and the products take the
// rest: each pass ends by waiting for its products to drain before the stores. Dedicated
// 1-row kernels (bitwise equal to these, tested, then not kept) were no faster either, within
// about 2% either way: 3 panels per pass with 4 weight tiles rotated over a K loop unrolled by
// 4; 2 panels with 2 A tiles double-buffered by block and 4 weight tiles; 4 panels with 3
// rotated weight tiles; and each of these with a pass's plane sums deferred past the next
// pass's first loads.
//
// Tried for 16 rows (2026-12-02, alternated on cold weights spanning 1 GiB, one thread, helpers
// stopped), bitwise equal to these and not kept: a kernel with a tile per plane (three 16-row A
// tiles loaded with a 192-byte stride, three C tiles, B double-buffered) covering 16 rows in one
// pass instead of two: 0.82-0.91x (one panel a pass, so the A tiles load again for each panel and
// one weight stream is in flight); and PREFETCHT1 of the next chunk's weights during the second
// pass: 0.99-1.03x. Measured there: a TDPBF16PS costs about 5 ns whatever its tile height (16
// rows or 2), a 16-row TILELOADD from L1 about 2.5 ns; a 16-row product cost 95-105 ns per 1 KiB
// weight block against 62-73 ns for one row.
//
// Decoding (2026-12-02, late): a lone row no longer goes through the tiles but through
// amxEmuBF16P3 (_gen/amx.go), AVX-512 FMAs that reproduce a TDPBF16PS's arithmetic bit for bit
// (per K-block two sums from zero over the pairs' first and second products, then acc + (E +
// O), DAZ/FTZ; TestAMXEmuBitwise compares the two kernels over every tail, denormal scales and
// non-finite inputs). It streams like the avx512 kernel, with its prefetch at 2 KiB ahead
// (BenchmarkAMXDecode: 1.05-1.15x the avx512 kernel on two threads, where the tiles gave
// 0.93x), so plain decoding on amx loses nothing to avx512 and keeps the tiles' bits.
//
// Exactness: on the amx path every output element, whichever kernel computes it (the tiles,
// or for one row their emulation), adds its plane's K-blocks in K order, then its planes in a
// fixed order: an order that
// depends on K only, never on the rows (a tile row's sums do not depend on the tile's other
// rows, its position or the tile's height, which the tests check bitwise for 1 to 32 rows) or
// on the panels a call covers. A row's result is therefore bitwise independent of the batch
// width and of the thread split. AMX treats denormal inputs as zero and flushes denormal
// results (DAZ/FTZ, whatever MXCSR says): activations and weights of real models are far
// above 2^-126, and the tests' random data too; only the low plane of an activation below
// about 2^-117 is lost (bf16split.go bounds what that costs).
//
// Enabling: CPUID leaf 7 EDX (AMX-TILE bit 24, AMX-BF16 bit 22), XCR0 bits 17 and 18 (the OS
// manages tile configuration and data), and Linux's permission request for tile data,
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): without it the first tile instruction
// faults. Any failure leaves the path unregistered, with the reason in AMXStatus. Go's signal
// stack (32 KiB) holds the kernel's signal frame with tile data (about 11 KiB), which the
// permission request checks. The instructions are emitted as bytes by the avo generator (the
// Go assembler has no AMX), not reached through cgo, so a CGO_ENABLED=0 build keeps the path.
// Each kernel call loads the tile configuration at entry and releases the tiles before it
// returns: Go may move the goroutine to another thread between two calls, and assembly is never
// preempted asynchronously, so tile state never lives across a point where that can happen.

// amxConfig writes the tile configuration of the generated kernels (_gen/amx.go): tile t has
// rows[t] rows of 64 bytes (rows 0: unused). The B tiles are 16 pairs x 16 x 2 bf16; C and A
// tiles have a row per plane of each activation row.
func amxConfig(cfg *[64]byte, rows [8]int) {
	*cfg = [64]byte{0: 1} // palette 1, start row 0
	for t, r := range rows {
		if r > 0 {
			binary.LittleEndian.PutUint16(cfg[16+2*t:], 64)
			cfg[48+t] = byte(r)
		}
	}
}

// enableAMX checks the CPU and the OS for AMX-BF16 and asks Linux for tile data; a nil error
// means the kernels may run on any thread of the process.
func enableAMX() error {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return errors.New("CPUID has no leaf 7")
	}
	_, _, _, d7 := cpuid(7, 0)
	const (
		amxBF16Bit = 1 << 22
		amxTileBit = 1 << 24
	)
	if d7&amxTileBit == 0 || d7&amxBF16Bit == 0 {
		return errors.New("the CPU lacks AMX-TILE or AMX-BF16")
	}
	if xcr0, _ := xgetbv(); xcr0&(3<<17) != 3<<17 {
		return fmt.Errorf("the OS does not enable tile state in XCR0 (%#x)", xcr0)
	}
	return requestAMX()
}

// panelsAMX computes panels [p0, p1) of all rows of a bf16 matrix from the split activations h
// (splitBF16Go's layout for rows x m.K): by pairs of row groups of up to 16/amxPlanes rows,
// each group's planes stacked in one tile (amxBF16P2x2, or amxBF16P2 for a last lone group; P3
// with three planes), the same arithmetic per row in either. The panels go by L2-sized chunks
// so that a second pair of groups finds the weights the first one read in cache; rows that fit
// one pass take all the panels in one kernel call (one tile configuration per call).
func panelsAMX(m *Matrix, y []float32, h []uint16, rows, p0, p1 int) {
	n := m.N
	full := p1 // panels with all Panel rows inside N
	if p1*Panel > n {
		full = p1 - 1
	}
	step := 2 * (16 / amxPlanes)
	if amxPasses == 1 {
		step = 16
	}
	chunk := max(4, chunkBytes/(2*m.panelLen())/4*4)
	if rows <= step {
		chunk = full - p0 // one pass over the weights: no second group to find them in cache
	}
	for c0 := p0; c0 < full; c0 += chunk {
		c1 := min(c0+chunk, full)
		for r0 := 0; r0 < rows; r0 += step {
			amxRows(m, y[r0*n+c0*Panel:], n, h, rows, r0, min(step, rows-r0), c0, c1)
		}
	}
	if full == p1 {
		return
	}
	// The last panel is partial: its padding rows are zero weights, computed into a scratch
	// block and dropped. The arithmetic of the real lanes is that of any other panel.
	var tmp [16 * Panel]float32
	lanes := n - full*Panel
	for r0 := 0; r0 < rows; r0 += step {
		g := min(step, rows-r0)
		amxRows(m, tmp[:], Panel, h, rows, r0, g, full, full+1)
		for r := 0; r < g; r++ {
			copy(y[(r0+r)*n+full*Panel:(r0+r)*n+n], tmp[r*Panel:r*Panel+lanes])
		}
	}
}

// amxEmu makes a lone row (decoding) run amxEmuBF16P3, the AVX-512 kernel that computes
// amxBF16P3's bits for one row: a 1-row tile product streams its weights at 0.87-0.93x the
// avx512 one-row kernel, and the emulation as fast as that kernel (BenchmarkAMXDecode). The
// tests turn it off to compare the two kernels bitwise.
var amxEmu = true

// amxRows computes whole panels [c0, c1) of rows r0 .. r0+g-1 (g <= 2*(16/amxPlanes), or 16
// with one plane) into y, row r0's first output of panel c0 at y[0] and rows ldy floats apart.
// h holds the split activations of rows rows.
func amxRows(m *Matrix, y []float32, ldy int, h []uint16, rows, r0, g, c0, c1 int) {
	k := m.K
	nb := (k + 1) / 2 / 16
	pbytes := 2 * m.panelLen()
	var tw *uint16 // the K tail blocks from panel c0 on
	if m.bf16Tail != nil {
		tw = &m.bf16Tail[c0*16*2*Panel]
	}
	_ = y[(g-1)*ldy+(c1-c0)*Panel-1]
	planes := amxPlanes
	w, a := &m.bf16[c0*m.panelLen()], &h[amxIndex(rows, r0, 0, 0)]
	bs := 64 * planes * rows // bytes from one K-block of activations to the next
	var cfg [64]byte
	var c [4 * 16 * Panel]float32 // the kernels' tiles of plane sums (4 panels of amxBF16P3)
	switch g1 := min(g, 16/planes); {
	case g == 1 && planes == 3 && amxPasses == 3 && amxEmu:
		amxEmuBF16P3(w, tw, a, &y[0], nb, c1-c0, bs, pbytes)
	case amxPasses == 1: // benchmarks: each row's first plane, 16 rows to a tile
		amxConfig(&cfg, [8]int{g, g, g, g, g, 16, 16, 16})
		amxBF16P1(&cfg[0], w, tw, a, &y[0], &c[0], nb, c1-c0, g, 64*planes, bs, pbytes, 4*ldy)
	case g == g1:
		t := planes * g
		amxConfig(&cfg, [8]int{t, t, t, t, t, 16, 16, 16})
		if planes == 2 {
			amxBF16P2(&cfg[0], w, tw, a, &y[0], &c[0], nb, c1-c0, g, 64, bs, pbytes, 4*ldy)
			break
		}
		amxBF16P3(&cfg[0], w, tw, a, &y[0], &c[0], nb, c1-c0, g, 64, bs, pbytes, 4*ldy)
	default:
		t1, t2 := planes*g1, planes*(g-g1)
		amxConfig(&cfg, [8]int{t1, t1, t2, t2, t1, t2, 16, 16})
		if planes == 2 {
			amxBF16P2x2(&cfg[0], w, tw, a, &y[0], &c[0], nb, c1-c0, g1, 64, bs, pbytes, 4*ldy,
				g-g1, 64*planes*g1, 4*g1*ldy)
			break
		}
		amxBF16P3x2(&cfg[0], w, tw, a, &y[0], &c[0], nb, c1-c0, g1, 64, bs, pbytes, 4*ldy,
			g-g1, 64*planes*g1, 4*g1*ldy)
	}
}

// splitBF16Amx is splitBF16Go with the generated AVX-512 row splitters (bitwise the same).
func splitBF16Amx(dst []uint16, x []float32, rows, k int) {
	kp := amxRowLen(k)
	_, _ = dst[amxPlanes*rows*kp-1], x[rows*k-1]
	bs := 64 * amxPlanes * rows
	for r := 0; r < rows; r++ {
		if amxPlanes == 2 {
			splitBF16Row2x512(&dst[amxIndex(rows, r, 0, 0)], &x[r*k], k, kp, bs)
			continue
		}
		splitBF16Row3x512(&dst[amxIndex(rows, r, 0, 0)], &x[r*k], k, kp, bs)
	}
}
