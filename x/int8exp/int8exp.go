// Package int8exp is an experiment, not a production path: it measures what int8 weights times
// int8 activations (AVX-512 VNNI, VPDPBUSD) would gain over package kernel's bf16 kernels on
// this machine, for docs/design/int8.md. It owns a 16-row panel layout for int8 weights, the
// per-row quantizers, hand-written VNNI kernels for 1 and 16 activation rows, and a Go
// reference with exact integer accumulation. Nothing in dflash may depend on it: it must never
// be wired into a model, define a file format, or change package kernel's numerics (quantized
// products break the bitwise identity between bf16 decoding and verification).
//
// Numerics. Weights are symmetric per output row: w[j][i] ~ sw[j]*q[j][i], q in [-127, 127].
// Activations are symmetric per row, a[r][i] = round(x[r][i]/sx[r]) in [-127, 127], stored as
// u8 a+128 because VPDPBUSD multiplies unsigned bytes by signed bytes. The offset adds
// 128*sum_i q[j][i] to every accumulator of output j, a constant of the weights alone, which is
// precomputed at quantization (corr) and subtracted once per output:
//
//	y[r][j] = float32(sum_i (a[r][i]+128)*q[j][i] - corr[j]) * sw[j] * sx[r]
//
// The accumulation is exact in int32 while K*255*127 < 2^31, that is K < 66,000.
package int8exp

import (
	"fmt"
	"math"
	"sync"
)

// Panel is the number of output rows interleaved in the weight layout, as in package kernel:
// one zmm register holds 16 int32 sums, one per output row of a panel.
const Panel = 16

// Group is the number of consecutive inputs one VPDPBUSD lane multiplies and adds.
const Group = 4

// kAlign is the padding of K: the kernels consume two groups per step.
const kAlign = 2 * Group

// Matrix is an int8 weight matrix in panels: [ceil(N/16)] panels of [Kp/4][16][4] bytes, where
// Kp is K rounded up to a multiple of 8. Weight (row j, input i) sits at
// (j/16)*Kp*16 + (i/4)*64 + (j%16)*4 + i%4, so one 64-byte load gives 4 consecutive inputs of
// each of the 16 rows of a panel: exactly the s8 operand of one VPDPBUSD. Padding rows and
// inputs are zero weights, which add nothing to any sum.
type Matrix struct {
	N, K  int
	kp    int
	w     []int8
	scale []float32 // sw per output row, zero past N (len panels*16)
	corr  []int32   // 128*sum_i q[j][i] per output row (len panels*16)
}

// Quantize builds an int8 Matrix from row-major f32 weights w[n*k], one symmetric scale per
// output row (maxabs/127, rounding to nearest, halves up).
func Quantize(w []float32, n, k int) (*Matrix, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return nil, fmt.Errorf("int8exp.Quantize: len %d for %dx%d", len(w), n, k)
	}
	if k*255*127 >= math.MaxInt32 {
		return nil, fmt.Errorf("int8exp.Quantize: K=%d overflows the int32 accumulators", k)
	}
	m := &Matrix{N: n, K: k, kp: (k + kAlign - 1) / kAlign * kAlign}
	np := m.panels()
	m.w = make([]int8, np*m.kp*Panel)
	m.scale = make([]float32, np*Panel)
	m.corr = make([]int32, np*Panel)
	for j := 0; j < n; j++ {
		row := w[j*k : (j+1)*k]
		for _, v := range row {
			if math.IsInf(float64(v), 0) || v != v {
				return nil, fmt.Errorf("int8exp.Quantize: row %d: non-finite weight %v", j, v)
			}
		}
		s := rowScale(row)
		if s == 0 {
			continue // an all-zero row quantizes to zeros with scale 0
		}
		inv := 1 / s
		var sum int32
		base := j / Panel * m.kp * Panel
		for i, v := range row {
			q := code(v, inv)
			m.w[base+i/Group*Group*Panel+j%Panel*Group+i%Group] = int8(q)
			sum += q
		}
		m.scale[j] = s
		m.corr[j] = 128 * sum
	}
	return m, nil
}

func (m *Matrix) panels() int { return (m.N + Panel - 1) / Panel }

// Bytes is the number of weight bytes one product streams, the figure bandwidth is measured by;
// the scales and corrections (8 bytes per output row, under 1% at K >= 1024) are left out.
func (m *Matrix) Bytes() int64 { return int64(m.N) * int64(m.K) }

// Clone returns a copy with its own weight storage, for benchmarks that cycle through more
// weights than the last-level cache holds.
func (m *Matrix) Clone() *Matrix {
	c := *m
	c.w = append([]int8(nil), m.w...)
	return &c
}

// Scratch holds one product's quantized activations; it lets the hot path allocate nothing.
// A Scratch serves one product at a time.
type Scratch struct {
	kp int
	q  []uint8                // 1 row: [Kp]; a 16-row block: [Kp/4][16][4], like the weights
	xs [Panel]float32         // per-row activation scales
	y  []float32              // 16*N outputs of a block with fewer than 16 rows
	t  [Panel * Panel]float32 // outputs of a partial last panel
}

// NewScratch returns scratch space for products of m.
func (m *Matrix) NewScratch() *Scratch {
	return &Scratch{kp: m.kp, q: make([]uint8, m.kp*Panel)}
}

