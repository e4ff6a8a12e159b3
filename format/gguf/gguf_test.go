package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dflash/dflash/kernel/quant"
)

// raw assembles a file byte by byte, independently of the writer, so the tests can state the
// format itself and corrupt any field; each method returns the offset it wrote at.
type raw struct{ b []byte }

func (r *raw) at() int { return len(r.b) }
func (r *raw) bytes(p ...byte) int {
	o := r.at()
	r.b = append(r.b, p...)
	return o
}
func (r *raw) u32(v uint32) int {
	o := r.at()
	r.b = binary.LittleEndian.AppendUint32(r.b, v)
	return o
}
func (r *raw) u64(v uint64) int {
	o := r.at()
	r.b = binary.LittleEndian.AppendUint64(r.b, v)
	return o
}
func (r *raw) str(s string) int { o := r.u64(uint64(len(s))); r.b = append(r.b, s...); return o }
func (r *raw) pad(a int) {
	for len(r.b)%a != 0 {
		r.b = append(r.b, 0)
	}
}

// header writes magic, version and counts.
func (r *raw) header(version uint32, tensors, kvs uint64) {
	r.bytes('G', 'G', 'U', 'F')
	r.u32(version)
	r.u64(tensors)
	r.u64(kvs)
}

// tensor writes one tensor info and returns the offsets of its dimension count, type and data
// offset fields.
func (r *raw) tensor(name string, typ quant.Type, off uint64, shape ...uint64) (dimsAt, typAt, offAt int) {
	r.str(name)
	dimsAt = r.u32(uint32(len(shape)))
	for _, d := range shape {
		r.u64(d)
	}
	typAt = r.u32(uint32(typ))
	offAt = r.u64(off)
	return
}

// smallFile is the file the writer test expects byte for byte: version 3, one string and one
// uint32 of metadata, tensors "a" (F32 [3]) and "b" (Q8_0 [32 2]), default alignment 32.
func smallFile() (file []byte, a, b []byte) {
	a = make([]byte, 12)
	for i := range a {
		a[i] = byte(i + 1)
	}
	b = make([]byte, 68)
	for i := range b {
		b[i] = byte(100 + i)
	}
	var r raw
	r.header(3, 2, 2)
	r.str("general.architecture")
	r.u32(uint32(TypeString))
	r.str("llama")
	r.str("llama.block_count")
	r.u32(uint32(TypeUint32))
	r.u32(5)
	r.tensor("a", quant.F32, 0, 3)
	r.tensor("b", quant.Q8_0, 32, 32, 2) // a's 12 bytes padded to 32
	r.pad(32)
	r.bytes(a...)
	r.pad(32)
	r.bytes(b...)
	r.pad(32)
	return r.b, a, b
}

