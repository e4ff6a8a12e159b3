package gguf

import (
	"errors"
	"fmt"
	"math"
)

// Errors of the metadata accessors, wrapped with the key and the type found.
var (
	ErrMissing = errors.New("metadata key not present")
	ErrType    = errors.New("metadata value of the wrong type")
)

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// Metadata is a file's key-value section, in file order, with lookup by key.
type Metadata struct {
	kvs   []KV
	index map[string]int
}

// NewMetadata builds metadata from pairs (the writer's input); a repeated key is refused
// because the format identifies a value by its key.
func NewMetadata(kvs []KV) (*Metadata, error) {
	m := &Metadata{kvs: kvs, index: make(map[string]int, len(kvs))}
	for i, kv := range kvs {
		if _, dup := m.index[kv.Key]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", kv.Key)
		}
		m.index[kv.Key] = i
	}
	return m, nil
}

// KVs is every pair in file order; the slice must not be modified.
func (m *Metadata) KVs() []KV { return m.kvs }

// Len is the number of pairs.
func (m *Metadata) Len() int { return len(m.kvs) }

// Lookup is the value of key, if present.
func (m *Metadata) Lookup(key string) (Value, bool) {
	i, ok := m.index[key]
	if !ok {
		return Value{}, false
	}
	return m.kvs[i].Value, true
}

// Has reports whether key is present.
func (m *Metadata) Has(key string) bool { _, ok := m.index[key]; return ok }

func (m *Metadata) get(key string) (Value, error) {
	v, ok := m.Lookup(key)
	if !ok {
		return Value{}, fmt.Errorf("metadata %q: %w", key, ErrMissing)
	}
	return v, nil
}

func typeErr(key string, v Value, want string) error {
	return fmt.Errorf("metadata %q: %w: found %s, want %s", key, ErrType, v.kind(), want)
}

// String is the string value of key.
func (m *Metadata) String(key string) (string, error) {
	v, err := m.get(key)
	if err != nil {
		return "", err
	}
	if v.typ != TypeString {
		return "", typeErr(key, v, "string")
	}
	return v.str, nil
}

// Uint is the value of key as an unsigned integer; any integer type is accepted as long as the
// value is not negative, since writers store the same count as uint32, int32 or uint64.
func (m *Metadata) Uint(key string) (uint64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.uintValue()
	if !ok {
		if v.typ.signed() {
			return 0, fmt.Errorf("metadata %q: %w: found negative %s %d, want an unsigned integer", key, ErrType, v.typ, int64(v.bits))
		}
		return 0, typeErr(key, v, "an unsigned integer")
	}
	return u, nil
}

// Int is the value of key as a signed integer, of any integer type that fits in an int64.
func (m *Metadata) Int(key string) (int64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.intValue()
	if !ok {
		return 0, typeErr(key, v, "an integer")
	}
	return i, nil
}

// Float is the value of key as a float64, from a float32 (exactly) or a float64.
func (m *Metadata) Float(key string) (float64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	switch v.typ {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), nil
	case TypeFloat64:
		return math.Float64frombits(v.bits), nil
	}
	return 0, typeErr(key, v, "a float")
}

// Bool is the boolean value of key.
func (m *Metadata) Bool(key string) (bool, error) {
	v, err := m.get(key)
	if err != nil {
		return false, err
	}
	if v.typ != TypeBool {
		return false, typeErr(key, v, "bool")
	}
	return v.bits != 0, nil
}

// Strings is the array of strings of key; the slice must not be modified.
func (m *Metadata) Strings(key string) ([]string, error) {
	v, err := m.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Any().([]string)
	if v.typ != TypeArray || !ok {
		return nil, typeErr(key, v, "array of string")
	}
	return s, nil
}

// Ints is the array of key as int64s, from an array of any integer type whose values fit.
func (m *Metadata) Ints(key string) ([]int64, error) {
	v, err := m.get(key)
	if err != nil {
		return nil, err
	}
	if v.typ != TypeArray || !(v.arr.elem.signed() || v.arr.elem.unsigned()) {
		return nil, typeErr(key, v, "array of integers")
	}
	out := make([]int64, v.Len())
	for i := range out {
		var x int64
		switch s := v.arr.vals.(type) {
		case []uint8:
			x = int64(s[i])
		case []int8:
			x = int64(s[i])
		case []uint16:
			x = int64(s[i])
		case []int16:
			x = int64(s[i])
		case []uint32:
			x = int64(s[i])
		case []int32:
			x = int64(s[i])
		case []int64:
			x = s[i]
		case []uint64:
			if s[i] > math.MaxInt64 {
				return nil, fmt.Errorf("metadata %q: element %d = %d does not fit an int64", key, i, s[i])
			}
			x = int64(s[i])
		}
		out[i] = x
	}
	return out, nil
}

// Float32s is the array of key as float32s, from an array of float32 (shared, must not be
// modified) or float64 (converted).
func (m *Metadata) Float32s(key string) ([]float32, error) {
	v, err := m.get(key)
	if err != nil {
		return nil, err
	}
	switch s := v.Any().(type) {
	case []float32:
		return s, nil
	case []float64:
		out := make([]float32, len(s))
		for i, x := range s {
			out[i] = float32(x)
		}
		return out, nil
	}
	return nil, typeErr(key, v, "array of float32")
}
