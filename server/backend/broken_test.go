package backend_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/server/backend"
)

// brokenModel is one class of broken model files and what refusing it must name.
type brokenModel struct {
	name  string
	spec  func(t *testing.T) backend.Spec
	wants []string // substrings of the error, besides the model's name
}

// brokenModels builds every class of broken model the server must refuse at startup, each from
// the real stories260K checkpoint or the tiny Qwen3 folder with one thing wrong.
func brokenModels() []brokenModel {
	return []brokenModel{
		{"truncated llama2.c", func(t *testing.T) backend.Spec {
			bin := storiesCopy(t)
			st, err := os.Stat(bin)
			must(t, err)
			must(t, os.Truncate(bin, st.Size()/2))
			return backend.Spec{Path: bin}
		}, []string{"truncated", "implies 1056540 bytes, file has 528270"}},
		{"random bytes llama2.c", func(t *testing.T) backend.Spec {
			bin := storiesCopy(t)
			junk := make([]byte, 1<<20)
			r := rand.New(rand.NewPCG(3, 4))
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			must(t, os.WriteFile(bin, junk, 0o644))
			return backend.Spec{Path: bin}
		}, []string{"stories260K.bin", "header"}},
		{"missing tokenizer", func(t *testing.T) backend.Spec {
			bin := storiesCopy(t)
			must(t, os.Remove(filepath.Join(filepath.Dir(bin), "tok512.bin")))
			return backend.Spec{Path: bin}
		}, []string{"no tokenizer beside"}},
		{"empty safetensors", func(t *testing.T) backend.Spec {
			dir := testmodel.Qwen3(t, "")
			must(t, os.WriteFile(filepath.Join(dir, safetensors.SingleFile), nil, 0o644))
			return backend.Spec{Path: dir}
		}, []string{"model.safetensors", "file is 0 bytes"}},
		{"truncated safetensors", func(t *testing.T) backend.Spec {
			dir := testmodel.Qwen3(t, "")
			p := filepath.Join(dir, safetensors.SingleFile)
			st, err := os.Stat(p)
			must(t, err)
			must(t, os.Truncate(p, st.Size()-100))
			// The last 100 bytes held model.norm.weight (64) and the end of
			// model.layers.1.mlp.down_proj.weight, the first of the two by name.
			return backend.Spec{Path: dir}
		}, []string{"model.safetensors", `tensor "model.layers.1.mlp.down_proj.weight"`, "truncated"}},
		{"tensor of the wrong shape", func(t *testing.T) backend.Spec {
			dir := testmodel.Qwen3(t, "")
			reshape(t, dir, map[string][]int{"model.layers.1.mlp.up_proj.weight": {16, 32}})
			return backend.Spec{Path: dir}
		}, []string{"tensor model.layers.1.mlp.up_proj.weight in model.safetensors has shape [16 32], want [32 16]"}},
		{"missing tensor", func(t *testing.T) backend.Spec {
			dir := testmodel.Qwen3(t, "")
			reshape(t, dir, map[string][]int{"model.layers.0.self_attn.k_norm.weight": nil})
			return backend.Spec{Path: dir}
		}, []string{"tensor model.layers.0.self_attn.k_norm.weight is missing (want shape [8])"}},
		{"draft with the wrong hidden size", func(t *testing.T) backend.Spec {
			return storiesDraft(t, func(c map[string]any) { c["hidden_size"] = 128 })
		}, []string{"hidden_size 128 does not match the target: want 64"}},
		{"draft with the wrong vocabulary", func(t *testing.T) backend.Spec {
			return storiesDraft(t, func(c map[string]any) { c["vocab_size"] = 600 })
		}, []string{"vocab_size 600 does not match the target: want 512"}},
		{"draft for a target with other layers", func(t *testing.T) backend.Spec {
			return storiesDraft(t, func(c map[string]any) { c["num_target_layers"] = 28 })
		}, []string{"num_target_layers 28 does not match the target: want 5"}},
		{"draft tapping a layer the target lacks", func(t *testing.T) backend.Spec {
			return storiesDraft(t, func(c map[string]any) {
				c["dflash_config"].(map[string]any)["target_layer_ids"] = []int{1, 7}
			})
		}, []string{"target_layer_ids[1] = 7 is outside the target: want below 5"}},
		{"draft config with more layers than its weights", func(t *testing.T) backend.Spec {
			return storiesDraft(t, func(c map[string]any) { c["num_hidden_layers"] = 2 })
		}, []string{"tensor layers.1.input_layernorm.weight is missing"}},
	}
}

// Every class of broken model is refused when the backend is built (dflash serve exits naming
// it), before any weight is read, with an error naming the model and the cause.
func TestBrokenModelsRefusedAtStartup(t *testing.T) {
	for _, c := range brokenModels() {
		t.Run(c.name, func(t *testing.T) {
			s := c.spec(t)
			s.Name = "broken"
			_, err := backend.New(backend.Options{Models: []backend.Spec{s}})
			if err == nil {
				t.Fatal("backend.New accepted the broken model")
			}
			for _, w := range append([]string{"model broken:latest"}, c.wants...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not name %q", err, w)
				}
			}
			// The same files give the same message: the check order is fixed.
			if _, again := backend.New(backend.Options{Models: []backend.Spec{s}}); again == nil || again.Error() != err.Error() {
				t.Errorf("second start: %v; want the same error", again)
			}
		})
	}
}

