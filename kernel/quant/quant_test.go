package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// expectAt checks dequantized values at chosen indices; every other index must equal rest(i).
func expectAt(t *testing.T, got []float32, want map[int]float32, rest func(i int) float32) {
	t.Helper()
	for i, g := range got {
		w, ok := want[i]
		if !ok {
			w = rest(i)
		}
		if g != w {
			t.Errorf("element %d = %v, want %v", i, g, w)
		}
	}
}

func dequant(t *testing.T, typ Type, blk []byte, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	if err := Dequantize(typ, blk, y); err != nil {
		t.Fatal(err)
	}
	return y
}

func TestBlockSizes(t *testing.T) {
	// ggml's block structs: Q4_K 2+2+12+128, Q5_K 2+2+12+32+128, Q6_K 128+64+16+2,
	// Q8_0 2+32, Q4_0 2+16.
	for _, c := range []struct {
		typ          Type
		block, bytes int
	}{
		{F32, 1, 4}, {F16, 1, 2}, {BF16, 1, 2},
		{Q8_0, 32, 34}, {Q4_0, 32, 18}, {Q4_K, 256, 144}, {Q5_K, 256, 176}, {Q6_K, 256, 210},
	} {
		if c.typ.BlockSize() != c.block || c.typ.BlockBytes() != c.bytes {
			t.Errorf("%s: %d bytes per %d, want %d per %d", c.typ, c.typ.BlockBytes(), c.typ.BlockSize(), c.bytes, c.block)
		}
		if !c.typ.Supported() {
			t.Errorf("%s not supported", c.typ)
		}
		n, err := c.typ.RowBytes(4 * c.block)
		if err != nil || n != 4*c.bytes {
			t.Errorf("%s: RowBytes(4 blocks) = %d, %v", c.typ, n, err)
		}
	}
	if _, err := Q4_K.RowBytes(128); !errors.Is(err, ErrBlockSize) {
		t.Errorf("Q4_K row of 128: %v, want ErrBlockSize", err)
	}
}

func TestRefusals(t *testing.T) {
	// A type ggml has but dflash cannot run is refused by name, an unknown number as unknown.
	err := Dequantize(Q3_K, make([]byte, 110), make([]float32, 256))
	if !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "Q3_K") {
		t.Errorf("Q3_K: %v", err)
	}
	if _, err := Quantize(IQ4_XS, make([]float32, 256)); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "IQ4_XS") {
		t.Errorf("IQ4_XS: %v", err)
	}
	if err := Type(4).Check(); !errors.Is(err, ErrUnknownType) {
		t.Errorf("type 4 (removed Q4_2): %v", err)
	}
	if Type(99).String() != "type(99)" {
		t.Errorf("String of unknown type: %q", Type(99).String())
	}
	if err := Dequantize(Q8_0, make([]byte, 33), make([]float32, 32)); err == nil {
		t.Error("Q8_0 with a short block accepted")
	}
	if _, err := Quantize(Q4_0, make([]float32, 31)); !errors.Is(err, ErrBlockSize) {
		t.Errorf("Q4_0 of 31 values: %v", err)
	}
	x := make([]float32, 32)
	x[7] = float32(math.NaN())
	if _, err := Quantize(Q8_0, x); !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), "element 7") {
		t.Errorf("NaN: %v", err)
	}
	// max|x|/127 = 7.9e6 does not fit the f16 block scale.
	x[7] = 1e9
	if _, err := Quantize(Q8_0, x); !errors.Is(err, ErrRange) {
		t.Errorf("scale overflow: %v", err)
	}
	if _, err := Quantize(F16, []float32{1e5}); !errors.Is(err, ErrRange) {
		t.Errorf("f16 overflow: %v", err)
	}
}

