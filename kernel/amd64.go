//go:build amd64 && !purego

package kernel

//go:generate sh -c "cd _gen && go run . -out ../asm_amd64.s -stubs ../asm_amd64_stubs.go -pkg kernel"

// hasAsm tells tests that this build registers assembly paths.
const hasAsm = true

// isa selects the generated kernels of one instruction set. Kernels are called directly from a
// switch rather than through a table of function values: escape analysis sees the noescape
// pragma only on direct calls, and the partial-panel scratch must stay on the stack.
type isa int

const (
	isa512 isa = iota
	isa256
)

// kern runs the generated kernel for g (1..4) rows over np whole panels starting at panel p0.
func (s isa) kern(m *Matrix, g, p0, np int, x, y *float32, ldy int) {
	k := m.K
	if m.DType == BF16 {
		w := &m.bf16[p0*m.panelLen()]
		switch s<<2 | isa(g-1) {
		case isa512<<2 | 0:
			panelsBF16R1x512(w, x, y, k, np, k, ldy)
		case isa512<<2 | 1:
			panelsBF16R2x512(w, x, y, k, np, k, ldy)
		case isa512<<2 | 2:
			panelsBF16R3x512(w, x, y, k, np, k, ldy)
		case isa512<<2 | 3:
			panelsBF16R4x512(w, x, y, k, np, k, ldy)
		case isa256<<2 | 0:
			panelsBF16R1x256(w, x, y, k, np, k, ldy)
		case isa256<<2 | 1:
			panelsBF16R2x256(w, x, y, k, np, k, ldy)
		case isa256<<2 | 2:
			panelsBF16R3x256(w, x, y, k, np, k, ldy)
		case isa256<<2 | 3:
			panelsBF16R4x256(w, x, y, k, np, k, ldy)
		}
		return
	}
	w := &m.f32[p0*m.panelLen()]
	switch s<<2 | isa(g-1) {
	case isa512<<2 | 0:
		panelsF32R1x512(w, x, y, k, np, k, ldy)
	case isa512<<2 | 1:
		panelsF32R2x512(w, x, y, k, np, k, ldy)
	case isa512<<2 | 2:
		panelsF32R3x512(w, x, y, k, np, k, ldy)
	case isa512<<2 | 3:
		panelsF32R4x512(w, x, y, k, np, k, ldy)
	case isa256<<2 | 0:
		panelsF32R1x256(w, x, y, k, np, k, ldy)
	case isa256<<2 | 1:
		panelsF32R2x256(w, x, y, k, np, k, ldy)
	case isa256<<2 | 2:
		panelsF32R3x256(w, x, y, k, np, k, ldy)
	case isa256<<2 | 3:
		panelsF32R4x256(w, x, y, k, np, k, ldy)
	}
}

func panels512(m *Matrix, y, x []float32, rows, p0, p1 int) { isa512.run(m, y, x, rows, p0, p1) }
func panels256(m *Matrix, y, x []float32, rows, p0, p1 int) { isa256.run(m, y, x, rows, p0, p1) }

// chunkBytes bounds the weights one pass over the row groups covers, so that for rows > 4 the
// panels read from memory for the first group of 4 rows are still in L2 for the next groups.
const chunkBytes = 256 << 10

