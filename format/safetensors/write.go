package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// WriteTensor is one tensor to write; Data holds its elements little-endian.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// headerAlign pads the JSON header with spaces so the data region starts 8-byte aligned, which
// keeps every F32/BF16 tensor aligned for zero-copy views when tensors have even byte sizes.
const headerAlign = 8

type headerEntry struct {
	DType   DType  `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// Write stores tensors (in the given order) and metadata at path. The file is written to a
// temporary file in the same folder and renamed into place, so readers never see a partial file.
func Write(path string, tensors []WriteTensor, metadata map[string]string) error {
	header := make(map[string]any, len(tensors)+1)
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	off := 0
	for _, t := range tensors {
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("write %s: invalid tensor name %q", path, t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return fmt.Errorf("write %s: tensor %s given twice", path, t.Name)
		}
		size := t.DType.Size()
		if size == 0 {
			return fmt.Errorf("write %s: tensor %s: unknown dtype %q", path, t.Name, t.DType)
		}
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("write %s: tensor %s: negative dimension in shape %v", path, t.Name, t.Shape)
			}
			if d != 0 && n > math.MaxInt/d {
				return fmt.Errorf("write %s: tensor %s: shape %v overflows", path, t.Name, t.Shape)
			}
			n *= d
		}
		if len(t.Data) != n*size {
			return fmt.Errorf("write %s: tensor %s: %d data bytes, but dtype %s x shape %v needs %d", path, t.Name, len(t.Data), t.DType, t.Shape, n*size)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{} // a scalar: JSON [] rather than null
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, Offsets: [2]int{off, off + len(t.Data)}}
		off += len(t.Data)
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write %s: header: %w", path, err)
	}
	for (8+len(js))%headerAlign != 0 {
		js = append(js, ' ')
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	w.Write(lenBuf[:])
	w.Write(js)
	for _, t := range tensors {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		ok = true
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	return nil
}

// F32Bytes encodes float32 values little-endian.
func F32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// BF16Bytes encodes bf16 bit patterns little-endian.
func BF16Bytes(v []uint16) []byte { return u16Bytes(v) }

// F16Bytes encodes IEEE half bit patterns little-endian.
func F16Bytes(v []uint16) []byte { return u16Bytes(v) }

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
