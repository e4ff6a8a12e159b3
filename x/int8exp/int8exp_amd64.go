//go:build amd64 && !purego

package int8exp

// HasVNNI reports whether the CPU runs AVX512_VNNI with the OS saving zmm state; without it the
// products fall back to the Go reference (correct, and far slower).
var HasVNNI = detectVNNI()

func detectVNNI() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	if c1&(1<<27) == 0 { // OSXSAVE
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&0xe6 != 0xe6 { // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const (
		avx512F = 1 << 16 // EBX
		vnni    = 1 << 11 // ECX
	)
	return b7&avx512F != 0 && c7&vnni != 0
}

// panelsR1 runs the matrix-vector kernel over panels [p0, p1) of m.
func (m *Matrix) panelsR1(s *Scratch, y []float32, p0, p1 int) {
	if !HasVNNI {
		m.panelsRefR1(s, y, p0, p1)
		return
	}
	full := min(p1, m.N/Panel) // panels with all 16 rows inside N
	if full > p0 {
		q8R1(&m.w[p0*m.kp*Panel], &s.q[0], &m.corr[p0*Panel], &m.scale[p0*Panel], &y[p0*Panel], m.kp/Group, full-p0, s.xs[0])
	}
	if full < p1 {
		// The partial last panel goes through a scratch block; its padding lanes are dropped.
		q8R1(&m.w[full*m.kp*Panel], &s.q[0], &m.corr[full*Panel], &m.scale[full*Panel], &s.t[0], m.kp/Group, 1, s.xs[0])
		copy(y[full*Panel:m.N], s.t[:m.N-full*Panel])
	}
}

// panelsR16 runs the 16-row kernel over panels [p0, p1) of m; y is 16*N.
func (m *Matrix) panelsR16(s *Scratch, y []float32, p0, p1 int) {
	if !HasVNNI {
		m.panelsRefR16(s, y, p0, p1)
		return
	}
	full := min(p1, m.N/Panel)
	if full > p0 {
		q8R16(&m.w[p0*m.kp*Panel], &s.q[0], &m.corr[p0*Panel], &m.scale[p0*Panel], &s.xs[0], &y[p0*Panel], m.N, m.kp/Group, full-p0)
	}
	if full < p1 {
		q8R16(&m.w[full*m.kp*Panel], &s.q[0], &m.corr[full*Panel], &m.scale[full*Panel], &s.xs[0], &s.t[0], Panel, m.kp/Group, 1)
		lanes := m.N - full*Panel
		for r := 0; r < Panel; r++ {
			copy(y[r*m.N+full*Panel:(r+1)*m.N], s.t[r*Panel:r*Panel+lanes])
		}
	}
}

// q8R1 computes np whole panels of one activation row: y[l] = float32(sum - corr[l]) * ws[l] * xs
// for the 16 rows l of each panel, with groups (even) groups of 4 inputs per panel.
//
//go:noescape
func q8R1(w *int8, x *uint8, corr *int32, ws *float32, y *float32, groups int, np int, xs float32)

// q8R16 computes np whole panels of 16 activation rows packed [groups][16][4]:
// y[r*ldy+l] = float32(sum - corr[l]) * ws[l] * xs[r].
//
//go:noescape
func q8R16(w *int8, x *uint8, corr *int32, ws *float32, xs *float32, y *float32, ldy int, groups int, np int)

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

func xgetbv() (a, d uint32)
