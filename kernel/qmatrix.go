package kernel

import (
	"encoding/binary"
	"fmt"

	"github.com/dflash/dflash/kernel/quant"
)

// Quantized matrices keep GGUF blocks quantized in memory. NewQuant repacks them once into
// panels of Panel output rows, like the float layouts: for each panel, its rows' blocks b = 0,
// 1, ... follow one another as "panel blocks" of qBlockBytes bytes holding the 16 rows' block b
// interleaved so that a 32-bit lane l of a 64-byte vector holds 4 consecutive quants of row l.
// One integer dot-product instruction (vpdpbusd: 4 u8 x s8 products into each 32-bit lane)
// then computes 16 output rows' partial sums against one broadcast group of 4 activation bytes,
// with no horizontal reduction, and a one-row product streams each panel front to back.
//
// The repack rather than a zero-copy view of the (possibly memory-mapped) file: ggml's blocks
// put one row's quants side by side, so a kernel reading them in place must reduce every block
// horizontally and gathers scales from 16 separate rows per panel; repacked, the kernels are the
// panel kernels the float paths already use. The size stays that of the file's blocks (Q8_0,
// Q4_0, Q6_K exactly; Q4_K +2.8% and Q5_K +2.3% for scales unpacked from 6 to 8 bits), the
// source is not retained and its pages can be dropped, and a quant's value is unchanged: the
// repack is a permutation of bits plus Q8_0's sign flip, undone exactly by Row.
//
// Panel-block layouts (lane l = row % Panel; a "vector" is 64 bytes, lane l at bytes 4l..4l+3;
// a group g is 4 consecutive inputs 4g..4g+3 of the block, byte t of a lane being input 4g+t):
//
//	Q8_0 (32 inputs, 544 bytes): [0,32) d f16 per lane; [32,544) 8 vectors, vector g holds group g
//	     as u8 = int8 quant + 128 (Q8_0 quants are -127..127).
//	Q4_0 (32 inputs, 288 bytes): [0,32) d f16; [32,288) 4 vectors, vector v holds group 2v in the
//	     low nibbles and group 2v+1 in the high nibbles (nibble n stands for n-8).
//	Q4_K (256 inputs, 2368 bytes): [0,32) d f16; [32,64) dmin f16; [64,192) scale of sub-block j
//	     at 64+16j+l (u8, 0..63); [192,320) min of sub-block j at 192+32(j/2)+2l+j%2 (u8 pairs,
//	     so that zero-extending 32 bytes to words gives one pair of int16 mins per lane);
//	     [320,2368) sub-block j's 32 inputs as 4 vectors at 320+256j, nibbles as Q4_0's.
//	Q5_K (256 inputs, 2880 bytes): Q4_K's layout holding the low 4 bits, then [2368,2880) one
//	     vector per sub-block j at 2368+64j: bit g of lane l byte t is the fifth bit of group g.
//	Q6_K (256 inputs, 3360 bytes): [0,32) d f16; [32,288) int8 scale of sub-block s (16 inputs)
//	     at 32+16s+l; [288,2336) low nibbles, sub-block s as 2 vectors at 288+128s laid out as
//	     Q4_0's; [2336,3360) one vector per sub-block at 2336+64s: bits 2c,2c+1 of lane l byte t
//	     are the top two bits of group c. The quant q is 0..63 and stands for q-32.
//
// A partial last panel has zero blocks in its padding rows (all scales 0), computed and dropped.

// The quantized element types of a Matrix, after F32 and BF16.
const (
	Q8_0 DType = iota + 16
	Q4_0
	Q4_K
	Q5_K
	Q6_K
)

// qinfo describes one quantized DType.
type qinfo struct {
	t      quant.Type
	block  int // inputs per block
	pbytes int // bytes of one panel block (Panel rows of one block)
	// kind is the activation quantization the type's dot product takes.
	kind actKind
}

var qinfos = map[DType]qinfo{
	Q8_0: {quant.Q8_0, 32, 544, act32},
	Q4_0: {quant.Q4_0, 32, 288, act32},
	Q4_K: {quant.Q4_K, quant.QK, 2368, act256},
	Q5_K: {quant.Q5_K, quant.QK, 2880, act256},
	Q6_K: {quant.Q6_K, quant.QK, 3360, act256},
}

// quantDType maps a ggml type to the DType that computes with it.
var quantDType = map[quant.Type]DType{quant.Q8_0: Q8_0, quant.Q4_0: Q4_0, quant.Q4_K: Q4_K, quant.Q5_K: Q5_K, quant.Q6_K: Q6_K}

// Quantized reports whether d is one of the block-quantized types.
func (d DType) Quantized() bool { _, ok := qinfos[d]; return ok }

