package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/dflash/dflash/kernel/quant"
)

// Version is the format version the writer produces.
const Version = 3

// maxWriteName is the longest tensor name ggml's reader accepts (its names are 64-byte,
// NUL-terminated buffers); the format allows 64 but a file llama.cpp refuses is of no use.
const maxWriteName = MaxNameLen - 1

// WriteTensor is one tensor to write. Data must hold exactly the tensor's bytes in its type.
type WriteTensor struct {
	Name  string
	Type  quant.Type
	Shape []uint64 // ggml order: Shape[0] is the row length
	Data  []byte
}

// Writer streams a GGUF file: the header, metadata and tensor infos at NewWriter, then each
// tensor's data in the order the infos were given, so a converter never holds more than one
// tensor in memory. Offsets are assigned in that order, each aligned and zero-padded.
type Writer struct {
	bw        *bufio.Writer
	infos     []TensorInfo
	next      int
	alignment uint64
	err       error // sticky: after a failed write the file is unusable
}

// NewWriter writes the header, metadata and tensor infos (their Offset and Size fields are
// ignored and computed). The alignment is general.alignment when kvs sets it (as a uint32
// power of two), else DefaultAlignment.
func NewWriter(w io.Writer, kvs []KV, tensors []TensorInfo) (*Writer, error) {
	meta, err := NewMetadata(kvs)
	if err != nil {
		return nil, fmt.Errorf("gguf write: %w", err)
	}
	alignment := uint64(DefaultAlignment)
	if v, ok := meta.Lookup(KeyAlignment); ok {
		a, isU32 := v.Any().(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("gguf write: %s = %v (%s), want a uint32 power of two", KeyAlignment, v, v.kind())
		}
		alignment = uint64(a)
	}
	e := &encoder{}
	e.buf = append(e.buf, "GGUF"...)
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		if kv.Key == "" || len(kv.Key) > MaxKeyLen {
			return nil, fmt.Errorf("gguf write: metadata key %q: want 1 to %d bytes", kv.Key, MaxKeyLen)
		}
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		if err := e.value(kv.Value, 0); err != nil {
			return nil, fmt.Errorf("gguf write: metadata %q: %w", kv.Key, err)
		}
	}
	infos := make([]TensorInfo, len(tensors))
	names := make(map[string]bool, len(tensors))
	var offset uint64
	for i, t := range tensors {
		if t.Name == "" || len(t.Name) > maxWriteName {
			return nil, fmt.Errorf("gguf write: tensor name %q: want 1 to %d bytes", t.Name, maxWriteName)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("gguf write: tensor name %q appears twice", t.Name)
		}
		names[t.Name] = true
		size, err := tensorBytes(t)
		if err != nil {
			return nil, fmt.Errorf("gguf write: tensor %q: %w", t.Name, err)
		}
		infos[i] = TensorInfo{Name: t.Name, Type: t.Type, Shape: t.Shape, Offset: offset, Size: size}
		offset = align(offset+size, alignment)
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(infos[i].Offset)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(e.buf); err != nil {
		return nil, fmt.Errorf("gguf write: header: %w", err)
	}
	if err := writeZeros(bw, align(uint64(len(e.buf)), alignment)-uint64(len(e.buf))); err != nil {
		return nil, fmt.Errorf("gguf write: header: %w", err)
	}
	return &Writer{bw: bw, infos: infos, alignment: alignment}, nil
}

// tensorBytes checks a tensor's shape against its type and returns its size in bytes.
func tensorBytes(t TensorInfo) (uint64, error) {
	if !t.Type.Known() {
		return 0, fmt.Errorf("%w %d", quant.ErrUnknownType, uint32(t.Type))
	}
	if len(t.Shape) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, want at most %d", len(t.Shape), MaxDims)
	}
	elems := uint64(1)
	for _, d := range t.Shape {
		if d != 0 && elems > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v has more than 2^63 elements", t.Shape)
		}
		elems *= d
	}
	row, block := uint64(1), uint64(t.Type.BlockSize())
	if len(t.Shape) > 0 {
		row = t.Shape[0]
	}
	if row%block != 0 {
		return 0, fmt.Errorf("first dimension %d is not a multiple of %s's block size %d", row, t.Type, block)
	}
	bytes := uint64(t.Type.BlockBytes())
	if elems/block > math.MaxUint64/bytes {
		return 0, fmt.Errorf("shape %v of %s has more than 2^64 bytes", t.Shape, t.Type)
	}
	return elems / block * bytes, nil
}