func TestWriteMatchesTheFormat(t *testing.T) {
	want, a, b := smallFile()
	var buf bytes.Buffer
	err := Write(&buf, []KV{{"general.architecture", String("llama")}, {"llama.block_count", Uint32(5)}},
		[]WriteTensor{{"a", quant.F32, []uint64{3}, a}, {"b", quant.Q8_0, []uint64{32, 2}, b}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("written file differs from the hand-assembled one:\n got % x\nwant % x", buf.Bytes(), want)
	}
	f, err := Parse("small", want)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 32 || f.DataOffset != int64(len(want)-128) {
		t.Errorf("version %d alignment %d data at %d", f.Version, f.Alignment, f.DataOffset)
	}
	if got, _ := f.Data("a"); !bytes.Equal(got, a) {
		t.Errorf("a = % x", got)
	}
	if got, _ := f.Data("b"); !bytes.Equal(got, b) {
		t.Errorf("b = % x", got)
	}
	if info, _ := f.Tensor("b"); info.Size != 68 || info.Offset != 32 || info.Type != quant.Q8_0 {
		t.Errorf("b's info: %+v", info)
	}
}

// everyValue is metadata of every value type, arrays of each element type, nested arrays
// and the corner values of each.
func everyValue() []KV {
	return []KV{
		{"general.architecture", String("qwen3")},
		{"t.u8", Uint8(255)}, {"t.i8", Int8(-128)}, {"t.u16", Uint16(65535)}, {"t.i16", Int16(-32768)},
		{"t.u32", Uint32(math.MaxUint32)}, {"t.i32", Int32(math.MinInt32)},
		{"t.u64", Uint64(math.MaxUint64)}, {"t.i64", Int64(math.MinInt64)},
		{"t.f32", Float32(-1.5e-7)}, {"t.f64", Float64(math.Pi)}, {"t.true", Bool(true)}, {"t.false", Bool(false)},
		{"t.empty_string", String("")}, {"t.utf8", String("héllo, 世界\x00")},
		{"t.a_u8", Array([]uint8{0, 1, 255})}, {"t.a_i8", Array([]int8{-1, 127})},
		{"t.a_u16", Array([]uint16{7})}, {"t.a_i16", Array([]int16{-7, 7})},
		{"t.a_u32", Array([]uint32{1, 2, 3})}, {"t.a_i32", Array([]int32{-3, 0, 3})},
		{"t.a_u64", Array([]uint64{math.MaxUint64})}, {"t.a_i64", Array([]int64{math.MinInt64, 5})},
		{"t.a_f32", Array([]float32{0.5, float32(math.Inf(-1))})}, {"t.a_f64", Array([]float64{-0.25})},
		{"t.a_bool", Array([]bool{true, false, true})}, {"t.a_string", Array([]string{"a", "", "ccc"})},
		{"t.a_empty", Array([]int32{})},
		{"t.a_nested", Arrays(Array([]string{"x", "y"}), Array([]uint8{9}), Arrays(Array([]bool{true})))},
		{KeyAlignment, Uint32(64)},
	}
}

func TestRoundTrip(t *testing.T) {
	kvs := everyValue()
	x := make([]float32, 2*256)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * 0.1
	}
	var tensors []WriteTensor
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		data, err := quant.Quantize(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, WriteTensor{"w." + typ.String(), typ, []uint64{256, 2}, data})
	}
	tensors = append(tensors, WriteTensor{"empty", quant.F32, []uint64{0}, nil},
		WriteTensor{"scalar", quant.F32, nil, []byte{0, 0, 0x80, 0x3f}})
	path := filepath.Join(t.TempDir(), "rt.gguf")
	if err := WriteFile(path, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !reflect.DeepEqual(f.Metadata.KVs(), kvs) {
		for i, kv := range f.Metadata.KVs() {
			if !reflect.DeepEqual(kv, kvs[i]) {
				t.Errorf("metadata %d: read %s = %v, wrote %s = %v", i, kv.Key, kv.Value, kvs[i].Key, kvs[i].Value)
			}
		}
		t.Fatal("metadata differs")
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("alignment %d, data at %d", f.Alignment, f.DataOffset)
	}
	if len(f.Tensors()) != len(tensors) {
		t.Fatalf("%d tensors, wrote %d", len(f.Tensors()), len(tensors))
	}
	for i, w := range tensors {
		info := f.Tensors()[i]
		if info.Name != w.Name || info.Type != w.Type || !reflect.DeepEqual(info.Shape, w.Shape) || info.Offset%64 != 0 {
			t.Errorf("tensor %d: %+v, wrote %s %s %v", i, info, w.Name, w.Type, w.Shape)
		}
		got, err := f.Data(w.Name)
		if err != nil || !bytes.Equal(got, w.Data) {
			t.Errorf("%s: data differs (%v)", w.Name, err)
		}
		v, err := f.F32(w.Name)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		want := make([]float32, info.Elements())
		if err := quant.Dequantize(w.Type, w.Data, want); err != nil || !reflect.DeepEqual(v, want) {
			t.Errorf("%s: F32 differs from quant.Dequantize (%v)", w.Name, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Data("w.F32"); err == nil {
		t.Error("Data after Close succeeded")
	}
}

// fail parses data and checks that the error is a FormatError at offset at whose message holds
// each of the phrases.
func fail(t *testing.T, data []byte, at int, phrases ...string) {
	t.Helper()
	_, err := Parse("bad", data)
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("want a FormatError at %d mentioning %q, got %v", at, phrases, err)
	}
	if fe.Offset != int64(at) {
		t.Errorf("error %q at offset %d, want %d", err, fe.Offset, at)
	}
	for _, p := range phrases {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestMalformedHeader(t *testing.T) {
	good, _, _ := smallFile()
	mutate := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	t.Run("bad magic", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { copy(b, "GGML") }), 0, "bad magic", `"GGML"`)
	})
	t.Run("version 1", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { b[4] = 1 }), 4, "version 1")
	})
	t.Run("version 4", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { b[4] = 4 }), 4, "unsupported version 4")
	})
	t.Run("big-endian", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { binary.BigEndian.PutUint32(b[4:], 3) }), 4, "big-endian")
	})
	t.Run("absurd tensor count", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 1<<40) }), 8, "tensor count")
	})
	t.Run("absurd metadata count", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[16:], math.MaxUint64) }), 16, "metadata count")
	})
	t.Run("absurd key length", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 1<<50) }), 24, "metadata 0 key length", "past the end")
	})
	t.Run("unknown value type", func(t *testing.T) {
		// The first key "general.architecture" (20 bytes) ends at 24+8+20 = 52, its type follows.
		fail(t, mutate(func(b []byte) { b[52] = 13 }), 52, "unknown value type 13")
	})
	t.Run("absurd value length", func(t *testing.T) {
		fail(t, mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[56:], 1<<62) }), 56, `value of metadata "general.architecture" length`)
	})
}