// TestHalfConversions checks the one implementation of the half conversions (format/safetensors
// and kernel use it too) against the IEEE formulas in float64: every half widens to
// (-1)^s 2^(e-15) (1 + m/1024), or m 2^-24 when subnormal; narrowing a random float32 gives the
// nearest half, ties to the even one; bf16 is the top half of a float32 rounded the same way.
func TestHalfConversions(t *testing.T) {
	half := func(h uint16) float64 {
		s, e, m := float64(1), int(h>>10)&0x1f, float64(h&0x3ff)
		if h&0x8000 != 0 {
			s = -1
		}
		switch e {
		case 0:
			return s * math.Ldexp(m, -24)
		case 0x1f:
			if m != 0 {
				return math.NaN()
			}
			return s * math.Inf(1)
		}
		return s * math.Ldexp(1+m/1024, e-15)
	}
	for h := 0; h < 1<<16; h++ {
		got, want := float64(F16ToF32(uint16(h))), half(uint16(h))
		if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := math.Float32frombits(r.Uint32())
		if f != f || math.Abs(float64(f)) >= 65520 {
			continue // NaN and overflow are TestConversions' cases in format/safetensors
		}
		h := F32ToF16(f)
		d := math.Abs(float64(f) - half(h))
		for _, n := range []uint16{h - 1, h + 1} {
			if n&0x7c00 == 0x7c00 || (n^h)&0x8000 != 0 {
				continue
			}
			dn := math.Abs(float64(f) - half(n))
			if dn < d || (dn == d && h&1 == 1) {
				t.Fatalf("F32ToF16(%v) = %#04x, but %#04x is nearer (or the even tie)", f, h, n)
			}
		}
		b := F32ToBF16(f)
		if bf, lo, hi := float64(BF16ToF32(b)), float64(BF16ToF32(b-1)), float64(BF16ToF32(b+1)); math.Abs(float64(f)-bf) > math.Abs(float64(f)-lo) || math.Abs(float64(f)-bf) > math.Abs(float64(f)-hi) {
			if !math.IsInf(bf, 0) && !math.IsNaN(lo) && !math.IsNaN(hi) {
				t.Fatalf("F32ToBF16(%v) = %#04x is not the nearest bf16", f, b)
			}
		}
	}
}

func TestDequantizePlain(t *testing.T) {
	// F16: 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (smallest subnormal), 0x7bff = 65504 (largest),
	// 0x3555 = 1 + 0x155/1024 times 2^-2 = 0.333251953125.
	f16 := []byte{0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b, 0x55, 0x35}
	expectAt(t, dequant(t, F16, f16, 5), map[int]float32{0: 1, 1: -2, 2: 1.0 / (1 << 24), 3: 65504, 4: 0.333251953125}, nil)
	// BF16 is the top half of an f32: 0x3f80 = 1, 0xc0a0 = -5, 0x3e20 = 0.15625.
	bf16 := []byte{0x80, 0x3f, 0xa0, 0xc0, 0x20, 0x3e}
	expectAt(t, dequant(t, BF16, bf16, 3), map[int]float32{0: 1, 1: -5, 2: 0.15625}, nil)
	// F32 little-endian: 0x40490fdb = 3.1415927.
	expectAt(t, dequant(t, F32, []byte{0xdb, 0x0f, 0x49, 0x40}, 1), map[int]float32{0: math.Pi}, nil)
}

func TestDequantizeQ8_0(t *testing.T) {
	// d = 0x3800 = 0.5; quants 1, -2, 127, -128 at 0..3, zero elsewhere:
	// 0.5, -1, 63.5, -64.
	blk := make([]byte, 34)
	copy(blk, []byte{0x00, 0x38, 1, 0xfe, 127, 0x80})
	expectAt(t, dequant(t, Q8_0, blk, 32), map[int]float32{0: 0.5, 1: -1, 2: 63.5, 3: -64}, func(int) float32 { return 0 })
}

func TestDequantizeQ4_0(t *testing.T) {
	// d = 0x4000 = 2. Byte 0 = 0x3f: element 0 is the low nibble 15 -> (15-8)*2 = 14, element 16
	// the high nibble 3 -> (3-8)*2 = -10. Byte 1 = 0x80: element 1 -> (0-8)*2 = -16, element 17
	// -> (8-8)*2 = 0. Every other byte is 0x88, i.e. zero.
	blk := make([]byte, 18)
	blk[1] = 0x40
	for j := 2; j < 18; j++ {
		blk[j] = 0x88
	}
	blk[2], blk[3] = 0x3f, 0x80
	expectAt(t, dequant(t, Q4_0, blk, 32), map[int]float32{0: 14, 16: -10, 1: -16, 17: 0}, func(int) float32 { return 0 })
}