// With SkipBroken each broken model is listed with its error beside a good one, and refused on
// use with that error; a configuration with nothing good left is still refused.
func TestSkipBrokenListsUnavailable(t *testing.T) {
	good := backend.Spec{Name: "good", Path: shareddata.Path(t, storiesRel)}
	for _, c := range brokenModels() {
		t.Run(c.name, func(t *testing.T) {
			s := c.spec(t)
			s.Name = "broken"
			b, err := backend.New(backend.Options{Models: []backend.Spec{good, s}, SkipBroken: true})
			if err != nil {
				t.Fatal(err)
			}
			ms := b.Models()
			if len(ms) != 2 || ms[0].Error != "" || ms[1].Name != "broken:latest" || ms[1].Error == "" {
				t.Fatalf("listing %+v; want good available and broken:latest with its error", ms)
			}
			for _, w := range c.wants {
				if !strings.Contains(ms[1].Error, w) {
					t.Errorf("listed error %q does not name %q", ms[1].Error, w)
				}
			}
			if _, err := cliID(ms[1].Digest); err != nil {
				t.Errorf("unavailable model's digest: %v", err)
			}
			if _, err := b.Load(context.Background(), "broken:latest"); err == nil || !strings.Contains(err.Error(), ms[1].Error) {
				t.Errorf("Load of the unavailable model: %v; want its error", err)
			}
			m, err := b.Load(context.Background(), "good:latest")
			if err != nil {
				t.Fatalf("the good model beside it: %v", err)
			}
			m.Close()
			if _, err := backend.New(backend.Options{Models: []backend.Spec{s}, SkipBroken: true}); err == nil || !strings.Contains(err.Error(), "every configured model is broken") {
				t.Errorf("only broken models with SkipBroken: %v; want a refusal", err)
			}
		})
	}
}

// Two tensors wrong: the error names the first in the loader's order (the embedding before any
// layer), whatever order the file stores them in, and counts the other.
func TestBrokenTensorNamedInLoaderOrder(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	reshape(t, dir, map[string][]int{"model.layers.0.input_layernorm.weight": {15}, "model.embed_tokens.weight": {151936, 15}})
	_, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "two", Path: dir}}})
	if err == nil || !strings.Contains(err.Error(), "tensor model.embed_tokens.weight in model.safetensors has shape [151936 15], want [151936 16] (and 1 more tensors wrong)") {
		t.Errorf("error %v; want it to name model.embed_tokens.weight and count one more", err)
	}
}

// storiesCopy copies stories260K and its tokenizer into a fresh folder and returns the checkpoint.
func storiesCopy(t *testing.T) string {
	t.Helper()
	src := shareddata.Path(t, storiesRel)
	dir := t.TempDir()
	for _, n := range []string{"stories260K.bin", "tok512.bin"} {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(src), n))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, n), data, 0o644))
	}
	return filepath.Join(dir, "stories260K.bin")
}

// storiesDraft writes a one-layer random DFlash draft that fits stories260K, then edits its
// config.json with edit.
func storiesDraft(t *testing.T, edit func(map[string]any)) backend.Spec {
	t.Helper()
	bin := shareddata.Path(t, storiesRel)
	d, err := engine.Describe(engine.Options{Model: bin})
	must(t, err)
	dir := t.TempDir()
	must(t, dflash.WriteRandom(dir, dflash.ConfigFor(d.Config, 1, 8), 7, kernel.F32))
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	must(t, err)
	var c map[string]any
	must(t, json.Unmarshal(raw, &c))
	edit(c)
	raw, err = json.Marshal(c)
	must(t, err)
	must(t, os.WriteFile(p, raw, 0o644))
	return backend.Spec{Path: bin, Draft: dir}
}

// reshape rewrites dir's model.safetensors with the named tensors given new shapes (zeros), or
// dropped for a nil shape; the others keep their bytes.
func reshape(t *testing.T, dir string, shapes map[string][]int) {
	t.Helper()
	p := filepath.Join(dir, safetensors.SingleFile)
	f, err := safetensors.Open(p)
	must(t, err)
	var ts []safetensors.WriteTensor
	for _, n := range f.Names() {
		tn, err := f.Tensor(n)
		must(t, err)
		w := safetensors.WriteTensor{Name: n, DType: tn.DType, Shape: tn.Shape, Data: append([]byte(nil), tn.Data...)}
		if sh, ok := shapes[n]; ok {
			if sh == nil {
				continue
			}
			elems := 1
			for _, d := range sh {
				elems *= d
			}
			w.Shape, w.Data = sh, make([]byte, elems*tn.DType.Size())
		}
		ts = append(ts, w)
	}
	must(t, f.Close())
	must(t, safetensors.Write(p, ts, nil))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
