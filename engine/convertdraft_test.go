package engine

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/tokenizer"
)

// A draft folder converted to a draft GGUF: the file carries the folder's config (DFlash or
// DFlash2 told apart by it), every tensor under its folder name with matrices in the asked type
// and vectors in F32, and is described and validated as a draft of its target, named after the
// file. A file missing one tensor is refused by Validate naming that tensor, before any weight is
// read.
func TestDraftGGUFDescribedAndValidated(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := Describe(Options{Model: bin})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d1, d2 := filepath.Join(dir, "d1"), filepath.Join(dir, "d2")
	if err := dflash.WriteRandom(d1, dflash.ConfigFor(target.Config, 1, 8), 3, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	if err := dflash2.WriteRandom(d2, target.Config, dflash2.ConfigFor(target.Config, 1, 8), 4, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		folder, arch string
	}{{d1, dflash.Arch}, {d2, dflash2.Arch}} {
		out := filepath.Join(dir, filepath.Base(c.folder)+"-q8_0.gguf")
		conv, err := ConvertGGUF(c.folder, out, "q8_0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := f.Architecture(); a != dflash.GGUFArch || !f.Metadata.Has(dflash.GGUFConfigKey) {
			t.Errorf("%s: architecture %q, config key present %v", out, a, f.Metadata.Has(dflash.GGUFConfigKey))
		}
		// stories260K's width 64 takes Q8_0 blocks; ffn_down's rows of 172 fall back to F16.
		for name, want := range map[string]quant.Type{
			"fc.weight": quant.Q8_0, "layers.0.self_attn.q_proj.weight": quant.Q8_0,
			"layers.0.mlp.down_proj.weight": quant.F16, "norm.weight": quant.F32,
		} {
			if ti, ok := f.Tensor(name); !ok || ti.Type != want {
				t.Errorf("%s: %s is %v, want %v", filepath.Base(out), name, ti.Type, want)
			}
		}
		if conv.Tensors != len(f.Tensors()) {
			t.Errorf("convert reports %d tensors, the file holds %d", conv.Tensors, len(f.Tensors()))
		}
		d, err := Describe(Options{Model: bin, Drafts: []string{out}})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Drafts) != 1 || d.Drafts[0].Arch != c.arch || d.Drafts[0].Name != filepath.Base(c.folder)+"-q8_0" || d.Drafts[0].BlockSize != 8 {
			t.Errorf("described as %+v", d.Drafts)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("%s: %v", out, err)
		}

		// The same file without one of its matrices.
		const dropped = "layers.0.mlp.up_proj.weight"
		var ts []gguf.WriteTensor
		for _, ti := range f.Tensors() {
			if ti.Name == dropped {
				continue
			}
			data, err := f.Data(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, gguf.WriteTensor{Name: ti.Name, Type: ti.Type, Shape: ti.Shape, Data: data})
		}
		broken := filepath.Join(dir, "broken.gguf")
		if err := gguf.WriteFile(broken, f.Metadata.KVs(), ts); err != nil {
			t.Fatal(err)
		}
		f.Close()
		d, err = Describe(Options{Model: bin, Drafts: []string{broken}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), dropped+" is missing") {
			t.Errorf("a draft GGUF without %s validates: %v", dropped, err)
		}
	}
}

// The default target's tokenizer lower-cases its input, which llama.cpp's GGUF tokenizer keys
// cannot say: the conversion keeps the normalizer under gguf.KeyNormalizer, the file's tokenizer
// as dflash reads it back encodes text exactly as the folder's (capitals too), the one warning
// says llama.cpp ignores the key, and without the key the file would read "Once" otherwise.
// Conversions whose tokenizer needs no such key warn of nothing (convertTo checks it for every
// other test's).
func TestConvertKeepsALowercaseNormalizer(t *testing.T) {
	target, _, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "t.gguf")
	c, err := ConvertGGUF(target, out, "q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], gguf.KeyNormalizer) || !strings.Contains(c.Warnings[0], "llama.cpp") {
		t.Errorf("warnings %q, want one saying the normalizer is kept under %s, which llama.cpp ignores", c.Warnings, gguf.KeyNormalizer)
	}
	src, err := Describe(Options{Model: target})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Describe(Options{Model: out})
	if err != nil {
		t.Fatal(err)
	}
	probes := append(slices.Clone(tokenizerProbes), "ONCE upon a TIME there was a Dog.")
	for _, p := range probes {
		if a, b := back.Tok.Encode(p), src.Tok.Encode(p); !slices.Equal(a, b) {
			t.Errorf("%q: the file encodes %v, the folder %v", p, a, b)
		}
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := f.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.Normalizer, "Lowercase") {
		t.Fatalf("%s is %q, want the folder's Lowercase normalizer", gguf.KeyNormalizer, g.Normalizer)
	}
	g.Normalizer = "" // what llama.cpp sees
	plain, err := tokenizer.FromGGUF(g)
	if err != nil {
		t.Fatal(err)
	}
	if p := "Once upon a time"; slices.Equal(plain.Encode(p), src.Tok.Encode(p)) {
		t.Errorf("without %s the file still reads %q as the folder does: the test no longer tests the key", gguf.KeyNormalizer, p)
	}
}
