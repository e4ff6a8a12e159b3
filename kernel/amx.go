//go:build amd64 && !purego

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The "amx" path: the avx512 path with bf16 products on Intel AMX tiles (TDPBF16PS), for
// which a 16-row product costs about what a 1-row one does, both bound by streaming the
// weights (the AVX-512 kernels are compute-bound beyond a few rows). F32 and quantized
// matrices and the attention helpers keep the avx512 kernels.
//
// The bf16 panel layout (see Panel) is already the B-tile layout: for K-block b (32 inputs, 16
// pairs) of a panel, 16 pairs x 16 columns x 2 bf16 are 1 KiB contiguous at panel + b*1024, so
// no weight is repacked. Activations, split into bf16 planes whose sum is the f32 value
// (bf16split.go), are the A tiles (rows x 32 bf16), and a C tile holds rows x 16 f32 sums of
// one panel. The kernels (_gen/amx.go) take three panels per pass, sharing each A tile load,
// then single panels. They read weights by whole 16-pair blocks; a K tail of fewer pairs is
// read from a zero-padded copy of each panel's last block (Matrix.bf16Tail), so no load reads
// past a panel (an odd K's last pair is the layout's zero pad times a zero activation).
//
// Exactness: the amx path uses AMX for every row count, 1 included (a single row is
// bandwidth-bound anyway), and every output element adds, per K-block in K order, the block's
// products with plane 0, then 1, then 2: an order that depends on K only, never on the rows
// (row groups of 16, each with its own tile configuration, rows never mixing within a tile)
// or on the panels a call covers. A row's result is therefore bitwise independent of the batch
// width and of the thread split. AMX treats denormal inputs as zero and flushes denormal
// results (DAZ/FTZ, whatever MXCSR says): activations and weights of real models are far
// above 2^-126, and the tests' random data too; only the low plane of an activation below
// about 2^-110 is lost.
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

// amxConfig writes the tile configuration of the generated kernels (_gen/amx.go) for rows
// rows: tiles 0-2 C (rows x 16 f32), 3-5 A (rows x 32 bf16), 6-7 B (16 pairs x 16 x 2 bf16).
func amxConfig(cfg *[64]byte, rows int) {
	*cfg = [64]byte{0: 1} // palette 1, start row 0
	for t := 0; t < 8; t++ {
		r := rows
		if t >= 6 {
			r = 16
		}
		binary.LittleEndian.PutUint16(cfg[16+2*t:], 64)
		cfg[48+t] = byte(r)
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
// (splitBF16Go's layout for rows x m.K), in row groups of up to 16. For rows > 16, the panels go
// by L2-sized chunks so that the later groups find the weights the first one read in cache.
func panelsAMX(m *Matrix, y []float32, h []uint16, rows, p0, p1 int) {
	n, k := m.N, m.K
	kp := amxRowLen(k)
	nb := (k + 1) / 2 / 16
	lda, plane, pbytes, ldy := 2*kp, 2*rows*kp, 2*m.panelLen(), 4*n
	full := p1 // panels with all Panel rows inside N
	if p1*Panel > n {
		full = p1 - 1
	}
	// tail returns the K tail blocks from panel p on, or nil without a tail.
	tail := func(p int) *uint16 {
		if m.bf16Tail == nil {
			return nil
		}
		return &m.bf16Tail[p*16*2*Panel]
	}
	var cfg [64]byte
	chunk := max(3, chunkBytes/pbytes/3*3)
	for c0 := p0; c0 < full; c0 += chunk {
		c1 := min(c0+chunk, full)
		for r0 := 0; r0 < rows; r0 += 16 {
			amxConfig(&cfg, min(16, rows-r0))
			amxKern(&cfg, &m.bf16[c0*m.panelLen()], tail(c0), &h[r0*kp], &y[r0*n+c0*Panel], nb, c1-c0, lda, plane, pbytes, ldy)
		}
	}
	if full == p1 {
		return
	}
	// The last panel is partial: its padding rows are zero weights, computed into a scratch
	// block and dropped. The arithmetic of the real lanes is that of any other panel.
	var tmp [16 * Panel]float32
	lanes := n - full*Panel
	for r0 := 0; r0 < rows; r0 += 16 {
		g := min(16, rows-r0)
		amxConfig(&cfg, g)
		amxKern(&cfg, &m.bf16[full*m.panelLen()], tail(full), &h[r0*kp], &tmp[0], nb, 1, lda, plane, pbytes, 4*Panel)
		for r := 0; r < g; r++ {
			copy(y[(r0+r)*n+full*Panel:(r0+r)*n+n], tmp[r*Panel:r*Panel+lanes])
		}
	}
}

// splitBF16Amx is splitBF16Go with the generated AVX-512 row splitter (bitwise the same).
func splitBF16Amx(dst []uint16, x []float32, rows, k int) {
	kp := amxRowLen(k)
	_, _ = dst[3*rows*kp-1], x[rows*k-1]
	for r := 0; r < rows; r++ {
		splitBF16Rowx512(&dst[r*kp], &x[r*k], k, kp, 2*rows*kp)
	}
}

// amxKern runs the generated kernel for amxPasses planes.
func amxKern(cfg *[64]byte, w, tw, a *uint16, y *float32, nb, np, lda, plane, pbytes, ldy int) {
	switch amxPasses {
	case 1:
		amxBF16P1(&cfg[0], w, tw, a, y, nb, np, lda, plane, pbytes, ldy)
	case 2:
		amxBF16P2(&cfg[0], w, tw, a, y, nb, np, lda, plane, pbytes, ldy)
	default:
		amxBF16P3(&cfg[0], w, tw, a, y, nb, np, lda, plane, pbytes, ldy)
	}
}
