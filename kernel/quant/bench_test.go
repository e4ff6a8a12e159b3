package quant

import (
	"math/rand/v2"
	"testing"
)

// The reference (de)quantizers are not hot paths (kernels read blocks in place), but a
// converter quantizes every weight once and a loader may dequantize small tensors:
//
//	go test ./kernel/quant -run XXX -bench .
func BenchmarkDequantize(b *testing.B) {
	x := testData(rand.New(rand.NewPCG(1, 1)), 1<<16)
	for _, typ := range []Type{BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		blk, err := Quantize(typ, x)
		if err != nil {
			b.Fatal(err)
		}
		y := make([]float32, len(x))
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(blk)))
			for b.Loop() {
				Dequantize(typ, blk, y)
			}
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	x := testData(rand.New(rand.NewPCG(1, 1)), 1<<16)
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				Quantize(typ, x)
			}
		})
	}
}
