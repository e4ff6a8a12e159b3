package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// rawFile builds a file image from a literal header and data region, so tests can lie freely.
func rawFile(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func writeRaw(t *testing.T, header string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, rawFile(header, data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	f32 := []float32{1, -2.5, 3.25, 0, float32(math.Inf(1)), 1e-3}
	// bf16 patterns: 1.0 = 0x3f80, -2.0 = 0xc000, 0.5 = 0x3f00
	bf := []uint16{0x3f80, 0xc000, 0x3f00, 0x0000}
	// f16 patterns: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff (max), 2^-24 = 0x0001 (min subnormal)
	hf := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001}
	in := []WriteTensor{
		{Name: "a.weight", DType: F32, Shape: []int{2, 3}, Data: F32Bytes(f32)},
		{Name: "b", DType: BF16, Shape: []int{4}, Data: BF16Bytes(bf)},
		{Name: "c", DType: F16, Shape: []int{2, 2}, Data: F16Bytes(hf)},
		{Name: "empty", DType: F32, Shape: []int{0, 5}, Data: nil},
		{Name: "ids", DType: I64, Shape: []int{1}, Data: make([]byte, 8)},
	}
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(p, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v, want format=pt", f.Metadata)
	}
	if got, want := f.Names(), []string{"a.weight", "b", "c", "empty", "ids"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	a, err := f.Tensor("a.weight")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Expect(2, 3); err != nil {
		t.Error(err)
	}
	got, err := a.F32()
	if err != nil || !slices.Equal(got, f32) {
		t.Errorf("F32 = %v, %v; want %v", got, err, f32)
	}
	// The file was written with an 8-aligned header, so F32 must be a view of the mapping.
	if &got[0] != (*float32)(unsafePointer(a.Data)) {
		t.Error("F32 of an aligned F32 tensor copied instead of viewing the mapping")
	}
	b, _ := f.Tensor("b")
	bv, err := b.BF16()
	if err != nil || !slices.Equal(bv, bf) {
		t.Errorf("BF16 = %v, %v; want %v", bv, err, bf)
	}
	bf32, _ := b.F32()
	if want := []float32{1, -2, 0.5, 0}; !slices.Equal(bf32, want) {
		t.Errorf("BF16->F32 = %v, want %v", bf32, want)
	}
	c, _ := f.Tensor("c")
	cf, err := c.F32()
	if want := []float32{1, -2, 65504, 1.0 / (1 << 24)}; err != nil || !slices.Equal(cf, want) {
		t.Errorf("F16->F32 = %v, %v; want %v", cf, err, want)
	}
	// F16 -> BF16: 65504 = 0x477fe000 in f32 rounds (mantissa bits 0xe000 > half) up to 0x4780 = 65536.
	cb, _ := c.BF16()
	if want := []uint16{0x3f80, 0xc000, 0x4780, 0x3380}; !slices.Equal(cb, want) {
		t.Errorf("F16->BF16 = %#x, want %#x", cb, want)
	}
	// F32 -> BF16 of 1e-3 (0x3a83126f): low half 0x126f < 0x8000 rounds down to 0x3a83.
	ab, _ := a.BF16()
	if ab[5] != 0x3a83 || ab[4] != 0x7f80 {
		t.Errorf("F32->BF16 = %#x, want [5]=0x3a83 [4]=0x7f80", ab)
	}
	e, _ := f.Tensor("empty")
	if e.Elements() != 0 {
		t.Errorf("empty has %d elements", e.Elements())
	}
	if ev, err := e.F32(); err != nil || len(ev) != 0 {
		t.Errorf("empty F32 = %v, %v", ev, err)
	}
	ids, _ := f.Tensor("ids")
	if _, err := ids.F32(); !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), "I64") {
		t.Errorf("F32 of I64: err %v, want unsupported dtype naming I64", err)
	}
	if _, err := ids.BF16(); !errors.Is(err, ErrUnsupportedDType) {
		t.Errorf("BF16 of I64: err %v, want unsupported dtype", err)
	}
}

