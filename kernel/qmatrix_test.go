package kernel

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/dflash/dflash/kernel/quant"
)

var quantTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// randBlocks returns n rows of k inputs of type t. With raw, every byte is random except the
// f16 scales, which are finite values of moderate size (so that every quant, scale, min and
// fifth/high bit pattern occurs); otherwise the blocks quantize Gaussian weights.
func randBlocks(t quant.Type, n, k int, seed uint64, raw bool) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	if !raw {
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		b, err := quant.Quantize(t, w)
		if err != nil {
			panic(err)
		}
		return b
	}
	rb, _ := t.RowBytes(k)
	b := make([]byte, n*rb)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	scale := func(p []byte) { // a finite f16 in about [2^-9, 2^-5]
		binary.LittleEndian.PutUint16(p, quant.F32ToF16(float32(rng.Float64()+0.05)/32))
	}
	bb := t.BlockBytes()
	for off := 0; off < len(b); off += bb {
		blk := b[off : off+bb]
		switch t {
		case quant.Q8_0, quant.Q4_0:
			scale(blk)
		case quant.Q4_K, quant.Q5_K:
			scale(blk)
			scale(blk[2:])
		case quant.Q6_K:
			scale(blk[208:])
		}
	}
	return b
}

func TestNewQuantErrors(t *testing.T) {
	for _, tc := range []struct {
		t    quant.Type
		n, k int
		len  int
		want string
	}{
		{quant.F16, 2, 32, 128, "F16"},
		{quant.Q4_1, 2, 32, 40, "Q4_1"},
		{quant.Q8_0, 2, 48, 0, "Q8_0"},
		{quant.Q4_K, 2, 128, 0, "not a whole number of blocks"},
		{quant.Q8_0, 2, 32, 67, "needs 68 bytes, have 67"},
	} {
		_, err := NewQuant(tc.t, make([]byte, tc.len), tc.n, tc.k)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewQuant(%v, %d bytes, %d, %d): err %v, want one naming %q", tc.t, tc.len, tc.n, tc.k, err, tc.want)
		}
	}
}

// TestQuantRepack: the panel layout holds exactly the file's blocks: every row reads back as
// its original bytes and dequantizes bitwise as package quant does, for partial panels too.
func TestQuantRepack(t *testing.T) {
	for _, qt := range quantTypes {
		for _, raw := range []bool{true, false} {
			n, k := 37, 512
			b := randBlocks(qt, n, k, 3, raw)
			m, err := NewQuant(qt, b, n, k)
			if err != nil {
				t.Fatal(err)
			}
			if m.DType.String() != qt.String() || !m.DType.Quantized() {
				t.Errorf("%v: dtype %v", qt, m.DType)
			}
			rb, _ := qt.RowBytes(k)
			nat := make([]byte, rb)
			got, want := make([]float32, k), make([]float32, k)
			for j := 0; j < n; j++ {
				m.nativeRow(nat, j)
				if !bytes.Equal(nat, b[j*rb:(j+1)*rb]) {
					t.Fatalf("%v raw=%v row %d: repacked blocks read back differently", qt, raw, j)
				}
				m.Row(got, j)
				if err := quant.Dequantize(qt, b[j*rb:(j+1)*rb], want); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v row %d input %d: Row %v, Dequantize %v", qt, j, i, got[i], want[i])
					}
				}
			}
			if a := testing.AllocsPerRun(10, func() { m.Row(got, 3) }); a != 0 {
				t.Errorf("%v: Row allocates %v times", qt, a)
			}
			if m.Bytes() < int64(n*rb) || m.Bytes() > int64(n*rb)*11/10+int64(Panel*rb) {
				t.Errorf("%v: %d bytes for %d of blocks", qt, m.Bytes(), n*rb)
			}
		}
	}
}

// dequantAct returns the values the quantized activations stand for (dx*xq).
func dequantAct(kind actKind, a []byte, n int) []float64 {
	out := make([]float64, n)
	bs, bb := 32, act32Bytes
	if kind == act256 {
		bs, bb = 256, act256Bytes
	}
	for i := range out {
		blk := a[i/bs*bb:]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk[bs:]))
		out[i] = float64(d) * float64(int8(blk[i%bs]))
	}
	return out
}

