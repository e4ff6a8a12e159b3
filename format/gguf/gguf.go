// Package gguf owns reading and writing GGUF files (format versions 2 and 3, as ggml's
// docs/gguf.md defines them): the header, the typed metadata, the tensor infos and the aligned
// data section, memory-mapped read-only. From the metadata it reports the facts a loader needs
// (architecture, hyperparameters, tokenizer, chat template) as plain structs, and it holds the
// map between Hugging Face and llama.cpp tensor names.
//
// It validates every count, length, type and offset against the file before allocating for it
// or handing out a byte of tensor data, and reports a malformed file with the byte offset and
// what was expected there (see FormatError). It must never panic on a file it was given, never
// write to a mapping, and never know what a model does with its tensors: building a model is
// the engine's job, block layouts and dequantization are package quant's.
//
// Layout (little-endian): "GGUF", version u32, tensor count u64, metadata count u64; the
// metadata pairs (key string, value type u32, value); the tensor infos (name string, dimension
// count u32, dimensions u64 each, ggml type u32, offset u64 relative to the data section);
// zero padding to the alignment (general.alignment, default 32); the data section, each tensor
// at an aligned offset. A string is a u64 byte length and the bytes; an array is an element
// type u32, a u64 count and the elements.
package gguf

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/dflash/dflash/internal/mmap"
	"github.com/dflash/dflash/kernel/quant"
)

// DefaultAlignment is the data alignment of a file without general.alignment.
const DefaultAlignment = 32

// Bounds from the format and ggml's reader: tensors have at most 4 dimensions, keys at most
// 65535 bytes, tensor names at most 64 bytes (ggml's own writer and reader need fewer than 64).
const (
	MaxDims       = 4
	MaxKeyLen     = 65535
	MaxNameLen    = 64
	maxArrayDepth = 8 // nesting beyond this is corruption, and would only deepen the recursion
)

// KeyAlignment is the metadata key of the data alignment.
const KeyAlignment = "general.alignment"

// ErrNoTensor is returned for a tensor name the file does not hold.
var ErrNoTensor = errors.New("no such tensor")

// FormatError is a malformed or truncated file: Offset is the byte offset in the file of the
// field that is wrong (or where the file ran out), Msg says what was expected there.
type FormatError struct {
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string { return fmt.Sprintf("offset %d: %s", e.Offset, e.Msg) }

// TensorInfo describes one tensor. Shape is in ggml order: Shape[0] is the contiguous
// dimension (the row length), so a Hugging Face weight of shape [out, in] is [in, out] here.
type TensorInfo struct {
	Name   string
	Type   quant.Type
	Shape  []uint64
	Offset uint64 // from the start of the data section; a multiple of the alignment
	Size   uint64 // bytes
}

// Elements is the product of the dimensions (1 for a tensor of no dimensions).
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an open GGUF file. Tensor data returned by Data aliases the file's mapping: it must
// not be written to, and it is invalid once the File is closed.
type File struct {
	Name       string // path, or the name given to Parse
	Version    uint32
	Metadata   *Metadata
	Alignment  int
	DataOffset int64 // where the data section starts in the file

	tensors []TensorInfo
	byName  map[string]int
	data    []byte // the whole file
	release func() error
}

// Open maps path read-only and validates its header, metadata and tensor infos.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close() // the mapping survives closing the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	data, release, err := mmap.File(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
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
// returned File's tensor data aliases data.
func Parse(name string, data []byte) (*File, error) {
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", name, err)
	}
	f.Name = name
	return f, nil
}

// Close releases the mapping; tensor data from Data is invalid afterwards.
func (f *File) Close() error {
	r := f.release
	f.release, f.data = nil, nil
	if r == nil {
		return nil
	}
	if err := r(); err != nil {
		return fmt.Errorf("gguf %s: close: %w", f.Name, err)
	}
	return nil
}

// Tensors is every tensor info in file order; the slice must not be modified.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Tensor is the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Has reports whether the file holds the named tensor.
func (f *File) Has(name string) bool { _, ok := f.byName[name]; return ok }

// Data is the named tensor's bytes, aliasing the mapping (read-only, valid until Close).
func (f *File) Data(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf %s: tensor %q: %w", f.Name, name, ErrNoTensor)
	}
	if t.Size == 0 {
		return []byte{}, nil // its offset is unchecked: an empty tensor occupies nothing
	}
	if f.data == nil {
		return nil, fmt.Errorf("gguf %s: tensor %q: file is closed", f.Name, name)
	}
	start := uint64(f.DataOffset) + t.Offset
	return f.data[start : start+t.Size : start+t.Size], nil
}

// F32 is the named tensor dequantized to float32, in ggml order (rows of Shape[0]). A type
// dflash cannot compute with is refused with its name.
func (f *File) F32(name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf %s: tensor %q: %w", f.Name, name, ErrNoTensor)
	}
	if err := t.Type.Check(); err != nil {
		return nil, fmt.Errorf("gguf %s: tensor %q: %w", f.Name, name, err)
	}
	b, err := f.Data(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, b, out); err != nil {
		return nil, fmt.Errorf("gguf %s: tensor %q: %w", f.Name, name, err)
	}
	return out, nil
}

// Architecture is general.architecture, e.g. "qwen3" or "llama".
func (f *File) Architecture() (string, error) {
	a, err := f.Metadata.String("general.architecture")
	if err != nil {
		return "", fmt.Errorf("gguf %s: %w", f.Name, err)
	}
	return a, nil
}

// sortedByOffset is the tensors ordered by data offset, for the overlap check.
func sortedByOffset(ts []TensorInfo) []int {
	idx := make([]int, len(ts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case ts[a].Offset < ts[b].Offset:
			return -1
		case ts[a].Offset > ts[b].Offset:
			return 1
		}
		return 0
	})
	return idx
}