func TestMissingTensorAndExpect(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(p, []WriteTensor{{Name: "w", DType: F32, Shape: []int{2, 2}, Data: make([]byte, 16)}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Tensor("nope")
	if !errors.Is(err, ErrNoTensor) || !strings.Contains(err.Error(), "file "+p+" has no tensor nope") {
		t.Errorf("missing tensor error %q", err)
	}
	w, _ := f.Tensor("w")
	err = w.Expect(4, 2)
	if !errors.Is(err, ErrShape) {
		t.Fatalf("Expect error %v, want ErrShape", err)
	}
	for _, part := range []string{p, "tensor w", "[2 2]", "expected [4 2]"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("Expect error %q lacks %q", err, part)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	d16 := make([]byte, 16)
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, 1<<40)
	beyond := make([]byte, 8, 20)
	binary.LittleEndian.PutUint64(beyond, 100)
	beyond = append(beyond, "{}{}"...)
	cases := []struct {
		name  string
		image []byte
		want  string // substring of the error
	}{
		{"empty file", nil, "shorter than the 8-byte header length"},
		{"header beyond file", beyond, "header length 100 runs past the end"},
		{"absurd header length", huge, "exceeds the 100000000-byte limit"},
		{"malformed json", rawFile(`{"a":`, nil), "header JSON"},
		{"json not object", rawFile(`[1,2]`, nil), "header JSON"},
		{"null header", rawFile(`null`, nil), "null"},
		{"unknown dtype", rawFile(`{"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, d16), `tensor "w": unknown dtype "Q4"`},
		{"missing dtype", rawFile(`{"w":{"shape":[1],"data_offsets":[0,4]}}`, d16), "missing dtype"},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,4]}}`, d16), "missing shape"},
		{"missing offsets", rawFile(`{"w":{"dtype":"F32","shape":[1]}}`, d16), "missing data_offsets"},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}}`, d16), "negative dimension -1"},
		{"fractional dim", rawFile(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, d16), `tensor "w": entry JSON`},
		{"begin > end", rawFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}}`, d16), "begin 8 > end 4"},
		{"negative offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, d16), "negative"},
		{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, d16), "exactly [begin, end]"},
		{"size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, d16), "hold 12 bytes but dtype F32 x shape [2 2] needs 16"},
		{"truncated data", rawFile(`{"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}`, d16), "run past the 16-byte data region"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, d16), `tensor "b" bytes [4,12) overlap tensor "a"`},
		{"overflowing shape", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, d16), "overflows"},
		{"bad metadata", rawFile(`{"__metadata__":{"n":1}}`, nil), "__metadata__ must map strings to strings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.safetensors")
			if err := os.WriteFile(p, c.image, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("Open succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q, want it to name %s and contain %q", err, p, c.want)
			}
			// Reading the header alone refuses the file with the same words.
			if _, herr := ReadHeader(p); herr == nil || herr.Error() != err.Error() {
				t.Errorf("ReadHeader: %v; want Open's error %q", herr, err)
			}
		})
	}
}

func TestTruncatedWrittenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(p, []WriteTensor{{Name: "w", DType: F32, Shape: []int{4}, Data: make([]byte, 16)}}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if err := os.Truncate(p, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(p)
	if err == nil || !strings.Contains(err.Error(), `tensor "w"`) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated file error %v, want one naming tensor w and truncation", err)
	}
	if _, err := ReadHeader(p); err == nil || !strings.Contains(err.Error(), `tensor "w"`) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("ReadHeader of a truncated file: %v, want an error naming tensor w and truncation", err)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		ts   []WriteTensor
		want string
	}{
		{"length", []WriteTensor{{Name: "w", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}}, "8 data bytes, but dtype F32 x shape [3] needs 12"},
		{"dup", []WriteTensor{{Name: "w", DType: U8, Shape: []int{1}, Data: []byte{1}}, {Name: "w", DType: U8, Shape: []int{1}, Data: []byte{1}}}, "given twice"},
		{"dtype", []WriteTensor{{Name: "w", DType: "X", Shape: []int{1}, Data: []byte{1}}}, "unknown dtype"},
		{"negative", []WriteTensor{{Name: "w", DType: U8, Shape: []int{-1}}}, "negative dimension"},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: U8, Shape: []int{1}, Data: []byte{1}}}, "invalid tensor name"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name+".safetensors")
		err := Write(p, c.ts, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: a failed Write left %s behind", c.name, p)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed writes left files: %v", ents)
	}
}

