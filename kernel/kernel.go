// Package kernel owns the hot loops of dflash: matrix products of weights with a few activation
// rows, and the small vector primitives attention needs. Nothing else lives here: no model
// knowledge, no allocation on the hot path, no I/O.
//
// A weight matrix W has N output rows of K inputs. MatMul computes y[r] = W x[r] for 1..32 rows.
//
// Invariant kept by every path (and tested): the result for a row is bitwise identical whatever
// the batch width and whatever the other rows hold. Decoding (1 row) and verification (n rows) then
// use the same arithmetic, which keeps greedy speculative output identical to plain decoding.
//
// The path is chosen once at start from CPU features and can be forced with DFLASH_KERNEL
// (see Paths) so tests exercise every path the machine can run.
package kernel

import (
	"fmt"
	"math"
)

// DType is the element type a Matrix stores its weights in.
type DType int

const (
	F32 DType = iota
	BF16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Panel is the number of output rows interleaved in the bf16 layout: [ceil(N/Panel)][K][Panel].
const Panel = 16

// Matrix is a weight matrix ready for the kernels. It is immutable after construction and safe
// for concurrent use.
type Matrix struct {
	N, K  int
	DType DType
	f32   []float32 // row-major [N][K] when DType == F32
	bf16  []uint16  // panels [ceil(N/Panel)][K][Panel], zero-padded rows, when DType == BF16
}

// NewF32 wraps row-major f32 weights w[N*K]. It keeps a reference to w (no copy), so w may be a
// memory-mapped file region.
func NewF32(w []float32, n, k int) *Matrix {
	if len(w) != n*k {
		panic(fmt.Sprintf("kernel.NewF32: len %d != %d*%d", len(w), n, k))
	}
	return &Matrix{N: n, K: k, DType: F32, f32: w}
}

// NewBF16 repacks row-major bf16 weights (raw bit patterns) into panels the kernels stream
// contiguously. The input is not retained.
func NewBF16(w []uint16, n, k int) *Matrix {
	if len(w) != n*k {
		panic(fmt.Sprintf("kernel.NewBF16: len %d != %d*%d", len(w), n, k))
	}
	np := (n + Panel - 1) / Panel
	p := make([]uint16, np*k*Panel)
	for j := 0; j < n; j++ {
		pj, lane := j/Panel, j%Panel
		base := pj * k * Panel
		row := w[j*k : (j+1)*k]
		for i, v := range row {
			p[base+i*Panel+lane] = v
		}
	}
	return &Matrix{N: n, K: k, DType: BF16, bf16: p}
}

// Bytes is the number of weight bytes one product streams (the figure bandwidth is measured by).
func (m *Matrix) Bytes() int64 {
	if m.DType == BF16 {
		return int64(m.N) * int64(m.K) * 2
	}
	return int64(m.N) * int64(m.K) * 4
}

// Row returns row j of W as f32 (a copy for bf16). Used for embedding lookups of tied heads and
// by tests; not a hot path.
func (m *Matrix) Row(dst []float32, j int) {
	if m.DType == F32 {
		copy(dst, m.f32[j*m.K:(j+1)*m.K])
		return
	}
	pj, lane := j/Panel, j%Panel
	base := pj * m.K * Panel
	for i := 0; i < m.K; i++ {
		dst[i] = BF16ToF32(m.bf16[base+i*Panel+lane])
	}
}

// MatMul computes y[r*N+j] = sum_i W[j][i] * x[r*K+i] for r < rows.
func (m *Matrix) MatMul(y, x []float32, rows int) {
	if rows <= 0 {
		return
	}
	if len(x) < rows*m.K || len(y) < rows*m.N {
		panic(fmt.Sprintf("kernel.MatMul: rows=%d N=%d K=%d len(x)=%d len(y)=%d", rows, m.N, m.K, len(x), len(y)))
	}
	active.matmul(m, y, x, rows)
}

// BF16ToF32 widens a bf16 bit pattern exactly.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to nearest even (NaN stays NaN).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