// kScaleHeader is a Q4_K/Q5_K header with d = 0x3800 = 0.5, dmin = 0x3400 = 0.25 and the
// sub-block scales sc = 1 2 3 4 33 47 63 17 and mins m = 5 6 7 8 20 40 63 1, packed by hand:
//
//	bytes 0-3  sc[j] | (sc[j+4]>>4)<<6: 1|2<<6 = 0x81, 2|2<<6 = 0x82, 3|3<<6 = 0xc3, 4|1<<6 = 0x44
//	bytes 4-7  m[j] | (m[j+4]>>4)<<6:   5|1<<6 = 0x45, 6|2<<6 = 0x86, 7|3<<6 = 0xc7, 8|0<<6 = 0x08
//	bytes 8-11 sc[j+4]&15 | (m[j+4]&15)<<4: 1|4<<4 = 0x41, 15|8<<4 = 0x8f, 15|15<<4 = 0xff, 1|1<<4 = 0x11
//
// so sub-block j's step d*sc_j and offset dmin*m_j are
//
//	j      0     1    2     3    4     5     6      7
//	step   0.5   1    1.5   2    16.5  23.5  31.5   8.5
//	offset 1.25  1.5  1.75  2    5     10    15.75  0.25
var kScaleHeader = []byte{0x00, 0x38, 0x00, 0x34,
	0x81, 0x82, 0xc3, 0x44, 0x45, 0x86, 0xc7, 0x08, 0x41, 0x8f, 0xff, 0x11}

var kOffsets = [8]float32{1.25, 1.5, 1.75, 2, 5, 10, 15.75, 0.25}

func TestScaleMinK(t *testing.T) {
	wantSc := [8]uint8{1, 2, 3, 4, 33, 47, 63, 17}
	wantM := [8]uint8{5, 6, 7, 8, 20, 40, 63, 1}
	for j := 0; j < 8; j++ {
		sc, m := ScaleMinK(kScaleHeader[4:], j)
		if sc != wantSc[j] || m != wantM[j] {
			t.Errorf("sub-block %d: sc %d m %d, want %d %d", j, sc, m, wantSc[j], wantM[j])
		}
	}
	var packed [12]byte
	packScaleMinK(&wantSc, &wantM, packed[:])
	if string(packed[:]) != string(kScaleHeader[4:]) {
		t.Errorf("packed % x, want % x", packed, kScaleHeader[4:])
	}
}

// kRest is the value of a K-quant element whose quant is 0: minus its sub-block's offset.
func kRest(i int) float32 { return -kOffsets[i/32] }

func TestDequantizeQ4_K(t *testing.T) {
	// Nibbles are zero except byte 5 of each 32-byte chunk c, 0xa3: element 5 of sub-block 2c
	// has q = 3, element 5 of sub-block 2c+1 has q = 10. With the table of kScaleHeader:
	//
	//	sub 0: 0.5*3 - 1.25 = 0.25      sub 1: 1*10 - 1.5 = 8.5
	//	sub 2: 1.5*3 - 1.75 = 2.75      sub 3: 2*10 - 2 = 18
	//	sub 4: 16.5*3 - 5 = 44.5        sub 5: 23.5*10 - 10 = 225
	//	sub 6: 31.5*3 - 15.75 = 78.75   sub 7: 8.5*10 - 0.25 = 84.75
	blk := make([]byte, 144)
	copy(blk, kScaleHeader)
	for c := 0; c < 4; c++ {
		blk[16+32*c+5] = 0xa3
	}
	want := map[int]float32{5: 0.25, 37: 8.5, 69: 2.75, 101: 18, 133: 44.5, 165: 225, 197: 78.75, 229: 84.75}
	expectAt(t, dequant(t, Q4_K, blk, 256), want, kRest)
}

