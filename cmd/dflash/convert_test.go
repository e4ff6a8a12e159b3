package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
)

// Converting to bf16 gives the weights loading with --dtype bf16 gives: the same greedy ids. The
// other files come along unchanged, config.json says bfloat16, and an existing output folder or a
// missing flag is refused.
func TestConvertBF16(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	out := filepath.Join(t.TempDir(), "bf16")
	if code, _, errs := runCLI(t, "", "convert", "--model", dir, "--out", out); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	gen := []string{"run", "--prompt-ids", "1,2,3", "-n", "24", "--print-ids"}
	code, want, errs := runCLI(t, "", append(gen, "--model", dir, "--dtype", "bf16")...)
	if code != 0 {
		t.Fatalf("run original as bf16: %s", errs)
	}
	code, got, errs := runCLI(t, "", append(gen, "--model", out)...)
	if code != 0 {
		t.Fatalf("run converted: %s", errs)
	}
	if got != want {
		t.Errorf("converted folder generates %q, the original loaded as bf16 %q", got, want)
	}
	if st, err := os.Stat(filepath.Join(out, "model.safetensors")); err != nil {
		t.Fatal(err)
	} else if orig, _ := os.Stat(filepath.Join(dir, "model.safetensors")); st.Size() >= orig.Size() {
		t.Errorf("bf16 file %d bytes, not smaller than the original's %d", st.Size(), orig.Size())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b, err := os.ReadFile(filepath.Join(out, e.Name()))
		if err != nil {
			t.Errorf("%s not copied: %v", e.Name(), err)
			continue
		}
		if e.Name() == "config.json" {
			var cfg map[string]any
			if err := json.Unmarshal(b, &cfg); err != nil || cfg["torch_dtype"] != "bfloat16" {
				t.Errorf("converted config.json: torch_dtype %v (%v), want bfloat16", cfg["torch_dtype"], err)
			}
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s changed in the copy", e.Name())
		}
	}
	if code, _, errs := runCLI(t, "", "convert", "--model", dir, "--out", out); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("existing output: exit %d, %q; want 1 naming the existing folder", code, errs)
	}
	if code, _, _ := runCLI(t, "", "convert", "--model", dir); code != 2 {
		t.Errorf("missing --out: exit %d, want 2", code)
	}
	if code, _, errs := runCLI(t, "", "convert", "--model", filepath.Join(dir, "nothing"), "--out", out+"2"); code != 1 || !strings.Contains(errs, "nothing") {
		t.Errorf("missing model: exit %d, %q; want 1 naming the path", code, errs)
	}
	if _, err := os.Stat(out + "2.partial"); !os.IsNotExist(err) {
		t.Errorf("a failed conversion left %s.partial behind", out+"2")
	}
}

// dflash convert of the llama2.c checkpoint to an F32 GGUF, then dflash run of that one file
// (its tokenizer from the metadata, nothing beside it) prints run.c's greedy goldens.
func TestConvertGGUFRunsLlama2cGoldens(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	out := filepath.Join(t.TempDir(), "stories260K.gguf")
	code, msg, errs := runCLI(t, "", "convert", "--model", bin, "--out", out, "--type", "f32")
	if code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	if !strings.Contains(msg, "47 tensors") || !strings.Contains(msg, "as F32") {
		t.Errorf("convert reports %q", msg)
	}
	for _, c := range []struct {
		golden, prompt string
		n              string // generated tokens, as TestRunMatchesLlama2cGoldens counts them
	}{
		{"greedy_once_upon_a_time_n128.txt", "Once upon a time", "124"},
		{"greedy_noprompt_n256.txt", "", "256"},
	} {
		want, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/"+c.golden))
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"run", "--model", out, "-n", c.n}
		if c.prompt == "" {
			args = append(args, "--prompt-ids", "1")
		} else {
			args = append(args, "-p", c.prompt)
		}
		code, got, errs := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.golden, code, errs)
		}
		if got != string(want) {
			t.Errorf("%s: GGUF output differs from run.c's\n got: %q\nwant: %q", c.golden, got, want)
		}
	}
	if code, _, errs := runCLI(t, "", "convert", "--model", bin, "--out", out, "--type", "f32"); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("converting onto an existing file: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "", "convert", "--model", bin, "--out", out+"2.gguf", "--type", "q2_k"); code == 0 || !strings.Contains(errs, `"q2_k"`) {
		t.Errorf("--type q2_k: exit %d: %s", code, errs)
	}
}