func TestTruncatedEverywhere(t *testing.T) {
	// Every proper prefix of a valid file is refused with an offset within it: cutting inside
	// the header or metadata is "truncated", inside the data a tensor "runs past the end".
	good, _, _ := smallFile()
	for n := 0; n < len(good)-31; n++ { // the last 31 bytes are b's trailing padding
		_, err := Parse("cut", good[:n])
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
		if fe.Offset < 0 || fe.Offset > int64(n) && !strings.Contains(fe.Msg, "past the end") {
			t.Errorf("prefix of %d bytes: error at offset %d: %v", n, fe.Offset, err)
		}
		if n < 180 && !strings.Contains(fe.Msg, "truncated") && !strings.Contains(fe.Msg, "past the end") && !strings.Contains(fe.Msg, "count") {
			t.Errorf("prefix of %d bytes: %v", n, err)
		}
	}
}

// tensorFile builds a file with the given tensor infos (name, type, offset, shape) and
// dataLen bytes of data, alignment 32, and returns it with the offsets of each info's fields.
type tinfo struct {
	name  string
	typ   quant.Type
	off   uint64
	shape []uint64
}

func tensorFile(dataLen int, kvs func(r *raw) int, ts ...tinfo) (b []byte, dims, typs, offs []int) {
	var r raw
	nkv := 0
	r.header(3, uint64(len(ts)), 0)
	if kvs != nil {
		nkv = kvs(&r)
		binary.LittleEndian.PutUint64(r.b[16:], uint64(nkv))
	}
	for _, t := range ts {
		d, ty, o := r.tensor(t.name, t.typ, t.off, t.shape...)
		dims, typs, offs = append(dims, d), append(typs, ty), append(offs, o)
	}
	r.pad(32)
	r.b = append(r.b, make([]byte, dataLen)...)
	return r.b, dims, typs, offs
}