func TestDequantizeQ5_K(t *testing.T) {
	// The nibbles of the Q4_K test, plus fifth bits: qh[5] = 0xa5 sets bits 0, 2, 5, 7, so
	// element 5 of sub-blocks 0, 2, 5 and 7 gains 16; qh[0] = 0xff gives element 0 of every
	// sub-block q = 16.
	//
	//	element 5:  sub 0: 0.5*19 - 1.25 = 8.25   sub 1: 1*10 - 1.5 = 8.5
	//	            sub 2: 1.5*19 - 1.75 = 26.75  sub 3: 2*10 - 2 = 18
	//	            sub 4: 16.5*3 - 5 = 44.5      sub 5: 23.5*26 - 10 = 601
	//	            sub 6: 31.5*3 - 15.75 = 78.75 sub 7: 8.5*26 - 0.25 = 220.75
	//	element 0:  16*step - offset = 6.75, 14.5, 22.25, 30, 259, 366, 488.25, 135.75
	blk := make([]byte, 176)
	copy(blk, kScaleHeader)
	blk[16+0], blk[16+5] = 0xff, 0xa5
	for c := 0; c < 4; c++ {
		blk[48+32*c+5] = 0xa3
	}
	want := map[int]float32{5: 8.25, 37: 8.5, 69: 26.75, 101: 18, 133: 44.5, 165: 601, 197: 78.75, 229: 220.75,
		0: 6.75, 32: 14.5, 64: 22.25, 96: 30, 128: 259, 160: 366, 192: 488.25, 224: 135.75}
	expectAt(t, dequant(t, Q5_K, blk, 256), want, kRest)
}

func TestDequantizeQ6_K(t *testing.T) {
	// d = 0x3800 = 0.5; scales 1 -2 3 4 5 6 7 8 | -1 10 11 12 13 14 -128 127. Stored quants are
	// q+32, so the background is ql = 0 with every qh bit pair = 2 (0xaa): q = 32-32 = 0.
	// In each half h (ql at 64h, qh at 128+32h), for l = 3 and l = 19:
	//	ql[l] = 0x5f, ql[l+32] = 0x1c, qh[l] = 0x93 = pairs 3, 0, 1, 2 from the low bits, so
	//	element l      = 0xf | 3<<4 = 63 -> q = 31
	//	element l+32   = 0xc | 0<<4 = 12 -> q = -20
	//	element l+64   = 0x5 | 1<<4 = 21 -> q = -11
	//	element l+96   = 0x1 | 2<<4 = 33 -> q = 1
	// and element 0 of half 0 gets ql[0] low nibble 0 with pair 0: q = -32.
	// The sub-block of element e is e/16, so (value = 0.5*scale*q):
	//	e=0 sub 0: 0.5*1*-32 = -16
	//	e=3 sub 0: 15.5     e=19 sub 1: -31    e=35 sub 2: -30    e=51 sub 3: -40
	//	e=67 sub 4: -27.5   e=83 sub 5: -33    e=99 sub 6: 3.5    e=115 sub 7: 4
	//	e=131 sub 8: -15.5  e=147 sub 9: 155   e=163 sub 10: -110 e=179 sub 11: -120
	//	e=195 sub 12: -71.5 e=211 sub 13: -77  e=227 sub 14: -64  e=243 sub 15: 63.5
	blk := make([]byte, 210)
	for i := 128; i < 192; i++ {
		blk[i] = 0xaa
	}
	for h := 0; h < 2; h++ {
		for _, l := range []int{3, 19} {
			blk[64*h+l], blk[64*h+l+32], blk[128+32*h+l] = 0x5f, 0x1c, 0x93
		}
	}
	blk[128] = 0xa8
	scales := []int8{1, -2, 3, 4, 5, 6, 7, 8, -1, 10, 11, 12, 13, 14, -128, 127}
	for j, s := range scales {
		blk[192+j] = byte(s)
	}
	blk[208], blk[209] = 0x00, 0x38
	want := map[int]float32{0: -16,
		3: 15.5, 19: -31, 35: -30, 51: -40, 67: -27.5, 83: -33, 99: 3.5, 115: 4,
		131: -15.5, 147: 155, 163: -110, 179: -120, 195: -71.5, 211: -77, 227: -64, 243: 63.5}
	expectAt(t, dequant(t, Q6_K, blk, 256), want, func(int) float32 { return 0 })
}