// TestQuantMatMulReference checks the portable path against float64 products: against the
// dequantized weights times the dequantized activations to float rounding (the integer
// arithmetic is exact), and against the unquantized activations within the error the
// activation quantization admits, sum |w_i| |x_i - xhat_i|.
func TestQuantMatMulReference(t *testing.T) {
	prev := Path()
	defer SetPath(prev)
	SetPath("go")
	for _, qt := range quantTypes {
		n, k, rows := 21, 768, 3
		b := randBlocks(qt, n, k, 5, false)
		m, err := NewQuant(qt, b, n, k)
		if err != nil {
			t.Fatal(err)
		}
		x := randVec(rows*k, 9)
		x[5] = 40 // an outlier sets a block's scale
		y := make([]float32, rows*n)
		m.MatMul(y, x, rows)
		kind := qinfos[m.DType].kind
		var s actScratch
		xhat := dequantAct(kind, s.quantized(portable, kind, x, rows, k), rows*k)
		w := make([]float32, k)
		for j := 0; j < n; j++ {
			m.Row(w, j)
			for r := 0; r < rows; r++ {
				var exact, quantized, mag, bound float64
				for i, wv := range w {
					xv, xq := float64(x[r*k+i]), xhat[r*k+i]
					exact += float64(wv) * xv
					quantized += float64(wv) * xq
					mag += math.Abs(float64(wv) * xq)
					bound += math.Abs(float64(wv)) * math.Abs(xv-xq)
				}
				got := float64(y[r*n+j])
				if d := math.Abs(got - quantized); d > 1e-5*mag+1e-6 {
					t.Errorf("%v row %d out %d: %v, dequantized product %v (|diff| %g > %g)", qt, r, j, got, quantized, d, 1e-5*mag)
				}
				if d := math.Abs(got - exact); d > bound*1.001+1e-5*mag+1e-6 {
					t.Errorf("%v row %d out %d: %v, exact %v: |diff| %g beyond the activation quantization's %g", qt, r, j, got, exact, d, bound)
				}
				if bound > 0.05*mag+0.5 {
					t.Errorf("%v: activation error bound %g implausibly large against %g", qt, bound, mag)
				}
			}
		}
	}
}

// TestQuantPathsBitwise: on every path, the portable one included, for 1..32 rows, each row's
// result is bitwise that of the oracle (qref_test.go) for the row, split across threads or not.
func TestQuantPathsBitwise(t *testing.T) {
	for _, qt := range quantTypes {
		n, k := 5*Panel+5, 512 // one 4-panel pass of the one-row kernels, one single, one partial
		m, err := NewQuant(qt, randBlocks(qt, n, k, 11, true), n, k)
		if err != nil {
			t.Fatal(err)
		}
		const maxRows = 32
		x := randVec(maxRows*k, 13)
		for i := 0; i < k; i++ {
			x[3*k+i] = 0 // a zero row: zero scales
		}
		want := refProduct(m, x, maxRows)
		t.Run(qt.String(), func(t *testing.T) {
			forEachPath(t, func(t *testing.T) {
				for _, split := range []bool{false, true} {
					withSplit(split, func() {
						for rows := 1; rows <= maxRows; rows++ {
							if split && rows%5 != 1 && rows != maxRows {
								continue // the split's bits are checked on a spread of counts
							}
							// Rows start at an offset so each count sees other neighbours.
							off := (rows * 7) % (maxRows - rows + 1)
							y := make([]float32, rows*n)
							m.MatMul(y, x[off*k:(off+rows)*k], rows)
							for i, v := range y {
								if w := want[off*n+i]; math.Float32bits(v) != math.Float32bits(w) {
									t.Fatalf("%v rows=%d split=%v: row %d out %d = %v, oracle %v", qt, rows, split, off+i/n, i%n, v, w)
								}
							}
						}
					})
				}
			})
		})
	}
}

