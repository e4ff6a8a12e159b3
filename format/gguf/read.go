package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"

	"github.com/dflash/dflash/kernel/quant"
)

// decoder reads fields front to back; every read first checks that the file holds the bytes,
// so a truncated file is reported at the offset where it ends, with what was being read.
type decoder struct {
	buf []byte
	off int
}

func (d *decoder) fail(at int, format string, args ...any) error {
	return &FormatError{Offset: int64(at), Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) left() uint64 { return uint64(len(d.buf) - d.off) }

func (d *decoder) take(n uint64, what string) ([]byte, error) {
	if n > d.left() {
		return nil, d.fail(d.off, "truncated %s: need %d bytes, the file has %d left", what, n, d.left())
	}
	b := d.buf[d.off : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a length-prefixed string. A length past the end of the file is refused before the
// string is allocated, so a corrupt length cannot ask for more memory than the file has.
func (d *decoder) str(what string, maxLen uint64) (string, error) {
	at := d.off
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > d.left() {
		return "", d.fail(at, "%s length %d runs past the end of the file (%d bytes left)", what, n, d.left())
	}
	if maxLen > 0 && n > maxLen {
		return "", d.fail(at, "%s length %d exceeds the format's limit of %d", what, n, maxLen)
	}
	b, _ := d.take(n, what)
	return string(b), nil
}

// parse reads and checks the whole file image.
func parse(buf []byte) (*File, error) {
	d := &decoder{buf: buf}
	magic, err := d.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != "GGUF" {
		return nil, d.fail(0, "bad magic %q, want \"GGUF\"", magic)
	}
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, d.fail(4, "version 1 (32-bit counts) is not supported, want 2 or 3")
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, d.fail(4, "big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, d.fail(4, "unsupported version %d, want 2 or 3", version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// The least a pair can occupy is a key length, a type and a one-byte value; the least a
	// tensor info can is an empty name, a dimension count, a type and an offset.
	const minKV, minTensor = 8 + 4 + 1, 8 + 4 + 4 + 8
	if nKV > d.left()/minKV {
		return nil, d.fail(16, "metadata count %d needs at least %d bytes each, the file has %d left", nKV, minKV, d.left())
	}
	if nTensors > d.left()/minTensor {
		return nil, d.fail(8, "tensor count %d needs at least %d bytes each, the file has %d left", nTensors, minTensor, d.left())
	}
	f := &File{Version: version, Alignment: DefaultAlignment, data: buf}

	kvs := make([]KV, 0, nKV)
	seen := make(map[string]int, nKV)
	alignAt := -1
	for i := uint64(0); i < nKV; i++ {
		at := d.off
		key, err := d.str(fmt.Sprintf("metadata %d key", i), MaxKeyLen)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.fail(at, "metadata %d has an empty key", i)
		}
		if _, dup := seen[key]; dup {
			return nil, d.fail(at, "metadata key %q appears twice", key)
		}
		seen[key] = len(kvs)
		typAt := d.off
		typ, err := d.u32(fmt.Sprintf("type of metadata %q", key))
		if err != nil {
			return nil, err
		}
		if key == KeyAlignment {
			alignAt = d.off
		}
		v, err := d.value(ValueType(typ), typAt, key, 0)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, KV{Key: key, Value: v})
	}
	f.Metadata = &Metadata{kvs: kvs, index: seen}
	if v, ok := f.Metadata.Lookup(KeyAlignment); ok {
		// ggml's reader requires a uint32 that is a power of two; the spec adds "a multiple of
		// 8", which every real writer meets but ggml does not check, so neither do we.
		a := uint64(v.bits)
		if v.typ != TypeUint32 {
			return nil, d.fail(alignAt, "%s is %s, want uint32", KeyAlignment, v.kind())
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, d.fail(alignAt, "%s = %d, want a power of two", KeyAlignment, a)
		}
		f.Alignment = int(a)
	}

	f.tensors = make([]TensorInfo, 0, nTensors)
	f.byName = make(map[string]int, nTensors)
	fieldAt := make([]int, 0, nTensors) // where each tensor's offset field is, for messages
	for i := uint64(0); i < nTensors; i++ {
		t, offAt, err := d.tensorInfo(i, f.Alignment)
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, d.fail(offAt, "tensor name %q appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
		fieldAt = append(fieldAt, offAt)
	}

	// The data section starts at the next multiple of the alignment after the tensor infos.
	start := uint64(d.off)
	if r := start % uint64(f.Alignment); r != 0 {
		start += uint64(f.Alignment) - r
	}
	f.DataOffset = int64(start)
	var section uint64
	if start < uint64(len(buf)) {
		section = uint64(len(buf)) - start
	}
	for i, t := range f.tensors {
		if t.Size > 0 && (t.Offset > section || t.Size > section-t.Offset) {
			return nil, d.fail(fieldAt[i], "tensor %q: data [%d, %d) of the data section at %d runs past the end of the file (%d bytes)",
				t.Name, t.Offset, t.Offset+t.Size, start, len(buf))
		}
	}
	order := sortedByOffset(f.tensors)
	var prev *TensorInfo
	for _, i := range order {
		t := &f.tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return nil, d.fail(fieldAt[i], "tensor %q: data [%d, %d) overlaps tensor %q at [%d, %d)",
				t.Name, t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return f, nil
}

// tensorInfo reads one tensor info and checks it against the types quant knows and the
// alignment; it returns the offset of the info's data-offset field for later messages.
func (d *decoder) tensorInfo(i uint64, alignment int) (TensorInfo, int, error) {
	var t TensorInfo
	var err error
	at := d.off
	if t.Name, err = d.str(fmt.Sprintf("tensor %d name", i), MaxNameLen); err != nil {
		return t, 0, err
	}
	if !utf8.ValidString(t.Name) {
		return t, 0, d.fail(at, "tensor %d name is not UTF-8", i)
	}
	dimsAt := d.off
	nd, err := d.u32(fmt.Sprintf("dimension count of tensor %q", t.Name))
	if err != nil {
		return t, 0, err
	}
	if nd > MaxDims {
		return t, 0, d.fail(dimsAt, "tensor %q has %d dimensions, want at most %d", t.Name, nd, MaxDims)
	}
	if nd > 0 {
		t.Shape = make([]uint64, nd)
	}
	elems := uint64(1)
	for j := range t.Shape {
		if t.Shape[j], err = d.u64(fmt.Sprintf("dimension %d of tensor %q", j, t.Name)); err != nil {
			return t, 0, err
		}
		hi, lo := bits.Mul64(elems, t.Shape[j])
		if hi != 0 || lo > math.MaxInt64 {
			return t, 0, d.fail(dimsAt, "tensor %q: shape %v has more than 2^63 elements", t.Name, t.Shape)
		}
		elems = lo
	}
	typAt := d.off
	typ, err := d.u32(fmt.Sprintf("type of tensor %q", t.Name))
	if err != nil {
		return t, 0, err
	}
	t.Type = quant.Type(typ)
	if !t.Type.Known() {
		return t, 0, d.fail(typAt, "tensor %q: unknown ggml type %d", t.Name, typ)
	}
	// ggml stores whole blocks along the contiguous dimension only.
	row := uint64(1)
	if nd > 0 {
		row = t.Shape[0]
	}
	block := uint64(t.Type.BlockSize())
	if row%block != 0 {
		return t, 0, d.fail(dimsAt, "tensor %q: first dimension %d of shape %v is not a multiple of %s's block size %d",
			t.Name, row, t.Shape, t.Type, block)
	}
	hi, size := bits.Mul64(elems/block, uint64(t.Type.BlockBytes()))
	if hi != 0 {
		return t, 0, d.fail(dimsAt, "tensor %q: shape %v of %s has more than 2^64 bytes", t.Name, t.Shape, t.Type)
	}
	t.Size = size
	offAt := d.off
	if t.Offset, err = d.u64(fmt.Sprintf("data offset of tensor %q", t.Name)); err != nil {
		return t, 0, err
	}
	if t.Offset%uint64(alignment) != 0 {
		return t, 0, d.fail(offAt, "tensor %q: data offset %d is not a multiple of the alignment %d", t.Name, t.Offset, alignment)
	}
	return t, offAt, nil
}

// value reads a value of type typ (typAt is where the type was stored, for messages).
func (d *decoder) value(typ ValueType, typAt int, key string, depth int) (Value, error) {
	if !typ.valid() {
		return Value{}, d.fail(typAt, "metadata %q: unknown value type %d", key, uint32(typ))
	}
	what := fmt.Sprintf("value of metadata %q", key)
	switch typ {
	case TypeString:
		s, err := d.str(what, 0)
		return Value{typ: TypeString, str: s}, err
	case TypeArray:
		return d.array(key, depth)
	case TypeBool:
		at := d.off
		b, err := d.take(1, what)
		if err != nil {
			return Value{}, err
		}
		if b[0] > 1 {
			return Value{}, d.fail(at, "metadata %q: bool byte %d, want 0 or 1", key, b[0])
		}
		return Value{typ: TypeBool, bits: uint64(b[0])}, nil
	}
	b, err := d.take(typ.size(), what)
	if err != nil {
		return Value{}, err
	}
	return Value{typ: typ, bits: scalarBits(typ, b)}, nil
}

// scalarBits decodes a fixed-size scalar into Value.bits, sign-extending signed integers.
func scalarBits(typ ValueType, b []byte) uint64 {
	switch typ {
	case TypeUint8, TypeBool:
		return uint64(b[0])
	case TypeInt8:
		return uint64(int64(int8(b[0])))
	case TypeUint16:
		return uint64(binary.LittleEndian.Uint16(b))
	case TypeInt16:
		return uint64(int64(int16(binary.LittleEndian.Uint16(b))))
	case TypeUint32, TypeFloat32:
		return uint64(binary.LittleEndian.Uint32(b))
	case TypeInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	}
	return binary.LittleEndian.Uint64(b)
}

// array reads an array's element type, count and elements. The count is checked against the
// least the remaining bytes could hold before the slice is allocated.
func (d *decoder) array(key string, depth int) (Value, error) {
	if depth >= maxArrayDepth {
		return Value{}, d.fail(d.off, "metadata %q: arrays nested deeper than %d", key, maxArrayDepth)
	}
	typAt := d.off
	et, err := d.u32(fmt.Sprintf("element type of metadata %q", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.valid() {
		return Value{}, d.fail(typAt, "metadata %q: unknown array element type %d", key, et)
	}
	lenAt := d.off
	n, err := d.u64(fmt.Sprintf("length of metadata %q", key))
	if err != nil {
		return Value{}, err
	}
	if n > d.left()/elem.size() {
		return Value{}, d.fail(lenAt, "metadata %q: array of %d %s needs at least %d bytes each, the file has %d left",
			key, n, elem, elem.size(), d.left())
	}
	what := fmt.Sprintf("elements of metadata %q", key)
	var vals any
	switch elem {
	case TypeString:
		s := make([]string, n)
		for i := range s {
			if s[i], err = d.str(fmt.Sprintf("element %d of metadata %q", i, key), 0); err != nil {
				return Value{}, err
			}
		}
		vals = s
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			if s[i], err = d.array(key, depth+1); err != nil {
				return Value{}, err
			}
		}
		vals = s
	case TypeBool:
		at := d.off
		b, _ := d.take(n, what)
		s := make([]bool, n)
		for i, x := range b {
			if x > 1 {
				return Value{}, d.fail(at+i, "metadata %q: element %d: bool byte %d, want 0 or 1", key, i, x)
			}
			s[i] = x == 1
		}
		vals = s
	default:
		b, _ := d.take(n*elem.size(), what)
		vals = fixedSlice(elem, b)
	}
	return Value{typ: TypeArray, arr: &array{elem: elem, vals: vals}}, nil
}

// fixedSlice decodes a run of fixed-size little-endian elements into a typed slice.
func fixedSlice(elem ValueType, b []byte) any {
	sz := int(elem.size())
	n := len(b) / sz
	switch elem {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(b[i])
		}
		return s
	case TypeUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return s
	case TypeInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return s
	case TypeUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
		return s
	case TypeInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return s
	case TypeFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return s
	case TypeUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return s
	case TypeInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return s
	case TypeFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return s
	}
	panic("gguf: fixedSlice of " + elem.String())
}
