package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Header is a safetensors file's header read without its data: the tensors Open would hand out,
// validated the same way (dtypes, shapes, byte ranges against the file's size, no overlaps), for
// a caller that must know a file is sound before it reads, or maps, a byte of weights.
type Header struct {
	Path     string
	Metadata map[string]string
	h        *header
}

// ReadHeader reads and validates the header of the file at path. It reads the 8-byte length and
// the JSON, nothing else, so its cost does not depend on the size of the weights.
func ReadHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", path, size)
	}
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	hlen := binary.LittleEndian.Uint64(n[:])
	if hlen > MaxHeaderLen {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the %d-byte limit (corrupt file?)", path, hlen, MaxHeaderLen)
	}
	if hlen > uint64(size-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d runs past the end of the %d-byte file (truncated?)", path, hlen, size)
	}
	js := make([]byte, hlen)
	if _, err := io.ReadFull(f, js); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading the header: %w", path, err)
	}
	h, err := parseHeader(path, js, size-8-int64(hlen))
	if err != nil {
		return nil, err
	}
	return &Header{Path: path, Metadata: h.meta, h: h}, nil
}

// Names lists the tensors in sorted order.
func (h *Header) Names() []string { return slices.Clone(h.h.names) }

// Info describes the named tensor; ok is false when the file has none of that name.
func (h *Header) Info(name string) (in Info, ok bool) {
	in, ok = h.h.infos[name]
	return in, ok
}

// ModelHeader is a Hugging Face model folder's tensors as their headers describe them: what
// OpenModel would open, checked as OpenModel checks it, without the data.
type ModelHeader struct {
	Dir   string
	Files []*Header // in shard-name order

	where map[string]Info
	names []string // sorted
}

// ReadModelHeader reads the headers of dir/model.safetensors.index.json's shards when the index
// is present, otherwise of dir/model.safetensors.
func ReadModelHeader(dir string) (*ModelHeader, error) {
	m := &ModelHeader{Dir: dir, where: map[string]Info{}}
	indexPath := filepath.Join(dir, IndexFile)
	idx, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		weightMap, shards, shardOf, err := readIndex(indexPath, idx)
		if err != nil {
			return nil, err
		}
		read := map[string]*Header{}
		for _, s := range shards {
			p := filepath.Join(dir, s)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("model index %s: shard %s (holding tensor %s) is missing: %w", indexPath, s, shardOf[s], err)
			}
			h, err := ReadHeader(p)
			if err != nil {
				return nil, fmt.Errorf("model %s: shard %s: %w", dir, s, err)
			}
			m.Files = append(m.Files, h)
			read[s] = h
		}
		for tensor, shard := range weightMap {
			in, ok := read[shard].Info(tensor)
			if !ok {
				return nil, fmt.Errorf("model index %s: says tensor %s is in shard %s, but file %s has no tensor %s", indexPath, tensor, shard, read[shard].Path, tensor)
			}
			m.where[tensor] = in
		}
	case errors.Is(err, os.ErrNotExist):
		single := filepath.Join(dir, SingleFile)
		if _, err := os.Stat(single); err != nil {
			return nil, fmt.Errorf("model %s: neither %s nor %s is readable: %w", dir, SingleFile, IndexFile, err)
		}
		h, err := ReadHeader(single)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", dir, err)
		}
		m.Files = []*Header{h}
		for n, in := range h.h.infos {
			m.where[n] = in
		}
	default:
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	m.names = make([]string, 0, len(m.where))
	for n := range m.where {
		m.names = append(m.names, n)
	}
	sort.Strings(m.names)
	return m, nil
}

// Names lists every tensor of the model in sorted order.
func (m *ModelHeader) Names() []string { return slices.Clone(m.names) }

// Info describes the named tensor; ok is false when the model has none of that name.
func (m *ModelHeader) Info(name string) (in Info, ok bool) {
	in, ok = m.where[name]
	return in, ok
}