// NewQuant builds an n x k matrix from blocks, n rows of ggml blocks of type t in the file's
// order (row-major, each row k/blocksize blocks). blocks is only read, never written or
// retained. Types: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; another type, a k that is not a whole number
// of blocks or a blocks length that does not match are errors naming the cause.
func NewQuant(t quant.Type, blocks []byte, n, k int) (*Matrix, error) {
	dt, ok := quantDType[t]
	if !ok {
		return nil, fmt.Errorf("kernel.NewQuant: type %s has no quantized kernel (have Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)", t)
	}
	if n < 0 || k < 0 {
		return nil, fmt.Errorf("kernel.NewQuant: %s: negative shape %dx%d", t, n, k)
	}
	rowBytes, err := t.RowBytes(k)
	if err != nil {
		return nil, fmt.Errorf("kernel.NewQuant: %s matrix %dx%d: %w", t, n, k, err)
	}
	if len(blocks) != n*rowBytes {
		return nil, fmt.Errorf("kernel.NewQuant: %s matrix %dx%d needs %d bytes, have %d", t, n, k, n*rowBytes, len(blocks))
	}
	m := &Matrix{N: n, K: k, DType: dt}
	qi := qinfos[dt]
	nb := k / qi.block
	m.q = allocWeights[byte](m, m.panels()*nb*qi.pbytes)
	bb := t.BlockBytes()
	for j := 0; j < n; j++ {
		row := blocks[j*rowBytes : (j+1)*rowBytes]
		for b := 0; b < nb; b++ {
			packLane(dt, row[b*bb:(b+1)*bb], m.panelBlock(j/Panel, b), j%Panel)
		}
	}
	if n%Panel != 0 {
		// Padding lanes: Q8_0's zero quant is stored as 128; everything else is zero already.
		if dt == Q8_0 {
			for b := 0; b < nb; b++ {
				pb := m.panelBlock(m.panels()-1, b)
				for l := n % Panel; l < Panel; l++ {
					for g := 0; g < 8; g++ {
						copy(pb[32+64*g+4*l:32+64*g+4*l+4], []byte{128, 128, 128, 128})
					}
				}
			}
		}
	}
	return m, nil
}

// qblocks is the number of blocks per row of a quantized matrix.
func (m *Matrix) qblocks() int { return m.K / qinfos[m.DType].block }

// panelBlock is the panel block b of panel p.
func (m *Matrix) panelBlock(p, b int) []byte {
	pb := qinfos[m.DType].pbytes
	off := (p*m.qblocks() + b) * pb
	return m.q[off : off+pb]
}

// nativeRow writes row j of a quantized matrix as ggml blocks into dst (K/block*blockBytes).
func (m *Matrix) nativeRow(dst []byte, j int) {
	qi := qinfos[m.DType]
	bb := qi.t.BlockBytes()
	for b := 0; b < m.qblocks(); b++ {
		unpackLane(m.DType, m.panelBlock(j/Panel, b), j%Panel, dst[b*bb:(b+1)*bb])
	}
}

// nativeRowBytes is the size of one row as ggml blocks.
func (m *Matrix) nativeRowBytes() int {
	return m.qblocks() * qinfos[m.DType].t.BlockBytes()
}

// lanePos is the byte of lane l holding input i (0..31) in a run of vectors where vector v holds
// group 2v in its low nibbles and 2v+1 in its high nibbles; hi tells which nibble.
func lanePos(l, i int) (pos int, hi bool) {
	g := i / 4
	return 64*(g/2) + 4*l + i%4, g%2 == 1
}

// setNib ORs nibble v into byte b (low or high).
func setNib(b *byte, v byte, hi bool) {
	if hi {
		*b |= v << 4
	} else {
		*b |= v & 0xf
	}
}

func getNib(b byte, hi bool) byte {
	if hi {
		return b >> 4
	}
	return b & 0xf
}

// Native element accessors: the quant of element i of one ggml block, as the block layouts in
// package quant define them.

func q4kNative(blk []byte, i int) byte { // Q4_K and the low bits of Q5_K (qs at off)
	j, r := i/32, i%32
	return getNib(blk[32*(j/2)+r], j%2 == 1)
}

func q6Native(blk []byte, i int) (q byte, ql *byte, qlHi bool, qh *byte, shift uint) {
	h, e := i/128, i%128
	l, quarter := e%32, e/32
	ql = &blk[64*h+l+32*(quarter%2)]
	qh = &blk[128+32*h+l]
	shift = uint(2 * quarter)
	qlHi = quarter >= 2
	return getNib(*ql, qlHi) | (*qh>>shift&3)<<4, ql, qlHi, qh, shift
}

