// Package safetensors owns reading and writing the safetensors format: single files (memory-mapped
// read-only) and Hugging Face model folders (model.safetensors or a sharded index). It validates
// every header field before handing out a byte of tensor data, and converts between f32, bf16 and
// f16 element types.
//
// It must never panic or read out of bounds on a file it was given, whatever the file holds, and it
// never writes to a mapped file: tensor views into a mapping are read-only and valid only until
// the File (or Model) holding them is closed.
//
// Layout of a file: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {string: string}},
// then the data region; offsets are relative to the start of the data region.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/dflash/dflash/internal/mmap"
	"github.com/dflash/dflash/kernel/quant"
)

// MaxHeaderLen bounds the JSON header (the reference implementation uses the same 100 MB limit);
// a larger length is treated as corruption rather than an attempt to allocate it.
const MaxHeaderLen = 100_000_000

// Sentinel errors, wrapped with context by every function that returns them.
var (
	ErrNoTensor         = errors.New("no such tensor")
	ErrUnsupportedDType = errors.New("unsupported dtype")
	ErrShape            = errors.New("shape mismatch")
)

// DType is a safetensors element type, spelled as in the header.
type DType string

// Element types of the format. Only F32, BF16 and F16 can be converted; the others are parsed,
// validated and reported as unsupported on conversion.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	F8E8M0 DType = "F8_E8M0"
)

// Size is the number of bytes of one element, or 0 for a dtype this package does not know.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case I8, U8, BOOL, F8E4M3, F8E5M2, F8E8M0:
		return 1
	}
	return 0
}

// Tensor is one named array. Data aliases the file's mapping when it came from Open: it must not
// be written to, and it becomes invalid once the File is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
	File  string // path of the file holding it, for error messages
}

// Elements is the product of the shape (1 for a scalar).
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Expect checks the shape and returns an error naming the file, tensor, expected and actual shape.
func (t *Tensor) Expect(shape ...int) error {
	if slices.Equal(t.Shape, shape) {
		return nil
	}
	return fmt.Errorf("%s: tensor %s: %w: shape %s, expected %s", t.File, t.Name, ErrShape, shapeString(t.Shape), shapeString(shape))
}

// hostLittle reports whether zero-copy views of little-endian data are valid on this machine.
var hostLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// checkLen guards conversions of hand-built tensors; tensors from Open always pass.
func (t *Tensor) checkLen() error {
	size := t.DType.Size()
	if size == 0 {
		return fmt.Errorf("%s: tensor %s: %w %q", t.File, t.Name, ErrUnsupportedDType, t.DType)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("%s: tensor %s: negative dimension in shape %v", t.File, t.Name, t.Shape)
		}
	}
	if len(t.Data) != t.Elements()*size {
		return fmt.Errorf("%s: tensor %s: %d data bytes, but dtype %s x shape %v needs %d", t.File, t.Name, len(t.Data), t.DType, t.Shape, t.Elements()*size)
	}
	return nil
}