// testData draws n values of several shapes a weight matrix has: centred gaussians, a
// one-sided (all positive) block, an outlier, constants and zeros.
func testData(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.05)
	}
	for i := 256; i < 512 && i < n; i++ {
		x[i] = 3 + float32(r.Float64())
	}
	if n > 600 {
		x[600] = 40
	}
	for i := 768; i < 1024 && i < n; i++ {
		x[i] = -0.75
	}
	for i := 1024; i < 1280 && i < n; i++ {
		x[i] = 0
	}
	return x
}

// Each bound is the one the quantizer's doc comment promises, evaluated on the block's own data
// with a 0.2% allowance for the f16 rounding of scales and float rounding.
func TestRoundTrip(t *testing.T) {
	const slack = 1.002
	absMaxOf := func(x []float32) float32 { return absMax(x) }
	bounds := map[Type]func(x []float32) float32{ // x is one block
		F32:  func([]float32) float32 { return 0 },
		F16:  func(x []float32) float32 { return absMaxOf(x) / 2048 },
		BF16: func(x []float32) float32 { return absMaxOf(x) / 256 },
		Q8_0: func(x []float32) float32 { return absMaxOf(x) / 254 * slack },
		Q4_0: func(x []float32) float32 { return absMaxOf(x) / 15 * slack },
		Q6_K: func(x []float32) float32 { return 0.5 * absMaxOf(x) / 31.5 * (1 + 1.0/127) * slack },
		Q4_K: func(x []float32) float32 { return affineBound(x, 15) * slack },
		Q5_K: func(x []float32) float32 { return affineBound(x, 31) * slack },
	}
	r := rand.New(rand.NewPCG(7, 8))
	x := testData(r, 4096)
	for typ, bound := range bounds {
		blk, err := Quantize(typ, x)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if want, _ := typ.RowBytes(len(x)); len(blk) != want {
			t.Fatalf("%s: %d bytes, want %d", typ, len(blk), want)
		}
		y := dequant(t, typ, blk, len(x))
		bs := max(typ.BlockSize(), 256) // the plain types are judged per 256 elements
		var worst float64
		for b := 0; b < len(x)/bs; b++ {
			xb, yb := x[bs*b:bs*b+bs], y[bs*b:bs*b+bs]
			for i := range xb {
				lim := bound(xb)
				if typ.BlockSize() == 32 {
					lim = bound(xb[i/32*32 : i/32*32+32])
				}
				e := math.Abs(float64(xb[i] - yb[i]))
				if e > float64(lim) {
					t.Fatalf("%s element %d: %v -> %v, error %g over the bound %g", typ, bs*b+i, xb[i], yb[i], e, lim)
				}
				worst = max(worst, e/max(float64(lim), 1e-30))
			}
		}
		t.Logf("%s: worst error %.2f of the bound", typ, worst)
	}
}

// affineBound is Q4_K's and Q5_K's promise for one super-block: half of the larger of the step
// and the min unit, where the step of the widest sub-block (range R, plus half a min unit of
// rounding of its offset) is coarsened by at most one 63rd of the largest step when the 6-bit
// scale is rounded up, and the min unit is the largest offset M over 63.
func affineBound(x []float32, top int) float32 {
	var r, m float32
	for j := 0; j < 8; j++ {
		lo, hi := float32(0), float32(0)
		for _, v := range x[32*j : 32*j+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		r, m = max(r, hi-lo), max(m, -lo)
	}
	unit := m / 63 * 1.001
	step := (r + unit/2) / float32(top) * (1 + 1.001/63)
	return 0.5 * max(step, unit)
}