// run computes panels [p0, p1) of all rows with the kernels of s. Row groups of at most 4 rows go through the
// generated kernels; a row's accumulation never depends on which group or chunk it falls in.
func (s isa) run(m *Matrix, y, x []float32, rows, p0, p1 int) {
	n, k := m.N, m.K
	full := p1 // panels with all Panel rows inside N
	if p1*Panel > n {
		full = p1 - 1
	}
	esize := 4
	if m.DType == BF16 {
		esize = 2
	}
	// At least 8 panels per chunk, in multiples of 8: the generated kernels are fastest over
	// 8 (one row) or 4 (more rows) panels at a time.
	chunk := max(8, chunkBytes/(m.panelLen()*esize)/8*8)
	for c0 := p0; c0 < full; c0 += chunk {
		c1 := min(c0+chunk, full)
		for r0 := 0; r0 < rows; r0 += 4 {
			g := min(4, rows-r0)
			s.kern(m, g, c0, c1-c0, &x[r0*k], &y[r0*n+c0*Panel], n)
		}
	}
	if full == p1 {
		return
	}
	// The last panel is partial: its padding rows are zero weights, computed into a scratch
	// block and dropped. The arithmetic of the real lanes is that of any other panel.
	var tmp [4 * Panel]float32
	lanes := n - full*Panel
	for r0 := 0; r0 < rows; r0 += 4 {
		g := min(4, rows-r0)
		s.kern(m, g, full, 1, &x[r0*k], &tmp[0], Panel)
		for r := 0; r < g; r++ {
			copy(y[(r0+r)*n+full*Panel:(r0+r)*n+n], tmp[r*Panel:r*Panel+lanes])
		}
	}
}

var (
	hasAVX2FMA bool // AVX2 and FMA, with the OS saving ymm state
	hasAVX512  bool // AVX512F, with the OS saving zmm and opmask state
	hasVNNI512 bool // AVX512_VNNI and AVX512BW besides AVX512F: the quantized zmm kernels
	hasF16C    bool // F16C besides AVX2: the quantized ymm kernels convert f16 scales
	hasAVXVNNI bool // AVX-VNNI (VEX vpdpbusd) besides those: the quantized ymm kernels use it
)

// detect reads CPUID and XCR0. A feature counts only if the OS also saves the registers it
// uses (OSXSAVE and the XCR0 bits), as a hypervisor may hide AVX-512 state.
func detect() {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return
	}
	_, _, c1, _ := cpuid(1, 0)
	const (
		fmaBit     = 1 << 12
		osxsaveBit = 1 << 27
		avxBit     = 1 << 28
		f16cBit    = 1 << 29
	)
	if c1&osxsaveBit == 0 || c1&avxBit == 0 {
		return
	}
	xcr0, _ := xgetbv()
	ymmOS := xcr0&0x6 == 0x6            // SSE and AVX state
	zmmOS := ymmOS && xcr0&0xe0 == 0xe0 // opmask, ZMM_Hi256, Hi16_ZMM state
	maxSub7, b7, c7, _ := cpuid(7, 0)
	const (
		avx2Bit     = 1 << 5
		avx512FBit  = 1 << 16
		avx512BWBit = 1 << 30 // EBX
		vnniBit     = 1 << 11 // ECX: AVX512_VNNI
	)
	hasAVX2FMA = ymmOS && b7&avx2Bit != 0 && c1&fmaBit != 0
	hasAVX512 = zmmOS && hasAVX2FMA && b7&avx512FBit != 0
	hasF16C = hasAVX2FMA && c1&f16cBit != 0
	if maxSub7 >= 1 {
		a71, _, _, _ := cpuid(7, 1)
		const avxVNNIBit = 1 << 4 // leaf 7 sub-leaf 1 EAX
		hasAVXVNNI = hasF16C && a71&avxVNNIBit != 0
	}
	hasVNNI512 = hasAVX512 && b7&avx512BWBit != 0 && c7&vnniBit != 0
}

// archRegistered runs during package variable initialization, which completes before any
// init function, so the registry is whole when dispatch.go's init applies DFLASH_KERNEL.
var archRegistered = registerArch()

