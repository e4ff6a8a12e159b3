// Package quant owns the ggml tensor element types: their numbering (the numbers GGUF files
// store), their block layouts and byte sizes, and a portable Go reference for turning blocks into
// float32 (dequantization) and float32 into blocks (quantization) for the types dflash runs:
// F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K.
//
// It is the one place that knows how a block's bytes are laid out, so the quantized kernels in
// package kernel, the GGUF reader and writer and the converter agree by construction. It must
// never depend on a file format, a model or a CPU feature: it is a leaf that the kernels import,
// and its dequantization is the reference every kernel path is checked against.
//
// The layouts are ggml's, byte for byte (little-endian, no padding): a file written by llama.cpp
// dequantizes here to the values llama.cpp's reference dequantization gives. Quantization is a
// plain round-to-nearest with one scale search per block; it is within each type's error bound
// (documented on the Quantize functions) but need not reproduce llama.cpp's bits.
package quant

import (
	"errors"
	"fmt"
)

// Type is a ggml element type, numbered as ggml's enum ggml_type, which is what a GGUF tensor
// info stores.
type Type uint32

// The ggml types. Numbers 4, 5 and 31..33, 36..38 were removed from ggml and are unknown here.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// QK is the number of elements in a K-quant super-block (ggml's QK_K).
const QK = 256

// Sentinel errors, wrapped with the type's name or the offending size.
var (
	ErrUnknownType     = errors.New("unknown ggml type")
	ErrUnsupportedType = errors.New("tensor type not supported by dflash")
	ErrBlockSize       = errors.New("not a whole number of blocks")
	ErrRange           = errors.New("value cannot be quantized")
)

// layout is what a reader needs to size a tensor of a type: the elements per block and the
// bytes per block. Types dflash cannot compute with are listed too, so that a file holding them
// parses and the refusal names the type instead of calling the file corrupt.
type layout struct {
	name      string
	block     int
	bytes     int
	supported bool
}

// layouts holds ggml's block sizes; the byte counts are the sizes of ggml's block structs
// (ggml-common.h), e.g. Q4_K = 2 f16 scales + 12 packed scale bytes + 128 nibble bytes.
var layouts = map[Type]layout{
	F32:     {"F32", 1, 4, true},
	F16:     {"F16", 1, 2, true},
	Q4_0:    {"Q4_0", 32, 18, true},
	Q4_1:    {"Q4_1", 32, 20, false},
	Q5_0:    {"Q5_0", 32, 22, false},
	Q5_1:    {"Q5_1", 32, 24, false},
	Q8_0:    {"Q8_0", 32, 34, true},
	Q8_1:    {"Q8_1", 32, 36, false},
	Q2_K:    {"Q2_K", QK, 84, false},
	Q3_K:    {"Q3_K", QK, 110, false},
	Q4_K:    {"Q4_K", QK, 144, true},
	Q5_K:    {"Q5_K", QK, 176, true},
	Q6_K:    {"Q6_K", QK, 210, true},
	Q8_K:    {"Q8_K", QK, 292, false},
	IQ2_XXS: {"IQ2_XXS", QK, 66, false},
	IQ2_XS:  {"IQ2_XS", QK, 74, false},
	IQ3_XXS: {"IQ3_XXS", QK, 98, false},
	IQ1_S:   {"IQ1_S", QK, 50, false},
	IQ4_NL:  {"IQ4_NL", 32, 18, false},
	IQ3_S:   {"IQ3_S", QK, 110, false},
	IQ2_S:   {"IQ2_S", QK, 82, false},
	IQ4_XS:  {"IQ4_XS", QK, 136, false},
	I8:      {"I8", 1, 1, false},
	I16:     {"I16", 1, 2, false},
	I32:     {"I32", 1, 4, false},
	I64:     {"I64", 1, 8, false},
	F64:     {"F64", 1, 8, false},
	IQ1_M:   {"IQ1_M", QK, 56, false},
	BF16:    {"BF16", 1, 2, true},
	TQ1_0:   {"TQ1_0", QK, 54, false},
	TQ2_0:   {"TQ2_0", QK, 66, false},
	MXFP4:   {"MXFP4", 32, 17, false},
}

