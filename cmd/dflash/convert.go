package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/format/safetensors"
)

// cmdConvert writes a model in another form. With --out FILE.gguf it writes a GGUF file that
// llama.cpp and ollama read (engine.ConvertGGUF: their names and keys, --type picks the tensor
// types) from a Qwen3/Llama folder or a llama2.c checkpoint, or a draft GGUF from a DFlash or
// DFlash2 draft folder (which --draft then loads). Otherwise it rewrites a Hugging Face
// folder (a target or a DFlash draft) with its floating-point tensors in bf16: half the bytes of
// f32, which is what the decode of a bandwidth-bound model reads. Every other file is copied
// unchanged, except config.json's torch_dtype. Either output is written beside and renamed into
// place, so a failure leaves no half file or folder behind.
func cmdConvert(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("convert", stderr)
	in := fs.String("model", "", "Hugging Face folder (config.json and model.safetensors or shards; a target or a DFlash/DFlash2 draft), or a llama2.c .bin for --out FILE.gguf")
	out := fs.String("out", "", "folder, or FILE.gguf, to write (must not exist)")
	dtype := fs.String("dtype", "bf16", "tensor type of a folder: bf16")
	typ := fs.String("type", "", "tensor types of a GGUF: "+strings.Join(engine.ConvertTypes, ", ")+" (default bf16)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		return usagef("convert needs --model DIR|FILE.bin and --out DIR|FILE.gguf")
	}
	if !strings.HasSuffix(strings.ToLower(*out), ".gguf") {
		if *typ != "" {
			return usagef("--type is for a GGUF output: name --out FILE.gguf")
		}
	} else {
		if *typ == "" {
			*typ = "bf16"
		}
		if _, err := os.Stat(*out); err == nil {
			return fmt.Errorf("%s exists; choose a new file", *out)
		}
		c, err := engine.ConvertGGUF(*in, *out, *typ)
		if err != nil {
			return err
		}
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(c.Types)) {
			parts = append(parts, fmt.Sprintf("%d %s", c.Types[t], t))
		}
		fmt.Fprintf(stdout, "wrote %d tensors (%s) as %s to %s\n", c.Tensors, strings.Join(parts, ", "), c.FileType, *out)
		for _, f := range c.Fallbacks {
			fmt.Fprintf(stdout, "  fallback %s\n", f)
		}
		for _, w := range c.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		return nil
	}
	if *dtype != "bf16" {
		return usagef("--dtype %q: only bf16 is supported", *dtype)
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s exists; choose a new folder", *out)
	}
	n, err := convertBF16(*in, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d tensors as bf16 to %s\n", n, *out)
	return nil
}

// convertBF16 writes dir's tensors as bf16 into out (which must not exist) and copies the rest.
func convertBF16(dir, out string) (int, error) {
	m, err := safetensors.OpenModel(dir)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	tmp := out + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	var tensors []safetensors.WriteTensor
	for _, name := range m.Names() {
		t, err := m.Tensor(name)
		if err != nil {
			return 0, err
		}
		v, err := t.BF16()
		if err != nil {
			return 0, err
		}
		tensors = append(tensors, safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: t.Shape, Data: safetensors.BF16Bytes(v)})
	}
	if err := safetensors.Write(filepath.Join(tmp, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasSuffix(name, ".safetensors") || name == "model.safetensors.index.json" || name == "checkpoint.bin" {
			continue // tensors are rewritten above; a training checkpoint does not belong in a model folder
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		if name == "config.json" {
			if data, err = withTorchDType(data, "bfloat16"); err != nil {
				return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
			}
		}
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return 0, err
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return 0, err
	}
	return len(tensors), nil
}

// withTorchDType sets config.json's torch_dtype, keeping every other field (keys come out sorted).
func withTorchDType(config []byte, dtype string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(config, &fields); err != nil {
		return nil, err
	}
	fields["torch_dtype"] = json.RawMessage(fmt.Sprintf("%q", dtype))
	b, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