func TestMalformedTensors(t *testing.T) {
	t.Run("data past the end", func(t *testing.T) {
		// [64]f32 is 256 bytes; the file has 255 of data.
		b, _, _, offs := tensorFile(255, nil, tinfo{"w", quant.F32, 0, []uint64{64}})
		fail(t, b, offs[0], `tensor "w"`, "[0, 256)", "past the end")
	})
	t.Run("offset past the end", func(t *testing.T) {
		b, _, _, offs := tensorFile(64, nil, tinfo{"w", quant.F32, 1 << 40, []uint64{8}})
		fail(t, b, offs[0], `tensor "w"`, "past the end")
	})
	t.Run("misaligned offset", func(t *testing.T) {
		b, _, _, offs := tensorFile(64, nil, tinfo{"w", quant.F32, 16, []uint64{4}})
		fail(t, b, offs[0], "data offset 16", "alignment 32")
	})
	t.Run("overlap", func(t *testing.T) {
		// a covers [0, 64), b starts at 32.
		b, _, _, offs := tensorFile(128, nil, tinfo{"a", quant.F32, 0, []uint64{16}}, tinfo{"b", quant.F32, 32, []uint64{4}})
		fail(t, b, offs[1], `tensor "b"`, "overlaps", `"a"`)
	})
	t.Run("unknown type", func(t *testing.T) {
		b, _, typs, _ := tensorFile(64, nil, tinfo{"w", quant.Type(44), 0, []uint64{4}})
		fail(t, b, typs[0], `tensor "w"`, "unknown ggml type 44")
	})
	t.Run("removed type", func(t *testing.T) {
		b, _, typs, _ := tensorFile(64, nil, tinfo{"w", quant.Type(4), 0, []uint64{32}})
		fail(t, b, typs[0], "unknown ggml type 4")
	})
	t.Run("shape not a multiple of the block", func(t *testing.T) {
		// Q4_K blocks are 256 wide; a row of 128 cannot be stored.
		b, dims, _, _ := tensorFile(1024, nil, tinfo{"w", quant.Q4_K, 0, []uint64{128, 4}})
		fail(t, b, dims[0], "first dimension 128", "Q4_K", "block size 256")
	})
	t.Run("too many dimensions", func(t *testing.T) {
		b, dims, _, _ := tensorFile(64, nil, tinfo{"w", quant.F32, 0, []uint64{1, 1, 1, 1, 1}})
		fail(t, b, dims[0], "5 dimensions")
	})
	t.Run("element count overflow", func(t *testing.T) {
		b, dims, _, _ := tensorFile(64, nil, tinfo{"w", quant.F32, 0, []uint64{1 << 32, 1 << 32}})
		fail(t, b, dims[0], "2^63 elements")
	})
	t.Run("duplicate name", func(t *testing.T) {
		b, _, _, offs := tensorFile(64, nil, tinfo{"w", quant.F32, 0, []uint64{4}}, tinfo{"w", quant.F32, 32, []uint64{4}})
		fail(t, b, offs[1], `"w" appears twice`)
	})
	t.Run("name too long", func(t *testing.T) {
		b, _, _, _ := tensorFile(64, nil, tinfo{strings.Repeat("n", 65), quant.F32, 0, []uint64{4}})
		fail(t, b, 24, "tensor 0 name length 65", "limit of 64")
	})
	t.Run("alignment not a power of two", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(64, func(r *raw) int {
			r.str(KeyAlignment)
			r.u32(uint32(TypeUint32))
			at = r.u32(48)
			return 1
		})
		fail(t, b, at, "general.alignment = 48", "power of two")
	})
	t.Run("alignment of the wrong type", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(64, func(r *raw) int {
			r.str(KeyAlignment)
			r.u32(uint32(TypeUint64))
			at = r.u64(32)
			return 1
		})
		fail(t, b, at, "general.alignment is uint64", "want uint32")
	})
	t.Run("bool not 0 or 1", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(0, func(r *raw) int {
			r.str("x.flag")
			r.u32(uint32(TypeBool))
			at = r.bytes(2)
			return 1
		})
		fail(t, b, at, `"x.flag"`, "bool byte 2")
	})
	t.Run("duplicate key", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(0, func(r *raw) int {
			r.str("x.a")
			r.u32(uint32(TypeUint8))
			r.bytes(1)
			at = r.str("x.a")
			r.u32(uint32(TypeUint8))
			r.bytes(2)
			return 2
		})
		fail(t, b, at, `"x.a" appears twice`)
	})
	t.Run("absurd array length", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(0, func(r *raw) int {
			r.str("x.tokens")
			r.u32(uint32(TypeArray))
			r.u32(uint32(TypeString))
			at = r.u64(1 << 40)
			return 1
		})
		fail(t, b, at, "array of 1099511627776 string", "needs at least 8 bytes each")
	})
	t.Run("arrays nested too deep", func(t *testing.T) {
		var at int
		b, _, _, _ := tensorFile(0, func(r *raw) int {
			r.str("x.deep")
			r.u32(uint32(TypeArray))
			for i := 0; i < maxArrayDepth; i++ {
				r.u32(uint32(TypeArray))
				r.u64(1)
			}
			at = r.at()
			r.u32(uint32(TypeUint8))
			r.u64(0)
			return 1
		})
		fail(t, b, at, "nested deeper")
	})
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Error("missing file opened")
	}
	p := filepath.Join(dir, "empty.gguf")
	os.WriteFile(p, nil, 0o644)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "truncated magic") {
		t.Errorf("empty file: %v", err)
	}
}

func TestWriterRefusals(t *testing.T) {
	var buf bytes.Buffer
	cases := []struct {
		name string
		kvs  []KV
		ts   []WriteTensor
		want string
	}{
		{"duplicate key", []KV{{"a.b", Uint8(1)}, {"a.b", Uint8(2)}}, nil, "appears twice"},
		{"empty key", []KV{{"", Uint8(1)}}, nil, "metadata key"},
		{"bad alignment", []KV{{KeyAlignment, Uint32(24)}}, nil, "power of two"},
		{"alignment as uint64", []KV{{KeyAlignment, Uint64(32)}}, nil, "uint32 power of two"},
		{"nested non-array", []KV{{"a.b", Arrays(Uint8(1))}}, nil, "array of arrays"},
		{"duplicate tensor", nil, []WriteTensor{{"w", quant.F32, []uint64{1}, make([]byte, 4)}, {"w", quant.F32, []uint64{1}, make([]byte, 4)}}, "appears twice"},
		{"long name", nil, []WriteTensor{{strings.Repeat("n", 64), quant.F32, []uint64{1}, make([]byte, 4)}}, "want 1 to 63 bytes"},
		{"block multiple", nil, []WriteTensor{{"w", quant.Q8_0, []uint64{16}, make([]byte, 17)}}, "block size 32"},
		{"unknown type", nil, []WriteTensor{{"w", quant.Type(5), []uint64{1}, nil}}, "unknown ggml type 5"},
		{"short data", nil, []WriteTensor{{"w", quant.F32, []uint64{2}, make([]byte, 4)}}, "4 bytes of data, want 8"},
	}
	for _, c := range cases {
		if err := Write(&buf, c.kvs, c.ts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
	w, err := NewWriter(&buf, nil, []TensorInfo{{Name: "w", Type: quant.F32, Shape: []uint64{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `"w" has no data`) {
		t.Errorf("Close before the data: %v", err)
	}
}