// String is ggml's name for the type in upper case (GGML_TYPE_Q4_K -> "Q4_K"), or "type(N)".
func (t Type) String() string {
	if l, ok := layouts[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether t is a ggml type this package can size.
func (t Type) Known() bool { _, ok := layouts[t]; return ok }

// Supported reports whether dflash can dequantize (and so compute with) t.
func (t Type) Supported() bool { return layouts[t].supported }

// BlockSize is the number of elements one block of t holds (1 for plain types), 0 if unknown.
func (t Type) BlockSize() int { return layouts[t].block }

// BlockBytes is the size in bytes of one block of t, 0 if unknown.
func (t Type) BlockBytes() int { return layouts[t].bytes }

// RowBytes is the size in bytes of n consecutive elements of t. n must be a whole number of
// blocks: ggml never splits a block across rows, so a row length that is not a multiple of the
// block size means the tensor cannot be of this type.
func (t Type) RowBytes(n int) (int, error) {
	l, ok := layouts[t]
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrUnknownType, uint32(t))
	}
	if n < 0 || n%l.block != 0 {
		return 0, fmt.Errorf("%s: %d elements: %w of %d", l.name, n, ErrBlockSize, l.block)
	}
	return n / l.block * l.bytes, nil
}

// Check refuses a type dflash cannot compute with, naming it.
func (t Type) Check() error {
	l, ok := layouts[t]
	if !ok {
		return fmt.Errorf("%w %d", ErrUnknownType, uint32(t))
	}
	if !l.supported {
		return fmt.Errorf("%w: %s", ErrUnsupportedType, l.name)
	}
	return nil
}

// sizes checks that src holds exactly the blocks for n elements of t.
func sizes(t Type, srcBytes, n int) error {
	if err := t.Check(); err != nil {
		return err
	}
	want, err := t.RowBytes(n)
	if err != nil {
		return err
	}
	if srcBytes != want {
		return fmt.Errorf("%s: %d elements need %d bytes, have %d", t, n, want, srcBytes)
	}
	return nil
}

// Dequantize expands the blocks in src into dst; len(dst) elements are produced, which must be
// a whole number of t's blocks occupying exactly len(src) bytes.
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := sizes(t, len(src), len(dst)); err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	switch t {
	case F32:
		dequantizeF32(src, dst)
	case F16:
		dequantizeF16(src, dst)
	case BF16:
		dequantizeBF16(src, dst)
	case Q8_0:
		dequantizeQ8_0(src, dst)
	case Q4_0:
		dequantizeQ4_0(src, dst)
	case Q4_K:
		dequantizeQ4_K(src, dst)
	case Q5_K:
		dequantizeQ5_K(src, dst)
	case Q6_K:
		dequantizeQ6_K(src, dst)
	default:
		panic("quant: supported type without a dequantizer: " + t.String())
	}
	return nil
}

// Quantize encodes src as blocks of t. len(src) must be a whole number of blocks. Values that
// are not finite, or whose block scale would overflow the f16 the block stores it in, are
// refused with the element's index rather than encoded as infinities.
func Quantize(t Type, src []float32) ([]byte, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	n, err := t.RowBytes(len(src))
	if err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	dst := make([]byte, n)
	switch t {
	case F32:
		quantizeF32(src, dst)
		return dst, nil
	case F16:
		err = quantizeF16(src, dst)
	case BF16:
		err = quantizeBF16(src, dst)
	case Q8_0:
		err = quantizeQ8_0(src, dst)
	case Q4_0:
		err = quantizeQ4_0(src, dst)
	case Q4_K:
		err = quantizeQ4_K(src, dst)
	case Q5_K:
		err = quantizeQ5_K(src, dst)
	case Q6_K:
		err = quantizeQ6_K(src, dst)
	default:
		panic("quant: supported type without a quantizer: " + t.String())
	}
	if err != nil {
		return nil, fmt.Errorf("quantize %s: %w", t, err)
	}
	return dst, nil
}