// WriteTensor writes the next tensor's data, which must be exactly its size, and its padding.
func (w *Writer) WriteTensor(data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.next >= len(w.infos) {
		return errors.New("gguf write: more tensor data than tensor infos")
	}
	t := w.infos[w.next]
	if uint64(len(data)) != t.Size {
		return fmt.Errorf("gguf write: tensor %q: %d bytes of data, want %d for %s %v", t.Name, len(data), t.Size, t.Type, t.Shape)
	}
	w.next++
	pad := align(t.Size, w.alignment) - t.Size
	if _, err := w.bw.Write(data); err != nil {
		w.err = fmt.Errorf("gguf write: tensor %q: %w", t.Name, err)
		return w.err
	}
	if err := writeZeros(w.bw, pad); err != nil {
		w.err = fmt.Errorf("gguf write: tensor %q: %w", t.Name, err)
		return w.err
	}
	return nil
}

// Close flushes the file; it fails if some tensor's data was never written. It does not close
// the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next != len(w.infos) {
		return fmt.Errorf("gguf write: tensor %q has no data (%d of %d written)", w.infos[w.next].Name, w.next, len(w.infos))
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("gguf write: %w", err)
	}
	return nil
}

// Write writes a whole GGUF file of the given metadata and tensors, in order.
func Write(w io.Writer, kvs []KV, tensors []WriteTensor) error {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, Type: t.Type, Shape: t.Shape}
	}
	gw, err := NewWriter(w, kvs, infos)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := gw.WriteTensor(t.Data); err != nil {
			return err
		}
	}
	return gw.Close()
}

// WriteFile writes a GGUF file at path; on failure no partial file is left behind.
func WriteFile(path string, kvs []KV, tensors []WriteTensor) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gguf write: %w", err)
	}
	err = Write(f, kvs, tensors)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("gguf write: %w", cerr)
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeZeros writes n zero bytes of padding without allocating n bytes: an alignment may be
// as large as 2^31.
func writeZeros(w io.Writer, n uint64) error {
	var zeros [4096]byte
	for n > 0 {
		k := min(n, uint64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func align(n, a uint64) uint64 {
	if r := n % a; r != 0 {
		return n + a - r
	}
	return n
}

// encoder appends the little-endian encoding of header fields.
type encoder struct{ buf []byte }

func (e *encoder) u32(v uint32) { e.buf = binary.LittleEndian.AppendUint32(e.buf, v) }
func (e *encoder) u64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.buf = append(e.buf, s...) }

// value encodes v's payload (its type tag is written by the caller, as the format places it).
func (e *encoder) value(v Value, depth int) error {
	if !v.typ.valid() {
		return fmt.Errorf("unknown value type %d", uint32(v.typ))
	}
	switch v.typ {
	case TypeString:
		e.str(v.str)
	case TypeArray:
		return e.array(v, depth)
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v.bits)
		e.buf = append(e.buf, b[:v.typ.size()]...)
	}
	return nil
}

func (e *encoder) array(v Value, depth int) error {
	if v.arr == nil {
		return errors.New("array value without elements")
	}
	if depth >= maxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
	}
	e.u32(uint32(v.arr.elem))
	e.u64(uint64(arrayLen(v.arr.vals)))
	switch s := v.arr.vals.(type) {
	case []string:
		for _, x := range s {
			e.str(x)
		}
	case []Value:
		for i, x := range s {
			if x.typ != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is %s", i, x.kind())
			}
			if err := e.array(x, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	case []bool:
		for _, x := range s {
			if x {
				e.buf = append(e.buf, 1)
			} else {
				e.buf = append(e.buf, 0)
			}
		}
	case []uint8:
		e.buf = append(e.buf, s...)
	case []int8:
		for _, x := range s {
			e.buf = append(e.buf, byte(x))
		}
	case []uint16:
		for _, x := range s {
			e.buf = binary.LittleEndian.AppendUint16(e.buf, x)
		}
	case []int16:
		for _, x := range s {
			e.buf = binary.LittleEndian.AppendUint16(e.buf, uint16(x))
		}
	case []uint32:
		for _, x := range s {
			e.u32(x)
		}
	case []int32:
		for _, x := range s {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range s {
			e.u32(math.Float32bits(x))
		}
	case []uint64:
		for _, x := range s {
			e.u64(x)
		}
	case []int64:
		for _, x := range s {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range s {
			e.u64(math.Float64bits(x))
		}
	default:
		return fmt.Errorf("array of unknown Go type %T", s)
	}
	return nil
}