// TestQuantMatMulEach: a mix of quantized and bf16 matrices gives each product's MatMul bits.
func TestQuantMatMulEach(t *testing.T) {
	const k, rows = 512, 5
	var ps []Product
	var want [][]float32
	x := randVec(rows*k, 17)
	for i, qt := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0} {
		n := 40 + 8*i
		m, err := NewQuant(qt, randBlocks(qt, n, k, uint64(20+i), false), n, k)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, Product{M: m, Y: make([]float32, rows*n)})
	}
	bm, _ := testMatrix(BF16, 24, k, 4)
	ps = append(ps, Product{M: bm, Y: make([]float32, rows*24)})
	forEachPath(t, func(t *testing.T) {
		want = want[:0]
		for _, p := range ps {
			y := make([]float32, len(p.Y))
			p.M.MatMul(y, x, rows)
			want = append(want, y)
		}
		for _, split := range []bool{false, true} {
			withSplit(split, func() {
				if err := MatMulEach(x, rows, ps...); err != nil {
					t.Fatal(err)
				}
				for i, p := range ps {
					for e, v := range p.Y {
						if math.Float32bits(v) != math.Float32bits(want[i][e]) {
							t.Fatalf("split=%v product %d (%v) element %d: %v, MatMul %v", split, i, p.M.DType, e, v, want[i][e])
						}
					}
				}
			})
		}
	})
}

// TestQuantConcurrent: products on one matrix from several goroutines (each with its own
// activation scratch) give the single-goroutine bits, and steady state allocates nothing.
func TestQuantConcurrent(t *testing.T) {
	const n, k, rows = 48, 512, 4
	m, err := NewQuant(quant.Q4_K, randBlocks(quant.Q4_K, n, k, 23, false), n, k)
	if err != nil {
		t.Fatal(err)
	}
	forEachPath(t, func(t *testing.T) {
		xs := make([][]float32, 4)
		want := make([][]float32, 4)
		for g := range xs {
			xs[g] = randVec(rows*k, uint64(30+g))
			want[g] = make([]float32, rows*n)
			m.MatMul(want[g], xs[g], rows)
		}
		var wg sync.WaitGroup
		errs := make(chan string, len(xs))
		for g := range xs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				y := make([]float32, rows*n)
				for it := 0; it < 5; it++ {
					m.MatMul(y, xs[g], rows)
					for i := range y {
						if math.Float32bits(y[i]) != math.Float32bits(want[g][i]) {
							errs <- "concurrent product differs"
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		y := make([]float32, rows*n)
		if a := testing.AllocsPerRun(50, func() { m.MatMul(y, xs[0], rows) }); a != 0 {
			t.Errorf("%v allocations per quantized MatMul", a)
		}
	})
}

// TestQuantActsPaths: every path quantizes activations to the bytes of the Go quantizer, over
// ordinary values, ties of the rounding, tiny blocks (f16 subnormal scales), huge ones (an f16
// scale that overflows), zero blocks and blocks holding NaN or Inf.
func TestQuantActsPaths(t *testing.T) {
	const k = 256
	var blocks [][]float32
	rng := rand.New(rand.NewPCG(51, 3))
	for _, scale := range []float64{1, 1e-6, 3e-3, 1e-30, 1e30, 3e38} {
		b := make([]float32, k)
		for i := range b {
			b[i] = float32(rng.NormFloat64() * scale)
		}
		blocks = append(blocks, b)
	}
	ties := make([]float32, k) // amax 127: scale 1, so the halves are exact ties
	for i := range ties {
		ties[i] = float32(i%255-127) + 0.5*float32(i%2)
	}
	ties[0] = 127
	blocks = append(blocks, ties, make([]float32, k))
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		b := make([]float32, k)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		b[37] = bad
		blocks = append(blocks, b)
	}
	var x []float32
	for _, b := range blocks {
		x = append(x, b...)
	}
	rows := len(blocks)
	forEachPath(t, func(t *testing.T) {
		for _, kind := range []actKind{act32, act256} {
			var want, got actScratch
			w := want.quantized(portable, kind, x, rows, k)
			g := got.quantized(active, kind, x, rows, k)
			bb := kind.blockBytes()
			for i := 0; i < len(w); i += bb {
				if !bytes.Equal(w[i:i+bb], g[i:i+bb]) {
					t.Fatalf("kind %d block %d: %x, Go quantizer %x", kind, i/bb, g[i:i+bb], w[i:i+bb])
				}
			}
		}
	})
}