// Greedy speculative decoding equals plain decoding on quantized GGUF targets (Q8_0 and Q4_K_M,
// kept quantized), with random DFlash and DFlash2 drafts whose proposals are mostly wrong (a
// folder, and Q8_0 draft GGUFs), on every kernel path.
func TestConvertGGUFSpeculativeEqualsPlain(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	var outs []string
	for _, typ := range []string{"q8_0", "q4_k_m"} {
		out := filepath.Join(t.TempDir(), "stories260K-"+typ+".gguf")
		code, msg, errs := runCLI(t, "", "convert", "--model", bin, "--out", out, "--type", typ)
		if code != 0 {
			t.Fatalf("convert: exit %d: %s", code, errs)
		}
		outs = append(outs, out)
		// dflash show reports the file's quantization and the tensor types convert wrote
		// ("wrote 47 tensors (11 F32, 5 F16, 31 Q8_0) as Q8_0 to ...").
		code, shown, errs := runCLI(t, "", "show", out)
		if code != 0 {
			t.Fatalf("show: exit %d: %s", code, errs)
		}
		counts := msg[strings.Index(msg, "(")+1 : strings.Index(msg, ")")]
		if !strings.Contains(shown, "type        "+strings.ToUpper(typ)+"\n") || !strings.Contains(shown, "tensors     ") {
			t.Errorf("show of the %s file:\n%s", typ, shown)
		}
		for _, part := range strings.Split(counts, ", ") {
			if !strings.Contains(shown, part) {
				t.Errorf("show of the %s file does not list %q (convert wrote %s):\n%s", typ, part, counts, shown)
			}
		}
	}
	e, err := engine.Open(engine.Options{Model: outs[0]})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Target.Config().DType.Quantized() {
		t.Errorf("Q8_0 GGUF computes in %v", e.Target.Config().DType)
	}
	// Drafts: a random DFlash folder, its Q8_0 draft GGUF, and a random DFlash2 draft's Q8_0 GGUF.
	dir := t.TempDir()
	draft, d2 := filepath.Join(dir, "dflash"), filepath.Join(dir, "dflash2")
	if err := dflash.WriteRandom(draft, dflash.ConfigFor(e.Target.Config(), 1, 8), 7, kernel.F32); err != nil {
		t.Fatal(err)
	}
	if err := dflash2.WriteRandom(d2, e.Target.Config(), dflash2.ConfigFor(e.Target.Config(), 1, 8), 4, kernel.F32); err != nil {
		t.Fatal(err)
	}
	drafts := []string{draft, filepath.Join(dir, "dflash-q8_0.gguf"), filepath.Join(dir, "dflash2-q8_0.gguf")}
	for i, src := range []string{draft, d2} {
		if code, _, errs := runCLI(t, "", "convert", "--model", src, "--out", drafts[1+i], "--type", "q8_0"); code != 0 {
			t.Fatalf("convert %s: exit %d: %s", src, code, errs)
		}
	}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, out := range outs {
			args := []string{"run", "--model", out, "-p", "Once upon a time", "-n", "96", "--print-ids"}
			code, want, errs := runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("plain: exit %d: %s", code, errs)
			}
			for _, d := range drafts {
				code, got, errs := runCLI(t, "", append(args, "--draft", d)...)
				if code != 0 {
					t.Fatalf("speculative with %s: exit %d: %s", d, code, errs)
				}
				if got != want {
					t.Errorf("%s with %s: speculative ids\n got %s\nwant %s", filepath.Base(out), filepath.Base(d), got, want)
				}
				if !strings.Contains(errs, "tau") {
					t.Errorf("the speculative run reports no acceptance (tau): %s", errs)
				}
			}
		}
	})
}