// packLane writes one native block into lane l of panel block pb (which starts zeroed).
func packLane(dt DType, nat, pb []byte, l int) {
	switch dt {
	case Q8_0:
		copy(pb[2*l:2*l+2], nat[0:2])
		for i := 0; i < 32; i++ {
			pb[32+64*(i/4)+4*l+i%4] = nat[2+i] ^ 0x80
		}
	case Q4_0:
		copy(pb[2*l:2*l+2], nat[0:2])
		for i := 0; i < 32; i++ {
			pos, hi := lanePos(l, i)
			setNib(&pb[32+pos], getNib(nat[2+i%16], i >= 16), hi)
		}
	case Q4_K, Q5_K:
		copy(pb[2*l:2*l+2], nat[0:2])
		copy(pb[32+2*l:32+2*l+2], nat[2:4])
		for j := 0; j < 8; j++ {
			sc, mn := quant.ScaleMinK(nat[4:16], j)
			pb[64+16*j+l] = sc
			pb[192+32*(j/2)+2*l+j%2] = mn
		}
		qs := nat[16:]
		if dt == Q5_K {
			qs = nat[48:]
		}
		for i := 0; i < quant.QK; i++ {
			j, r := i/32, i%32
			pos, hi := lanePos(l, r)
			setNib(&pb[320+256*j+pos], q4kNative(qs, i), hi)
			if dt == Q5_K && nat[16+r]>>j&1 != 0 {
				pb[2368+64*j+4*l+r%4] |= 1 << (r / 4)
			}
		}
	case Q6_K:
		copy(pb[2*l:2*l+2], nat[208:210])
		for s := 0; s < 16; s++ {
			pb[32+16*s+l] = nat[192+s]
		}
		for i := 0; i < quant.QK; i++ {
			q, _, _, _, _ := q6Native(nat, i)
			s, r := i/16, i%16
			pos, hi := lanePos(l, r)
			setNib(&pb[288+128*s+pos], q&0xf, hi)
			pb[2336+64*s+4*l+r%4] |= (q >> 4) << (2 * (r / 4))
		}
	}
}

// unpackLane is packLane's inverse: it writes lane l of pb as one native block into nat.
func unpackLane(dt DType, pb []byte, l int, nat []byte) {
	clear(nat)
	switch dt {
	case Q8_0:
		copy(nat[0:2], pb[2*l:2*l+2])
		for i := 0; i < 32; i++ {
			nat[2+i] = pb[32+64*(i/4)+4*l+i%4] ^ 0x80
		}
	case Q4_0:
		copy(nat[0:2], pb[2*l:2*l+2])
		for i := 0; i < 32; i++ {
			pos, hi := lanePos(l, i)
			setNib(&nat[2+i%16], getNib(pb[32+pos], hi), i >= 16)
		}
	case Q4_K, Q5_K:
		copy(nat[0:2], pb[2*l:2*l+2])
		copy(nat[2:4], pb[32+2*l:32+2*l+2])
		var sc, mn [8]uint8
		for j := 0; j < 8; j++ {
			sc[j], mn[j] = pb[64+16*j+l], pb[192+32*(j/2)+2*l+j%2]
		}
		packScaleMinK(&sc, &mn, nat[4:16])
		qs := nat[16:]
		if dt == Q5_K {
			qs = nat[48:]
		}
		for i := 0; i < quant.QK; i++ {
			j, r := i/32, i%32
			pos, hi := lanePos(l, r)
			setNib(&qs[32*(j/2)+r], getNib(pb[320+256*j+pos], hi), j%2 == 1)
			if dt == Q5_K && pb[2368+64*j+4*l+r%4]>>(r/4)&1 != 0 {
				nat[16+r] |= 1 << j
			}
		}
	case Q6_K:
		copy(nat[208:210], pb[2*l:2*l+2])
		for s := 0; s < 16; s++ {
			nat[192+s] = pb[32+16*s+l]
		}
		for i := 0; i < quant.QK; i++ {
			s, r := i/16, i%16
			pos, hi := lanePos(l, r)
			q := getNib(pb[288+128*s+pos], hi) | (pb[2336+64*s+4*l+r%4]>>(2*(r/4))&3)<<4
			_, ql, qlHi, qh, shift := q6Native(nat, i)
			setNib(ql, q&0xf, qlHi)
			*qh |= (q >> 4) << shift
		}
	}
}

// packScaleMinK packs eight 6-bit scales and mins as Q4_K and Q5_K store them (the inverse of
// quant.ScaleMinK).
func packScaleMinK(sc, m *[8]uint8, scales []byte) {
	for j := 0; j < 4; j++ {
		scales[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		scales[j+4] = m[j]&63 | (m[j+4]>>4)<<6
		scales[j+8] = sc[j+4]&0xf | (m[j+4]&0xf)<<4
	}
}

// f16 reads the little-endian f16 at b as f32 (exactly).
func f16(b []byte) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b)) }