func registerArch() bool {
	detect()
	// register prepends, so the most preferred path is registered last.
	if hasAVX2FMA {
		register(&impl{name: "avx2", panels: panels256, qpanels: qpanels256, quantActs: quantActs256, dot: dotF32x256, axpy: axpyF32x256, expShift: expShiftF32x256,
			axpyRowsMax: axpyRowsMaxF32x256, dotRows: dotRowsF32x256, scoresRows: scores256, weightedRows8: weightedRows8F32x256, maxF32: maxF32x256, siluMul: siluMulF32x256,
			dotsRows: dotsRowsF32x256, axpyRows: axpyRowsF32x256, dotsRowsBF16: dotsRowsBF16x256, axpyRowsBF16: axpyRowsBF16x256})
		sumF32 = sumF32x256
	}
	amxStatus = "unavailable: the amx path extends avx512, which this CPU or OS lacks"
	if hasAVX512 {
		avx := &impl{name: "avx512", panels: panels512, qpanels: qpanels512, quantActs: quantActs512, dot: dotF32x512, axpy: axpyF32x512, expShift: expShiftF32x512,
			axpyRowsMax: axpyRowsMaxF32x512, dotRows: dotRowsF32x512, scoresRows: scores512, weightedRows8: weightedRows8F32x512, maxF32: maxF32x512, siluMul: siluMulF32x512,
			dotsRows: dotsRowsF32x512, axpyRows: axpyRowsF32x512, dotsRowsBF16: dotsRowsBF16x512, axpyRowsBF16: axpyRowsBF16x512,
			deltaRule: deltaRuleF32x512}
		// Below 8 rows a product's panels split across the cores beat a row split (each
		// core then streams half the weights, not all of them); from 8 rows bf16 products
		// are compute-bound here and a row split wins (BENCHMARKS section 22).
		avx.rowSplitFrom = 8
		register(avx)
		// The amx path is avx512 with bf16 products on tiles (amx.go).
		if err := enableAMX(); err != nil {
			amxStatus = "unavailable: " + err.Error()
		} else {
			amx := *avx
			amx.name, amx.splitBF16, amx.hpanels = "amx", splitBF16Amx, panelsAMX
			// Tiles make a 16-row product cost about 2 one-row ones: past that, weight traffic
			// decides, so verification-sized forwards split panels, not rows.
			amx.rowSplitFrom = 33
			register(&amx)
			amxStatus = "available (bf16 products on AMX tiles)"
		}
	}
	return true
}

// scores512 and scores256 run the generated scores kernels over whole vectors of positions.
func scores512(y *float32, ldy int, qt *float32, nq int, kt *float32, ldk, d, n int) {
	scoresRowsF32x512(y, ldy, qt, nq, kt, ldk, d, (n+15)/16)
}

func scores256(y *float32, ldy int, qt *float32, nq int, kt *float32, ldk, d, n int) {
	scoresRowsF32x256(y, ldy, qt, nq, kt, ldk, d, (n+7)/8)
}

// qpanels512 runs quantized products on the AVX-512 path: the VNNI kernels when the CPU has
// AVX512_VNNI and AVX512BW, else the portable ones (bitwise the same results).
func qpanels512(m *Matrix, y []float32, a []byte, rows, p0, p1 int) {
	if !hasVNNI512 {
		qpanelsGo(m, y, a, rows, p0, p1)
		return
	}
	n, nb := m.N, m.qblocks()
	lda := nb * qinfos[m.DType].kind.blockBytes()
	full := p1 // panels with all Panel rows inside N
	if p1*Panel > n {
		full = p1 - 1
	}
	// Chunks of panels small enough to stay in L2 while each group of 4 rows passes over them.
	chunk := max(1, chunkBytes/m.panelBytes())
	for c0 := p0; c0 < full; c0 += chunk {
		c1 := min(c0+chunk, full)
		for r0 := 0; r0 < rows; r0 += 4 {
			g := min(4, rows-r0)
			qkern512(m, g, c0, c1-c0, &a[r0*lda], &y[r0*n+c0*Panel], n)
		}
	}
	if full == p1 {
		return
	}
	var tmp [4 * Panel]float32
	lanes := n - full*Panel
	for r0 := 0; r0 < rows; r0 += 4 {
		g := min(4, rows-r0)
		qkern512(m, g, full, 1, &a[r0*lda], &tmp[0], Panel)
		for r := 0; r < g; r++ {
			copy(y[(r0+r)*n+full*Panel:(r0+r)*n+n], tmp[r*Panel:r*Panel+lanes])
		}
	}
}

