package kernel

import (
	"encoding/binary"
	"math"
)

// The portable quantized path works on the panel blocks as the assembly does, 16 output rows at
// a time: ggml's vec_dot for the type, exact integer sums per block (per super-block for the
// K-quants) started from the activation block's bias sums, then a fixed float sequence per block,
// each step rounded to f32 (explicit conversions keep the compiler from fusing a multiply and an
// add):
//
//	Q8_0, Q4_0:  acc = acc + f32(sumi) * (dw*dx)
//	Q4_K, Q5_K:  acc = acc + (f32(sumi)*(d*dx) - f32(summ)*(dmin*dx))
//	             sumi = sum_j sc_j * sum(q*xq over sub-block j), summ = sum_j m_j * sum(xq over j)
//	Q6_K:        acc = acc + f32(sumi) * (d*dx), sumi = sum_s sc_s * sum((q-32)*xq over s)
//
// from acc = 0, blocks in input order. The assembly paths compute the same integers (in another
// order, which integers do not notice) and the same float steps, so every path is bitwise equal
// to this one. Integer bounds (|xq| <= 127): Q8_0 |sumi| <= 32*127*127; Q4_K sumi <= 256*15*127*63
// and Q5_K's <= 256*31*127*63 (< 2^31); Q6_K |sumi| <= 256*32*127*127: all fit in int32.

//
// qref_test.go holds an independent oracle (vec_dot on the blocks read back in ggml's layout).

func le32(b []byte) int32    { return int32(binary.LittleEndian.Uint32(b)) }
func le32f(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// dot4 is the dot product of four weight bytes (quants, unsigned) with four activation quants.
func dot4(w, x []byte) int32 {
	return int32(w[0])*int32(int8(x[0])) + int32(w[1])*int32(int8(x[1])) +
		int32(w[2])*int32(int8(x[2])) + int32(w[3])*int32(int8(x[3]))
}

// dot4nib is dot4 of the low (shift 0) or high (shift 4) nibbles of w, plus hi (the bits above
// the nibble, already in place) per byte.
func dot4nib(w []byte, shift uint, hi [4]byte, x []byte) int32 {
	var s int32
	for t := 0; t < 4; t++ {
		s += int32(w[t]>>shift&0xf|hi[t]) * int32(int8(x[t]))
	}
	return s
}

func qpanelsGo(m *Matrix, y []float32, a []byte, rows, p0, p1 int) {
	n, nb := m.N, m.qblocks()
	lda := nb * qinfos[m.DType].kind.blockBytes()
	var acc [Panel]float32
	for pj := p0; pj < p1; pj++ {
		lanes := min(Panel, n-pj*Panel)
		for r := 0; r < rows; r++ {
			ar := a[r*lda : (r+1)*lda]
			acc = [Panel]float32{}
			for b := 0; b < nb; b++ {
				pb := m.panelBlock(pj, b)
				switch m.DType {
				case Q8_0:
					blockQ8_0(&acc, pb, ar[b*act32Bytes:(b+1)*act32Bytes])
				case Q4_0:
					blockQ4_0(&acc, pb, ar[b*act32Bytes:(b+1)*act32Bytes])
				case Q4_K, Q5_K:
					blockQ45K(&acc, pb, ar[b*act256Bytes:(b+1)*act256Bytes], m.DType == Q5_K)
				case Q6_K:
					blockQ6_K(&acc, pb, ar[b*act256Bytes:(b+1)*act256Bytes])
				}
			}
			copy(y[r*n+pj*Panel:r*n+pj*Panel+lanes], acc[:lanes])
		}
	}
}

// scale32 is the float step of a 32-input block: acc += f32(s) * (d*dx).
func scale32(acc *[Panel]float32, s *[Panel]int32, pb, ab []byte) {
	dx := le32f(ab[32:])
	for l := range acc {
		t := float32(f16(pb[2*l:]) * dx)
		acc[l] = acc[l] + float32(float32(s[l])*t)
	}
}

func blockQ8_0(acc *[Panel]float32, pb, ab []byte) {
	var s [Panel]int32
	bias := le32(ab[36:])
	for l := range s {
		s[l] = bias
		for g := 0; g < 8; g++ {
			s[l] += dot4(pb[32+64*g+4*l:], ab[4*g:])
		}
	}
	scale32(acc, &s, pb, ab)
}

func blockQ4_0(acc *[Panel]float32, pb, ab []byte) {
	var s [Panel]int32
	bias := le32(ab[40:])
	for l := range s {
		s[l] = bias
		for v := 0; v < 4; v++ {
			w := pb[32+64*v+4*l:]
			s[l] += dot4nib(w, 0, [4]byte{}, ab[4*(2*v):]) + dot4nib(w, 4, [4]byte{}, ab[4*(2*v+1):])
		}
	}
	scale32(acc, &s, pb, ab)
}

func blockQ45K(acc *[Panel]float32, pb, ab []byte, five bool) {
	dx := le32f(ab[256:])
	for l := range acc {
		var sumi, summ int32
		for j := 0; j < 8; j++ {
			var t int32
			for v := 0; v < 4; v++ {
				w := pb[320+256*j+64*v+4*l:]
				var h0, h1 [4]byte
				if five {
					hb := pb[2368+64*j+4*l:]
					for tt := 0; tt < 4; tt++ {
						h0[tt] = hb[tt] >> (2 * v) & 1 << 4
						h1[tt] = hb[tt] >> (2*v + 1) & 1 << 4
					}
				}
				t += dot4nib(w, 0, h0, ab[32*j+4*(2*v):]) + dot4nib(w, 4, h1, ab[32*j+4*(2*v+1):])
			}
			sumi += int32(pb[64+16*j+l]) * t
			mn := int32(pb[192+32*(j/2)+2*l+j%2])
			summ += mn * int32(int16(binary.LittleEndian.Uint16(ab[264+2*j:])))
		}
		dd := float32(f16(pb[2*l:]) * dx)
		dm := float32(f16(pb[32+2*l:]) * dx)
		acc[l] = acc[l] + float32(float32(float32(sumi)*dd)-float32(float32(summ)*dm))
	}
}

func blockQ6_K(acc *[Panel]float32, pb, ab []byte) {
	dx := le32f(ab[256:])
	for l := range acc {
		var sumi int32
		for s := 0; s < 16; s++ {
			t := le32(ab[280+4*s:])
			hb := pb[2336+64*s+4*l:]
			for v := 0; v < 2; v++ {
				w := pb[288+128*s+64*v+4*l:]
				var h0, h1 [4]byte
				for tt := 0; tt < 4; tt++ {
					h0[tt] = hb[tt] >> (2 * (2 * v)) & 3 << 4
					h1[tt] = hb[tt] >> (2 * (2*v + 1)) & 3 << 4
				}
				t += dot4nib(w, 0, h0, ab[16*s+4*(2*v):]) + dot4nib(w, 4, h1, ab[16*s+4*(2*v+1):])
			}
			sumi += int32(int8(pb[32+16*s+l])) * t
		}
		dd := float32(f16(pb[2*l:]) * dx)
		acc[l] = acc[l] + float32(float32(sumi)*dd)
	}
}
