package gguf

import (
	"bytes"
	"reflect"
	"testing"
)

// fuzzSeeds are valid files of each shape the parser handles (the committed corpus in
// testdata/fuzz/FuzzParse holds mutations the fuzzer found interesting).
func fuzzSeeds(f *testing.F) {
	small, _, _ := smallFile()
	f.Add(small)
	var buf bytes.Buffer
	if err := Write(&buf, everyValue(), nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	buf.Reset()
	if err := Write(&buf, qwen3KVs(), []WriteTensor{{"token_embd.weight", 0, []uint64{64, 4}, make([]byte, 1024)}}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	b, _, _, _ := tensorFile(128, nil, tinfo{"a", 12, 0, []uint64{256}}, tinfo{"b", 8, 0, []uint64{0, 7}})
	f.Add(b)
	f.Add([]byte("GGUF"))
	f.Add([]byte{})
}

// FuzzParse feeds arbitrary bytes to the parser. It must never panic, and what it accepts must
// be consistent: every tensor's data lies inside the file with the size its type and shape
// give, the fact readers return errors rather than panicking, and writing the parsed metadata
// and tensors back gives a file that parses to the same content.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		var tensors []WriteTensor
		for _, info := range file.Tensors() {
			b, err := file.Data(info.Name)
			if err != nil {
				t.Fatalf("tensor %q: %v", info.Name, err)
			}
			if uint64(len(b)) != info.Size {
				t.Fatalf("tensor %q: %d bytes, info says %d", info.Name, len(b), info.Size)
			}
			if info.Size > 0 && int64(info.Offset)+file.DataOffset+int64(info.Size) > int64(len(data)) {
				t.Fatalf("tensor %q past the end", info.Name)
			}
			if v, err := file.F32(info.Name); err == nil && uint64(len(v)) != info.Elements() {
				t.Fatalf("tensor %q: %d values for %d elements", info.Name, len(v), info.Elements())
			}
			tensors = append(tensors, WriteTensor{info.Name, info.Type, info.Shape, b})
		}
		file.Hyperparams()
		file.Tokenizer()

		if file.Alignment > 1<<12 {
			return // legal, but rewriting would write up to 2 GiB of padding
		}
		var buf bytes.Buffer
		if err := Write(&buf, file.Metadata.KVs(), tensors); err != nil {
			return // e.g. a 64-byte tensor name: legal to read, refused for llama.cpp's sake
		}
		again, err := Parse("rewritten", buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if !reflect.DeepEqual(again.Metadata.KVs(), file.Metadata.KVs()) {
			t.Fatal("rewritten metadata differs")
		}
		for i, info := range again.Tensors() {
			b, _ := again.Data(info.Name)
			if info.Name != tensors[i].Name || !bytes.Equal(b, tensors[i].Data) {
				t.Fatalf("rewritten tensor %d differs", i)
			}
		}
	})
}