// quantActs512 quantizes activations with the generated AVX-512 quantizers.
func quantActs512(kind actKind, dst []byte, x []float32) {
	if kind == act32 {
		if n := len(x) / 32; n > 0 {
			_ = dst[n*act32Bytes-1]
			quantAct32x512(&dst[0], &x[0], n)
		}
		return
	}
	if n := len(x) / 256; n > 0 {
		_ = dst[n*act256Bytes-1]
		quantAct256x512(&dst[0], &x[0], n)
	}
}

// quantActs256 quantizes activations with the generated AVX2 quantizers (F16C for the Q8_0
// scale's rounding), else in Go.
func quantActs256(kind actKind, dst []byte, x []float32) {
	if !hasF16C {
		quantizeActsGo(kind, dst, x)
		return
	}
	if kind == act32 {
		if n := len(x) / 32; n > 0 {
			_ = dst[n*act32Bytes-1]
			quantAct32x256(&dst[0], &x[0], n)
		}
		return
	}
	if n := len(x) / 256; n > 0 {
		_ = dst[n*act256Bytes-1]
		quantAct256x256(&dst[0], &x[0], n)
	}
}

// qpanels256 runs quantized products on the AVX2 path over L2-sized chunks of panels: with
// AVX-VNNI the generated kernels take 2 rows per weight load, else one (the vpmaddubsw kernels'
// int16 stage leaves no ymm registers for a second row); a CPU without F16C runs the portable
// kernels.
func qpanels256(m *Matrix, y []float32, a []byte, rows, p0, p1 int) {
	if !hasF16C {
		qpanelsGo(m, y, a, rows, p0, p1)
		return
	}
	n, nb := m.N, m.qblocks()
	lda := nb * qinfos[m.DType].kind.blockBytes()
	group := 1
	if hasAVXVNNI {
		group = 2
	}
	full := p1
	if p1*Panel > n {
		full = p1 - 1
	}
	chunk := max(1, chunkBytes/m.panelBytes())
	for c0 := p0; c0 < full; c0 += chunk {
		c1 := min(c0+chunk, full)
		for r0 := 0; r0 < rows; r0 += group {
			qkern256(m, min(group, rows-r0), c0, c1-c0, &a[r0*lda], &y[r0*n+c0*Panel], n)
		}
	}
	if full == p1 {
		return
	}
	var tmp [2 * Panel]float32
	lanes := n - full*Panel
	for r0 := 0; r0 < rows; r0 += group {
		g := min(group, rows-r0)
		qkern256(m, g, full, 1, &a[r0*lda], &tmp[0], Panel)
		for r := 0; r < g; r++ {
			copy(y[(r0+r)*n+full*Panel:(r0+r)*n+n], tmp[r*Panel:r*Panel+lanes])
		}
	}
}