// quantizeRow returns the scale of x and writes its u8 codes (a+128) at q[i/4*stride+i%4],
// code 128 (zero) for inputs past len(x) up to kp. It runs once per activation row and product,
// so it is kept to float32 operations: a K=3072 row costs a few microseconds.
func quantizeRow(q []uint8, stride int, x []float32, kp int) float32 {
	s := rowScale(x)
	var inv float32
	if s > 0 {
		inv = 1 / s
	}
	n4 := len(x) / Group * Group
	for i := 0; i < n4; i += Group {
		d := q[i/Group*stride : i/Group*stride+Group]
		v := x[i : i+Group]
		d[0] = uint8(code(v[0], inv) + 128)
		d[1] = uint8(code(v[1], inv) + 128)
		d[2] = uint8(code(v[2], inv) + 128)
		d[3] = uint8(code(v[3], inv) + 128)
	}
	for i := n4; i < len(x); i++ {
		q[i/Group*stride+i%Group] = uint8(code(x[i], inv) + 128)
	}
	for i := len(x); i < kp; i++ {
		q[i/Group*stride+i%Group] = 128
	}
	return s
}

// rowScale is the symmetric scale maxabs/127 of x (0 for a zero row).
func rowScale(x []float32) float32 {
	var hi, lo float32
	for _, v := range x {
		if v > hi {
			hi = v
		}
		if v < lo {
			lo = v
		}
	}
	return max(hi, -lo) / 127
}

// code rounds v*inv (|v*inv| <= 127 up to rounding) to the nearest integer, halves up:
// floor(v*inv + 128.5) - 128, the truncation of a positive float32. The explicit conversion
// keeps the product rounded on its own: a fused multiply-add would round codes differently.
func code(v, inv float32) int32 {
	t := float32(v*inv) + 128.5
	if t < 0.5 {
		t = 0.5
	} else if t > 255.5 {
		t = 255.5
	}
	return int32(t) - 128
}

// MatMul computes y[r*N+j] ~ sum_i W[j][i]*x[r*K+i] for r < rows with int8 arithmetic, on
// threads goroutines (1 or 2; panels are split in halves). One row takes the matrix-vector
// kernel, more rows go in blocks of 16 through the 16-row kernel (a block is padded with zero
// rows).
func (m *Matrix) MatMul(y, x []float32, rows int, s *Scratch, threads int) error {
	if rows <= 0 {
		return nil
	}
	if len(x) < rows*m.K || len(y) < rows*m.N || s == nil || s.kp != m.kp {
		return fmt.Errorf("int8exp.MatMul: rows=%d N=%d K=%d len(x)=%d len(y)=%d", rows, m.N, m.K, len(x), len(y))
	}
	if rows == 1 {
		s.xs[0] = quantizeRow(s.q, Group, x[:m.K], m.kp)
		m.split(threads, func(p0, p1 int) { m.panelsR1(s, y, p0, p1) })
		return nil
	}
	for r0 := 0; r0 < rows; r0 += Panel {
		g := min(Panel, rows-r0)
		for r := 0; r < Panel; r++ {
			var xr []float32
			if r < g {
				xr = x[(r0+r)*m.K : (r0+r+1)*m.K]
			}
			s.xs[r] = quantizeRow(s.q[r*Group:], Group*Panel, xr, m.kp)
		}
		yb := y[r0*m.N:]
		if g < Panel {
			if len(s.y) < Panel*m.N {
				s.y = make([]float32, Panel*m.N)
			}
			yb = s.y
		}
		m.split(threads, func(p0, p1 int) { m.panelsR16(s, yb, p0, p1) })
		if g < Panel {
			copy(y[r0*m.N:(r0+g)*m.N], s.y)
		}
	}
	return nil
}

// split runs f over panel ranges covering all panels, on one goroutine or two.
func (m *Matrix) split(threads int, f func(p0, p1 int)) {
	np := m.panels()
	if threads < 2 || np < 8 {
		f(0, np)
		return
	}
	mid := np / 2 / 4 * 4 // whole 4-panel steps of the matrix-vector kernel
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f(mid, np)
	}()
	f(0, mid)
	wg.Wait()
}

// epilogue turns an exact integer sum into the f32 output, in the order the kernels use.
func epilogue(acc, corr int32, sw, sx float32) float32 {
	return float32(acc-corr) * sw * sx
}

// panelsRefR1 is the Go reference of the matrix-vector kernel over panels [p0, p1).
func (m *Matrix) panelsRefR1(s *Scratch, y []float32, p0, p1 int) {
	for p := p0; p < p1; p++ {
		w := m.w[p*m.kp*Panel:]
		for l := 0; l < Panel && p*Panel+l < m.N; l++ {
			var acc int32
			for i := 0; i < m.kp; i++ {
				acc += int32(s.q[i]) * int32(w[i/Group*Group*Panel+l*Group+i%Group])
			}
			j := p*Panel + l
			y[j] = epilogue(acc, m.corr[j], m.scale[j], s.xs[0])
		}
	}
}

// panelsRefR16 is the Go reference of the 16-row kernel over panels [p0, p1); y is 16*N.
func (m *Matrix) panelsRefR16(s *Scratch, y []float32, p0, p1 int) {
	for p := p0; p < p1; p++ {
		w := m.w[p*m.kp*Panel:]
		for r := 0; r < Panel; r++ {
			for l := 0; l < Panel && p*Panel+l < m.N; l++ {
				var acc int32
				for i := 0; i < m.kp; i++ {
					acc += int32(s.q[i/Group*Group*Panel+r*Group+i%Group]) * int32(w[i/Group*Group*Panel+l*Group+i%Group])
				}
				j := p*Panel + l
				y[r*m.N+j] = epilogue(acc, m.corr[j], m.scale[j], s.xs[r])
			}
		}
	}
}
