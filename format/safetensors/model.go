package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// SingleFile and IndexFile are the names Hugging Face gives a model's weights in its folder.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Model is the weights of a Hugging Face model folder: one file or several shards named by an
// index. Tensors alias the shards' mappings and are valid until Close.
// A Model is read-only after OpenModel and safe for concurrent use until Close.
type Model struct {
	Dir   string
	Files []*File // every file opened, in shard-name order

	where map[string]*File
	names []string // sorted
}

// OpenModel opens dir/model.safetensors.index.json when present (opening every shard it names),
// otherwise dir/model.safetensors.
func OpenModel(dir string) (*Model, error) {
	m := &Model{Dir: dir, where: map[string]*File{}}
	indexPath := filepath.Join(dir, IndexFile)
	idx, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		if err := m.openSharded(indexPath, idx); err != nil {
			m.Close()
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist):
		single := filepath.Join(dir, SingleFile)
		if _, err := os.Stat(single); err != nil {
			return nil, fmt.Errorf("model %s: neither %s nor %s is readable: %w", dir, SingleFile, IndexFile, err)
		}
		f, err := Open(single)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", dir, err)
		}
		m.Files = []*File{f}
		for _, n := range f.names {
			m.where[n] = f
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

func (m *Model) openSharded(indexPath string, data []byte) error {
	weightMap, shards, shardOf, err := readIndex(indexPath, data)
	if err != nil {
		return err
	}
	opened := map[string]*File{}
	for _, s := range shards {
		p := filepath.Join(m.Dir, s)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("model index %s: shard %s (holding tensor %s) is missing: %w", indexPath, s, shardOf[s], err)
		}
		f, err := Open(p)
		if err != nil {
			return fmt.Errorf("model %s: shard %s: %w", m.Dir, s, err)
		}
		m.Files = append(m.Files, f)
		opened[s] = f
	}
	for tensor, shard := range weightMap {
		f := opened[shard]
		if !f.Has(tensor) {
			return fmt.Errorf("model index %s: says tensor %s is in shard %s, but file %s has no tensor %s", indexPath, tensor, shard, f.Path, tensor)
		}
		m.where[tensor] = f
	}
	return nil
}

// readIndex parses a sharded model's index: its weight map, its shards in name order, and for
// each shard the first tensor (by name) the map puts there, for messages.
func readIndex(indexPath string, data []byte) (weightMap map[string]string, shards []string, shardOf map[string]string, err error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, nil, nil, fmt.Errorf("model index %s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, nil, fmt.Errorf("model index %s: weight_map is missing or empty", indexPath)
	}
	shardOf = map[string]string{}
	for tensor, shard := range idx.WeightMap {
		// A shard name escaping the folder would let an index read arbitrary files.
		if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
			return nil, nil, nil, fmt.Errorf("model index %s: tensor %s: shard name %q is not a plain file name", indexPath, tensor, shard)
		}
		if prev, ok := shardOf[shard]; !ok || tensor < prev {
			shardOf[shard] = tensor
		}
	}
	shards = make([]string, 0, len(shardOf))
	for s := range shardOf {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	return idx.WeightMap, shards, shardOf, nil
}

// Names lists every tensor of the model in sorted order.
func (m *Model) Names() []string { return slices.Clone(m.names) }

// Has reports whether the model holds a tensor called name.
func (m *Model) Has(name string) bool { _, ok := m.where[name]; return ok }

// Tensor returns the named tensor, or an error wrapping ErrNoTensor.
func (m *Model) Tensor(name string) (*Tensor, error) {
	f, ok := m.where[name]
	if !ok {
		if len(m.Files) == 1 {
			return nil, fmt.Errorf("model %s: file %s has no tensor %s: %w", m.Dir, m.Files[0].Path, name, ErrNoTensor)
		}
		return nil, fmt.Errorf("model %s: no shard has tensor %s: %w", m.Dir, name, ErrNoTensor)
	}
	return f.Tensor(name)
}

// Close unmaps every file; all tensor views from the model become invalid.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.Files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// F32 returns the named tensor as float32 after checking its shape (see Tensor.F32 for when the
// result is a read-only view of the mapping).
func (m *Model) F32(name string, shape ...int) ([]float32, error) {
	t, err := m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if err := t.Expect(shape...); err != nil {
		return nil, err
	}
	return t.F32()
}

// BF16 returns the named tensor as bf16 bit patterns after checking its shape (see Tensor.BF16
// for when the result is a read-only view of the mapping).
func (m *Model) BF16(name string, shape ...int) ([]uint16, error) {
	t, err := m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if err := t.Expect(shape...); err != nil {
		return nil, err
	}
	return t.BF16()
}