// u16 returns 2-byte elements as host uint16s: a view when possible, else a decoded copy.
// The caller has checked the length.
func (t *Tensor) u16() []uint16 {
	n := len(t.Data) / 2
	if n == 0 {
		return nil
	}
	if hostLittle && uintptr(unsafe.Pointer(&t.Data[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n)
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out
}

// F32 returns the elements as float32: a zero-copy view (read-only) when the tensor is F32 and
// suitably aligned, otherwise a converted copy from F32, BF16 or F16.
func (t *Tensor) F32() ([]float32, error) {
	n := t.Elements()
	if err := t.checkLen(); err != nil {
		return nil, err
	}
	switch t.DType {
	case F32:
		if n == 0 {
			return []float32{}, nil
		}
		if hostLittle && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	case BF16, F16:
		src := t.u16()
		out := make([]float32, n)
		if t.DType == BF16 {
			for i, v := range src {
				out[i] = F32FromBF16(v)
			}
		} else {
			for i, v := range src {
				out[i] = F32FromF16(v)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: tensor %s: %w %s for f32 conversion", t.File, t.Name, ErrUnsupportedDType, t.DType)
}

// BF16 returns the elements as bf16 bit patterns: a zero-copy view (read-only) when the tensor is
// BF16 and aligned, otherwise a copy, rounding F32 and F16 values to nearest even.
func (t *Tensor) BF16() ([]uint16, error) {
	n := t.Elements()
	if err := t.checkLen(); err != nil {
		return nil, err
	}
	switch t.DType {
	case BF16:
		if n == 0 {
			return []uint16{}, nil
		}
		if hostLittle && uintptr(unsafe.Pointer(&t.Data[0]))%2 == 0 {
			return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n), nil
		}
		out := make([]uint16, n)
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
		}
		return out, nil
	case F32:
		out := make([]uint16, n)
		for i := range out {
			out[i] = BF16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
		}
		return out, nil
	case F16:
		out := make([]uint16, n)
		for i := range out {
			// f16 -> f32 is exact, so this rounds once.
			out[i] = BF16FromF32(F32FromF16(binary.LittleEndian.Uint16(t.Data[2*i:])))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: tensor %s: %w %s for bf16 conversion", t.File, t.Name, ErrUnsupportedDType, t.DType)
}

// File is one opened safetensors file.
type File struct {
	Path     string
	Metadata map[string]string // the "__metadata__" entry, empty when absent

	tensors map[string]*Tensor
	names   []string // sorted
	release func() error
}

// Open maps path read-only and validates its header and offsets.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close() // the mapping survives closing the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	if st.Size() < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", path, st.Size())
	}
	data, release, err := mmap.File(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	file, err := Parse(path, data)
	if err != nil {
		release()
		return nil, err
	}
	file.release = release
	return file, nil
}

// Parse validates a whole file image held in memory; name is used in error messages. The
// returned File's tensors alias data.
func Parse(name string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", name, len(data))
	}
	hlen := binary.LittleEndian.Uint64(data)
	if hlen > MaxHeaderLen {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the %d-byte limit (corrupt file?)", name, hlen, MaxHeaderLen)
	}
	if hlen > uint64(len(data)-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d runs past the end of the %d-byte file (truncated?)", name, hlen, len(data))
	}
	header := data[8 : 8+hlen]
	body := data[8+hlen:]
	f := &File{Path: name, Metadata: map[string]string{}, tensors: map[string]*Tensor{}}
	if err := f.parseHeader(header, body); err != nil {
		return nil, err
	}
	return f, nil
}

type rawEntry struct {
	DType   *string  `json:"dtype"`
	Shape   *[]int64 `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

// Info is one tensor as its file's header describes it: no data, only what the header promises
// (checked against the data region's length, so the bytes are there).
type Info struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64  // byte range inside the data region
	File       string // path of the file holding it, for error messages
}

// header is a validated header: tensors by name, their names sorted.
type header struct {
	meta  map[string]string
	infos map[string]Info
	names []string
}

// parseHeader validates a file's JSON header against a data region of bodyLen bytes: every
// entry's dtype, shape and offsets, and that no two tensors share bytes.
func parseHeader(path string, js []byte, bodyLen int64) (*header, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: header JSON: %w", path, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("safetensors %s: header JSON is null, expected an object", path)
	}
	h := &header{meta: map[string]string{}, infos: make(map[string]Info, len(raw))}
	spans := make([]Info, 0, len(raw))
	// In name order, so a header with several bad entries is always refused by the same one.
	keys := slices.Sorted(maps.Keys(raw))
	for _, name := range keys {
		msg := raw[name]
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.meta); err != nil {
				return nil, fmt.Errorf("safetensors %s: __metadata__ must map strings to strings: %w", path, err)
			}
			if h.meta == nil {
				h.meta = map[string]string{}
			}
			continue
		}
		in, err := parseEntry(name, msg, bodyLen)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", path, name, err)
		}
		in.File = path
		h.infos[name] = in
		h.names = append(h.names, name)
		spans = append(spans, in)
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].Begin != spans[j].Begin {
			return spans[i].Begin < spans[j].Begin
		}
		if spans[i].End != spans[j].End {
			return spans[i].End < spans[j].End
		}
		return spans[i].Name < spans[j].Name
	})
	// Two tensors sharing bytes would make a write through one visible in the other and always
	// indicates a corrupt or hostile header; empty tensors occupy no bytes and cannot overlap.
	var prevEnd int64
	prevName := ""
	for _, s := range spans {
		if s.Begin == s.End {
			continue
		}
		if s.Begin < prevEnd {
			return nil, fmt.Errorf("safetensors %s: tensor %q bytes [%d,%d) overlap tensor %q ending at %d", path, s.Name, s.Begin, s.End, prevName, prevEnd)
		}
		prevEnd, prevName = s.End, s.Name
	}
	return h, nil
}

func (f *File) parseHeader(js, body []byte) error {
	h, err := parseHeader(f.Path, js, int64(len(body)))
	if err != nil {
		return err
	}
	f.Metadata, f.names = h.meta, h.names
	for name, in := range h.infos {
		// parseHeader checked the range against len(body).
		f.tensors[name] = &Tensor{Name: name, DType: in.DType, Shape: in.Shape, Data: body[in.Begin:in.End:in.End], File: f.Path}
	}
	return nil
}

func parseEntry(name string, msg json.RawMessage, bodyLen int64) (Info, error) {
	var e rawEntry
	if err := json.Unmarshal(msg, &e); err != nil {
		return Info{}, fmt.Errorf("entry JSON: %w", err)
	}
	if e.DType == nil {
		return Info{}, errors.New("missing dtype")
	}
	if e.Shape == nil {
		return Info{}, errors.New("missing shape")
	}
	if e.Offsets == nil {
		return Info{}, errors.New("missing data_offsets")
	}
	dt := DType(*e.DType)
	size := dt.Size()
	if size == 0 {
		return Info{}, fmt.Errorf("unknown dtype %q", *e.DType)
	}
	shape := make([]int, len(*e.Shape))
	elems := int64(1)
	for i, d := range *e.Shape {
		if d < 0 {
			return Info{}, fmt.Errorf("shape %v has negative dimension %d", *e.Shape, d)
		}
		if int64(int(d)) != d {
			return Info{}, fmt.Errorf("shape %v has dimension %d too large for this platform", *e.Shape, d)
		}
		shape[i] = int(d)
		if d != 0 && elems > math.MaxInt64/d {
			return Info{}, fmt.Errorf("shape %v: element count overflows", *e.Shape)
		}
		elems *= d
	}
	if elems > math.MaxInt64/int64(size) {
		return Info{}, fmt.Errorf("shape %v: byte size overflows", *e.Shape)
	}
	want := elems * int64(size)
	offs := *e.Offsets
	if len(offs) != 2 {
		return Info{}, fmt.Errorf("data_offsets %v must hold exactly [begin, end]", offs)
	}
	b64, e64 := offs[0], offs[1]
	if b64 < 0 || e64 < 0 {
		return Info{}, fmt.Errorf("data_offsets %v are negative", offs)
	}
	if b64 > e64 {
		return Info{}, fmt.Errorf("data_offsets begin %d > end %d", b64, e64)
	}
	if e64-b64 != want {
		return Info{}, fmt.Errorf("data_offsets [%d,%d) hold %d bytes but dtype %s x shape %v needs %d", b64, e64, e64-b64, dt, shape, want)
	}
	if e64 > bodyLen {
		return Info{}, fmt.Errorf("data_offsets [%d,%d) run past the %d-byte data region (truncated file?)", b64, e64, bodyLen)
	}
	if int64(int(e64)) != e64 {
		return Info{}, fmt.Errorf("data_offsets [%d,%d) too large for this platform", b64, e64)
	}
	return Info{Name: name, DType: dt, Shape: shape, Begin: b64, End: e64}, nil
}

// Names lists the tensors in sorted order.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Has reports whether the file holds a tensor called name.
func (f *File) Has(name string) bool { _, ok := f.tensors[name]; return ok }

// Tensor returns the named tensor, or an error wrapping ErrNoTensor.
func (f *File) Tensor(name string) (*Tensor, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("file %s has no tensor %s: %w", f.Path, name, ErrNoTensor)
	}
	return t, nil
}

// Close unmaps the file. Every tensor view obtained from it becomes invalid.
func (f *File) Close() error {
	if f.release == nil {
		return nil
	}
	r := f.release
	f.release = nil
	if err := r(); err != nil {
		return fmt.Errorf("safetensors %s: close: %w", f.Path, err)
	}
	return nil
}

// The half-precision conversions are kernel/quant's (one implementation for every reader and
// kernel, tested there against all 65,536 halves); these names keep the format's vocabulary.

// F32FromBF16 widens a bf16 bit pattern exactly.
func F32FromBF16(b uint16) float32 { return quant.BF16ToF32(b) }

// BF16FromF32 rounds to nearest even; NaN stays a (quiet) NaN of the same sign.
func BF16FromF32(f float32) uint16 { return quant.F32ToBF16(f) }

// F32FromF16 widens an IEEE half-precision bit pattern exactly.
func F32FromF16(h uint16) float32 { return quant.F16ToF32(h) }

// F16FromF32 rounds to the nearest half-precision value, ties to even; overflow gives infinity
// and NaN stays NaN.
func F16FromF32(f float32) uint16 { return quant.F32ToF16(f) }

// shapeString formats a shape for messages, e.g. [2 3].
func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