// qkern256 runs the generated AVX2 kernel of m's type for g rows (1, or 2 with AVX-VNNI) over np
// whole panels from panel p0.
func qkern256(m *Matrix, g, p0, np int, a *byte, y *float32, ldy int) {
	nb := m.qblocks()
	lda := nb * qinfos[m.DType].kind.blockBytes()
	w := &m.q[p0*m.panelBytes()]
	if hasAVXVNNI {
		switch m.DType<<1 | DType(g-1) {
		case Q8_0 << 1:
			qpanelsQ8_0R1vx256(w, a, y, nb, np, lda, ldy)
		case Q8_0<<1 | 1:
			qpanelsQ8_0R2vx256(w, a, y, nb, np, lda, ldy)
		case Q4_0 << 1:
			qpanelsQ4_0R1vx256(w, a, y, nb, np, lda, ldy)
		case Q4_0<<1 | 1:
			qpanelsQ4_0R2vx256(w, a, y, nb, np, lda, ldy)
		case Q4_K << 1:
			qpanelsQ4_KR1vx256(w, a, y, nb, np, lda, ldy)
		case Q4_K<<1 | 1:
			qpanelsQ4_KR2vx256(w, a, y, nb, np, lda, ldy)
		case Q5_K << 1:
			qpanelsQ5_KR1vx256(w, a, y, nb, np, lda, ldy)
		case Q5_K<<1 | 1:
			qpanelsQ5_KR2vx256(w, a, y, nb, np, lda, ldy)
		case Q6_K << 1:
			qpanelsQ6_KR1vx256(w, a, y, nb, np, lda, ldy)
		case Q6_K<<1 | 1:
			qpanelsQ6_KR2vx256(w, a, y, nb, np, lda, ldy)
		}
		return
	}
	switch m.DType {
	case Q8_0:
		qpanelsQ8_0R1x256(w, a, y, nb, np)
	case Q4_0:
		qpanelsQ4_0R1x256(w, a, y, nb, np)
	case Q4_K:
		qpanelsQ4_KR1x256(w, a, y, nb, np)
	case Q5_K:
		qpanelsQ5_KR1x256(w, a, y, nb, np)
	case Q6_K:
		qpanelsQ6_KR1x256(w, a, y, nb, np)
	}
}

// qkern512 runs the generated kernel of m's type for g (1..4) rows over np whole panels from
// panel p0; a is row 0's activation blocks, rows nb blocks apart.
func qkern512(m *Matrix, g, p0, np int, a *byte, y *float32, ldy int) {
	nb := m.qblocks()
	lda := nb * qinfos[m.DType].kind.blockBytes()
	w := &m.q[p0*m.panelBytes()]
	switch m.DType {
	case Q8_0:
		switch g {
		case 1:
			qpanelsQ8_0R1x512(w, a, y, nb, np, lda, ldy)
		case 2:
			qpanelsQ8_0R2x512(w, a, y, nb, np, lda, ldy)
		case 3:
			qpanelsQ8_0R3x512(w, a, y, nb, np, lda, ldy)
		case 4:
			qpanelsQ8_0R4x512(w, a, y, nb, np, lda, ldy)
		}
	case Q4_0:
		switch g {
		case 1:
			qpanelsQ4_0R1x512(w, a, y, nb, np, lda, ldy)
		case 2:
			qpanelsQ4_0R2x512(w, a, y, nb, np, lda, ldy)
		case 3:
			qpanelsQ4_0R3x512(w, a, y, nb, np, lda, ldy)
		case 4:
			qpanelsQ4_0R4x512(w, a, y, nb, np, lda, ldy)
		}
	case Q4_K:
		switch g {
		case 1:
			qpanelsQ4_KR1x512(w, a, y, nb, np, lda, ldy)
		case 2:
			qpanelsQ4_KR2x512(w, a, y, nb, np, lda, ldy)
		case 3:
			qpanelsQ4_KR3x512(w, a, y, nb, np, lda, ldy)
		case 4:
			qpanelsQ4_KR4x512(w, a, y, nb, np, lda, ldy)
		}
	case Q5_K:
		switch g {
		case 1:
			qpanelsQ5_KR1x512(w, a, y, nb, np, lda, ldy)
		case 2:
			qpanelsQ5_KR2x512(w, a, y, nb, np, lda, ldy)
		case 3:
			qpanelsQ5_KR3x512(w, a, y, nb, np, lda, ldy)
		case 4:
			qpanelsQ5_KR4x512(w, a, y, nb, np, lda, ldy)
		}
	case Q6_K:
		switch g {
		case 1:
			qpanelsQ6_KR1x512(w, a, y, nb, np, lda, ldy)
		case 2:
			qpanelsQ6_KR2x512(w, a, y, nb, np, lda, ldy)
		case 3:
			qpanelsQ6_KR3x512(w, a, y, nb, np, lda, ldy)
		case 4:
			qpanelsQ6_KR4x512(w, a, y, nb, np, lda, ldy)
		}
	}
}
