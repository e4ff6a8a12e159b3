package kernel

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/dflash/dflash/kernel/quant"
)

// Activations of a quantized product are quantized per row and per block before the integer
// dot products, once per call (MatMul or MatMulEach, before any split across threads), in Go on
// every path: the step is O(rows*K) against the product's O(rows*N*K), and sharing it keeps the
// paths' integer inputs identical by construction. A row's quantized blocks depend on that row
// only, so the batch-width invariant carries over.

// actKind is an activation quantization.
type actKind int

const (
	// act32 is ggml's Q8_0, the activations of Q8_0 and Q4_0 weights: per block of 32, d =
	// max|x|/127 rounded to f16 (the dot uses the rounded value), quants round(x/d) with the
	// reciprocal of the unrounded d, as ggml's quantize_row_q8_0 (halves to even: see rne). A
	// block is act32Bytes:
	// [0,32) int8 quants, [32,36) d as f32, then the int32 biases that start the kernels'
	// integer sums: [36,40) -128*sum(quants) (Q8_0 weights are stored +128), [40,44)
	// -8*sum(quants) (Q4_0 nibbles stand for n-8); [44,48) zero.
	act32 actKind = iota
	// act256 is Q8_K-style, the activations of the K-quants: per super-block of 256, d =
	// max|x|/127 as f32 and quants rne(x*127/max|x|) in -127..127 (symmetric, where ggml's
	// Q8_K maps the extreme to -128: the kernels' bounds below assume |q| <= 127), plus block
	// sums. A block is act256Bytes: [0,256) int8 quants, [256,260) d f32, [264,280) eight int16
	// sums of 32 quants (Q4_K/Q5_K mins; |sum| <= 4064), [280,344) sixteen int32 sums of 16
	// quants times -32 (the bias of Q6_K's q-32), the rest zero.
	act256
)

const (
	act32Bytes  = 48
	act256Bytes = 352
)

// actBlockBytes is the bytes of one quantized activation block of kind k.
func (k actKind) blockBytes() int {
	if k == act32 {
		return act32Bytes
	}
	return act256Bytes
}

// quantizeActsGo writes the len(x)/block blocks of x quantized as kind into dst.
func quantizeActsGo(kind actKind, dst []byte, x []float32) {
	if kind == act32 {
		for i := 0; i < len(x)/32; i++ {
			quantizeAct32(dst[i*act32Bytes:(i+1)*act32Bytes], x[32*i:32*i+32])
		}
		return
	}
	for i := 0; i < len(x)/256; i++ {
		quantizeAct256(dst[i*act256Bytes:(i+1)*act256Bytes], x[256*i:256*i+256])
	}
}

// absMax is the largest magnitude in x, compared as bit patterns (NaN and Inf come out as such).
func absMax(x []float32) float32 {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return math.Float32frombits(m)
}

// rne rounds v (|v| < 2^22) to the nearest integer, halves to even: adding and removing
// 1.5*2^23 leaves no fraction bits, and the rounding of the addition is IEEE's default. ggml's
// reference quantizers round halves away from zero, its AVX ones to even; this is the rounding
// one vector conversion does, and all paths share these quants anyway.
func rne(v float32) int32 {
	const magic = 0x1.8p23
	return int32(float32(v+magic) - magic)
}

// quantQ stores round(v*scale) into -127..127 as a byte and returns it.
func quantQ(v, scale float32) int32 {
	return min(max(rne(float32(v*scale)), -127), 127)
}

func quantizeAct32(dst []byte, x []float32) {
	amax := absMax(x)
	if !(amax <= math.MaxFloat32) { // NaN or Inf: NaN results for the block
		clear(dst[:act32Bytes])
		binary.LittleEndian.PutUint32(dst[32:], math.Float32bits(math.Float32frombits(0x7fc00000)))
		return
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var sum int32
	for i, v := range x[:32] {
		q := quantQ(v, id)
		dst[i] = byte(q)
		sum += q
	}
	binary.LittleEndian.PutUint32(dst[32:], math.Float32bits(f16Round(d)))
	binary.LittleEndian.PutUint32(dst[36:], uint32(-128*sum))
	binary.LittleEndian.PutUint32(dst[40:], uint32(-8*sum))
	binary.LittleEndian.PutUint32(dst[44:], 0)
}

// f16Round is f rounded to the nearest f16 value (as ggml stores a Q8_0 scale).
func f16Round(f float32) float32 { return quant.F16ToF32(quant.F32ToF16(f)) }

func quantizeAct256(dst []byte, x []float32) {
	clear(dst[:act256Bytes])
	amax := absMax(x)
	if amax == 0 {
		return
	}
	if !(amax <= math.MaxFloat32) {
		binary.LittleEndian.PutUint32(dst[256:], math.Float32bits(math.Float32frombits(0x7fc00000)))
		return
	}
	is := 127 / amax
	for j := 0; j < 16; j++ {
		var s int32
		for i, v := range x[16*j : 16*j+16] {
			q := quantQ(v, is)
			dst[16*j+i] = byte(q)
			s += q
		}
		binary.LittleEndian.PutUint32(dst[280+4*j:], uint32(-32*s))
		if j%2 == 1 {
			s32 := s - int32(binary.LittleEndian.Uint32(dst[280+4*(j-1):]))/32
			binary.LittleEndian.PutUint16(dst[264+2*(j/2):], uint16(int16(s32)))
		}
	}
	binary.LittleEndian.PutUint32(dst[256:], math.Float32bits(1/is))
}

// actScratch holds one call's quantized activations, one buffer per kind. Calls take one from
// actPool and return it, so concurrent products on one Matrix never share a buffer and steady
// state allocates nothing.
type actScratch struct {
	buf [2][]byte
	h   []uint16 // split bf16 activations (impl.splitBF16)
}

var actPool = sync.Pool{New: func() any { return new(actScratch) }}

// quantized returns x (rows x k) quantized as kind by path p in s, sized for the call.
func (s *actScratch) quantized(p *impl, kind actKind, x []float32, rows, k int) []byte {
	block := 32
	if kind == act256 {
		block = 256
	}
	n := rows * k / block * kind.blockBytes()
	if cap(s.buf[kind]) < n {
		s.buf[kind] = make([]byte, n)
	}
	b := s.buf[kind][:n]
	p.quantActs(kind, b, x[:rows*k])
	return b
}

// splitBF16 returns x (rows x k) split into bf16 planes by path p in s, sized for the call
// (amxPlanes planes of rows x amxRowLen(k)).
func (s *actScratch) splitBF16(p *impl, x []float32, rows, k int) []uint16 {
	n := amxPlanes * rows * amxRowLen(k)
	if cap(s.h) < n {
		s.h = make([]uint16, n)
	}
	h := s.h[:n]
	p.splitBF16(h, x[:rows*k], rows, k)
	return h
}
