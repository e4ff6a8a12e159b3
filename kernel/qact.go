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
	// reciprocal of the unrounded d, as ggml's quantize_row_q8_0_ref. A block is act32Bytes:
	// [0,32) int8 quants, [32,36) d as f32, [36,40) int32 sum of the quants (for the weights'
	// offset: Q8_0 is stored +128, Q4_0 nibbles stand for n-8).
	act32 actKind = iota
	// act256 is Q8_K-style, the activations of the K-quants: per super-block of 256, d =
	// max|x|/127 as f32 and quants round(x*127/max|x|) in -127..127 (symmetric, where ggml's
	// Q8_K maps the extreme to -128: the kernels' bounds below assume |q| <= 127), plus block
	// sums. A block is act256Bytes: [0,256) int8 quants, [256,260) d f32, [264,280) eight int16
	// sums of 32 quants (Q4_K/Q5_K mins), [280,344) sixteen int32 sums of 16 quants times 32
	// (Q6_K's offset), the rest zero.
	act256
)

const (
	act32Bytes  = 40
	act256Bytes = 352
)

// actBlockBytes is the bytes of one quantized activation block of kind k.
func (k actKind) blockBytes() int {
	if k == act32 {
		return act32Bytes
	}
	return act256Bytes
}

// quantizeActs writes rows rows of x (K each) quantized as kind into dst (rows*K/block blocks).
func quantizeActs(kind actKind, dst []byte, x []float32, rows, k int) {
	if kind == act32 {
		for i := 0; i < rows*k/32; i++ {
			quantizeAct32(dst[i*act32Bytes:(i+1)*act32Bytes], x[32*i:32*i+32])
		}
		return
	}
	for i := 0; i < rows*k/256; i++ {
		quantizeAct256(dst[i*act256Bytes:(i+1)*act256Bytes], x[256*i:256*i+256])
	}
}

func absMaxF32(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// roundQ rounds v half away from zero (C's roundf) into -127..127; NaN gives 0.
func roundQ(v float32) int8 {
	r := math.Round(float64(v))
	if !(r > -127) {
		if r <= -127 {
			return -127
		}
		return 0
	}
	return int8(min(r, 127))
}

func quantizeAct32(dst []byte, x []float32) {
	d := absMaxF32(x) / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var sum int32
	for i, v := range x {
		q := roundQ(float32(v * id))
		dst[i] = byte(q)
		sum += int32(q)
	}
	binary.LittleEndian.PutUint32(dst[32:], math.Float32bits(f16Round(d)))
	binary.LittleEndian.PutUint32(dst[36:], uint32(sum))
}

// f16Round is f rounded to the nearest f16 value (as ggml stores a Q8_0 scale).
func f16Round(f float32) float32 { return quant.F16ToF32(quant.F32ToF16(f)) }

func quantizeAct256(dst []byte, x []float32) {
	clear(dst)
	amax := absMaxF32(x)
	if amax == 0 || amax != amax || math.IsInf(float64(amax), 0) {
		if amax != 0 {
			binary.LittleEndian.PutUint32(dst[256:], math.Float32bits(amax))
		}
		return
	}
	is := 127 / amax
	for i, v := range x {
		dst[i] = byte(roundQ(float32(v * is)))
	}
	binary.LittleEndian.PutUint32(dst[256:], math.Float32bits(1/is))
	for j := 0; j < 16; j++ {
		var s int32
		for _, q := range dst[16*j : 16*j+16] {
			s += int32(int8(q))
		}
		binary.LittleEndian.PutUint32(dst[280+4*j:], uint32(32*s))
	}
	for j := 0; j < 8; j++ {
		var s int32
		for _, q := range dst[32*j : 32*j+32] {
			s += int32(int8(q))
		}
		binary.LittleEndian.PutUint16(dst[264+2*j:], uint16(int16(s)))
	}
}

// actScratch holds one call's quantized activations, one buffer per kind. Calls take one from
// actPool and return it, so concurrent products on one Matrix never share a buffer and steady
// state allocates nothing.
type actScratch struct {
	buf [2][]byte
}

var actPool = sync.Pool{New: func() any { return new(actScratch) }}

// quantized returns x (rows x k) quantized as kind in s, sized for the call.
func (s *actScratch) quantized(kind actKind, x []float32, rows, k int) []byte {
	block := 32
	if kind == act256 {
		block = 256
	}
	n := rows * k / block * kind.blockBytes()
	if cap(s.buf[kind]) < n {
		s.buf[kind] = make([]byte, n)
	}
	b := s.buf[kind][:n]
	quantizeActs(kind, b, x, rows, k)
	return b
}