func TestConversions(t *testing.T) {
	bfCases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{float32(math.Copysign(0, -1)), 0x8000},
		// 1 + 2^-8 is exactly halfway between bf16 1.0 (0x3f80) and 1+2^-7 (0x3f81): ties to even 0x3f80.
		{1 + 1.0/256, 0x3f80},
		// 1 + 3*2^-8 is halfway between 0x3f81 and 0x3f82: ties to even 0x3f82.
		{1 + 3.0/256, 0x3f82},
		// just above the tie rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{float32(math.Inf(-1)), 0xff80},
		// the largest finite f32 rounds to +Inf in bf16
		{math.MaxFloat32, 0x7f80},
	}
	for _, c := range bfCases {
		if got := BF16FromF32(c.in); got != c.want {
			t.Errorf("BF16FromF32(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := BF16FromF32(float32(math.NaN())); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("BF16FromF32(NaN) = %#04x, not a NaN", got)
	}
	h16 := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00},                      // halfway to 65536 (beyond max) ties up to Inf
		{1.0 / (1 << 24), 0x0001},            // smallest subnormal
		{1.0 / (1 << 25), 0x0000},            // half the smallest subnormal ties to even (0)
		{3.0 / (1 << 25), 0x0002},            // 1.5 units ties to even 2
		{1.0 / (1 << 14), 0x0400},            // smallest normal
		{1 + 1.0/2048, 0x3c00},               // halfway between 1 and 1+2^-10: tie to even
		{1 + 3.0/2048, 0x3c02},               // halfway between 1+2^-10 and 1+2^-9: tie to even
		{float32(math.Inf(1)), 0x7c00},       // inf stays inf
		{-1.0 / (1 << 30), 0x8000},           // underflow keeps sign
		{(1 - 1.0/2048) / (1 << 14), 0x0400}, // rounds up into the smallest normal
	}
	for _, c := range h16 {
		if got := F16FromF32(c.in); got != c.want {
			t.Errorf("F16FromF32(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// Every finite f16 widens and narrows back to itself.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN payloads are not preserved bit for bit
		}
		if got := F16FromF32(F32FromF16(uint16(h))); got != uint16(h) {
			t.Fatalf("f16 %#04x -> %g -> %#04x", h, F32FromF16(uint16(h)), got)
		}
	}
}

func TestShardedModel(t *testing.T) {
	dir := t.TempDir()
	w := func(name string, ts ...WriteTensor) {
		if err := Write(filepath.Join(dir, name), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	w("model-00001-of-00002.safetensors",
		WriteTensor{Name: "embed", DType: F32, Shape: []int{2}, Data: F32Bytes([]float32{1, 2})},
		WriteTensor{Name: "stray", DType: F32, Shape: []int{1}, Data: F32Bytes([]float32{9})})
	w("model-00002-of-00002.safetensors",
		WriteTensor{Name: "head", DType: BF16, Shape: []int{1}, Data: BF16Bytes([]uint16{0x4000})})
	index := `{"metadata":{"total_size":10},"weight_map":{"embed":"model-00001-of-00002.safetensors","head":"model-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Files) != 2 {
		t.Errorf("opened %d files, want 2", len(m.Files))
	}
	// The index is the authority: "stray" sits in a shard but is not listed.
	if got := m.Names(); !slices.Equal(got, []string{"embed", "head"}) {
		t.Errorf("names %v", got)
	}
	if !m.Has("head") || m.Has("stray") {
		t.Error("Has disagrees with the index")
	}
	if _, err := m.F32("embed", 3); !errors.Is(err, ErrShape) {
		t.Errorf("Model.F32 with a wrong shape: %v, want ErrShape", err)
	}
	if v, err := m.BF16("embed", 2); err != nil || !slices.Equal(v, []uint16{0x3f80, 0x4000}) {
		t.Errorf("Model.BF16(embed) = %#x, %v; want [0x3f80 0x4000]", v, err)
	}
	h, err := m.Tensor("head")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := h.F32(); len(v) != 1 || v[0] != 2 {
		t.Errorf("head = %v, want [2]", v)
	}
	if _, err := m.Tensor("lm_head"); !errors.Is(err, ErrNoTensor) {
		t.Errorf("missing tensor: %v", err)
	}
	// The headers alone describe the same tensors, with the shard that holds each.
	mh, err := ReadModelHeader(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := mh.Names(); !slices.Equal(got, m.Names()) {
		t.Errorf("ReadModelHeader names %v, OpenModel's %v", got, m.Names())
	}
	for _, n := range m.Names() {
		tn, _ := m.Tensor(n)
		in, ok := mh.Info(n)
		if !ok || in.DType != tn.DType || !slices.Equal(in.Shape, tn.Shape) || in.File != tn.File || in.End-in.Begin != int64(len(tn.Data)) {
			t.Errorf("header of %s: %+v, %v; the opened tensor is %s %v in %s", n, in, ok, tn.DType, tn.Shape, tn.File)
		}
	}
	if _, ok := mh.Info("stray"); ok {
		t.Error("ReadModelHeader lists a tensor the index does not")
	}
}

func TestModelErrors(t *testing.T) {
	mk := func(t *testing.T, index string, shards ...string) string {
		dir := t.TempDir()
		for _, s := range shards {
			if err := Write(filepath.Join(dir, s), []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{7}}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if index != "" {
			if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	cases := []struct {
		name   string
		index  string
		shards []string
		want   string
	}{
		{"empty folder", "", nil, "neither model.safetensors nor"},
		{"missing shard", `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, []string{"s1.safetensors"}, "shard s2.safetensors (holding tensor b) is missing"},
		{"tensor not in shard", `{"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}}`, []string{"s1.safetensors"}, "says tensor zz is in shard s1.safetensors"},
		{"escaping shard", `{"weight_map":{"a":"../s1.safetensors"}}`, nil, "not a plain file name"},
		{"bad index json", `{"weight_map":`, nil, "model index"},
		{"empty weight map", `{"weight_map":{}}`, nil, "weight_map is missing or empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := mk(t, c.index, c.shards...)
			m, err := OpenModel(dir)
			if err == nil {
				m.Close()
				t.Fatalf("OpenModel succeeded, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
			if _, herr := ReadModelHeader(dir); herr == nil || herr.Error() != err.Error() {
				t.Errorf("ReadModelHeader: %v; want OpenModel's error %q", herr, err)
			}
		})
	}
}

func TestSingleFileModel(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, SingleFile), []WriteTensor{{Name: "x", DType: F32, Shape: []int{1}, Data: F32Bytes([]float32{3})}}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Tensor("y"); err == nil || !strings.Contains(err.Error(), "has no tensor y") {
		t.Errorf("missing tensor error %v", err)
	}
	x, err := m.Tensor("x")
	if err != nil || x.File != filepath.Join(dir, SingleFile) {
		t.Fatalf("x: %v, file %q", err, x.File)
	}
}

func TestUnalignedF32IsCopied(t *testing.T) {
	// A 1-byte U8 tensor first pushes the F32 tensor to an odd offset; F32 must copy correctly.
	data := append([]byte{0}, F32Bytes([]float32{1.5, -3})...)
	p := writeRaw(t, `{"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}}`, data)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, _ := f.Tensor("w")
	v, err := w.F32()
	if err != nil || !slices.Equal(v, []float32{1.5, -3}) {
		t.Errorf("unaligned F32 = %v, %v", v, err)
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func BenchmarkBF16ToF32(b *testing.B) {
	const n = 1 << 20
	src := make([]uint16, n)
	for i := range src {
		src[i] = uint16(i)
	}
	tn := &Tensor{Name: "w", DType: BF16, Shape: []int{n}, Data: BF16Bytes(src)}
	b.SetBytes(2 * n)
	for b.Loop() {
		if _, err := tn.F32(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkF32ToBF16(b *testing.B) {
	const n = 1 << 20
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i) * 1e-3
	}
	tn := &Tensor{Name: "w", DType: F32, Shape: []int{n}, Data: F32Bytes(src)}
	b.SetBytes(4 * n)
	for b.Loop() {
		if _, err := tn.BF16(); err != nil {
			b.Fatal(err)
		}
	}
}

// A header with several bad entries is refused by the same one every time (the first by name),
// not by whichever a map iteration meets first.
func TestHeaderErrorDeterministic(t *testing.T) {
	img := rawFile(`{"z":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},"m":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]},`+
		`"b":{"dtype":"F32","shape":[9],"data_offsets":[4,40]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 20))
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	// a fits; b (the first bad one by name) runs past the 20-byte data region, as z does, and
	// m has an unknown dtype.
	for range 20 {
		_, err := ReadHeader(p)
		if err == nil || !strings.Contains(err.Error(), `tensor "b": data_offsets [4,40) run past`) {
			t.Fatalf("error %v; want tensor b's, every time", err)
		}
	}
}
