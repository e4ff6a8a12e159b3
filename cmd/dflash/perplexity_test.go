package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/perplexity"
)

// perplexityJSON is what --json prints.
type perplexityJSON struct {
	Model, Base, Data string
	perplexity.Result
}

func runPerplexity(t *testing.T, args ...string) perplexityJSON {
	t.Helper()
	code, out, errs := runCLI(t, "", append([]string{"perplexity", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("perplexity %v: exit %d: %s", args, code, errs)
	}
	var r perplexityJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("--json printed more than one line: %q", out)
	}
	return r
}

// heldOut writes the first n bytes of held-out TinyStories text (cut back to a line end), text
// stories260K never trained on.
func heldOut(t *testing.T, n int) string {
	t.Helper()
	raw, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := raw[:n]
	text = text[:strings.LastIndexByte(string(text), '\n')+1]
	p := filepath.Join(t.TempDir(), "heldout.txt")
	if err := os.WriteFile(p, text, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// stories260K against itself in another form: its F32 GGUF computes the checkpoint's logits
// bitwise, so KL is exactly 0 at every quantile, the top token always agrees and the two
// perplexities are one number. Its Q8_0 GGUF is within 1% of the f32 perplexity (the issue's
// bar) and diverges from it measurably but little; its Q4_K_M GGUF more, within a sane bound.
func TestPerplexityStories260K(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	data := heldOut(t, 16_000)
	dir := t.TempDir()
	f32, q8, q4 := filepath.Join(dir, "f32.gguf"), filepath.Join(dir, "q8_0.gguf"), filepath.Join(dir, "q4_k_m.gguf")
	for path, typ := range map[string]string{f32: "f32", q8: "q8_0", q4: "q4_k_m"} {
		if _, err := engine.ConvertGGUF(bin, path, typ); err != nil {
			t.Fatal(err)
		}
	}
	self := runPerplexity(t, "--model", f32, "--kl-base", bin, "--data", data, "--ctx", "128")
	// 16 kB of text is about 4000 tokens: 30 whole chunks of 128, 63 tokens scored in each.
	if self.Ctx != 128 || self.Chunks < 20 || self.Tokens != self.Chunks*63 || self.Model != f32 || self.Base != bin {
		t.Errorf("scored %d chunks of %d, %d tokens, model %q base %q", self.Chunks, self.Ctx, self.Tokens, self.Model, self.Base)
	}
	k := self.KL
	if k == nil {
		t.Fatal("no KL figures with --kl-base")
	}
	if k.Mean != 0 || k.Top1 != 1 || k.LnPPLRatio != 0 || k.BasePPL != self.PPL || k.RMSDeltaP != 0 {
		t.Errorf("F32 GGUF against its checkpoint: %+v, want KL 0, top-1 100%%, equal perplexities", *k)
	}
	for _, q := range k.Quantiles {
		if q.Value != 0 {
			t.Errorf("KL quantile %g = %g, want 0", q.Q, q.Value)
		}
	}
	if self.PPL < 1 || self.PPL > 20 {
		t.Errorf("stories260K perplexity %g on TinyStories: not a trained model's", self.PPL)
	}

	quant := runPerplexity(t, "--model", q8, "--kl-base", f32, "--data", data, "--ctx", "128")
	t.Logf("Q8_0: PPL %.4f, f32 %.4f (%+.3f%%), KL %.6f, top-1 %.2f%%", quant.PPL, quant.KL.BasePPL,
		100*(quant.PPL/quant.KL.BasePPL-1), quant.KL.Mean, 100*quant.KL.Top1)
	if quant.KL.BasePPL != self.PPL || quant.Tokens != self.Tokens {
		t.Errorf("f32 base perplexity %g over %d tokens, %g over %d as the model", quant.KL.BasePPL, quant.Tokens, self.PPL, self.Tokens)
	}
	if math.Abs(quant.PPL/self.PPL-1) > 0.01 {
		t.Errorf("Q8_0 perplexity %g, f32 %g: off by more than 1%%", quant.PPL, self.PPL)
	}
	if !(quant.KL.Mean > 0 && quant.KL.Mean < 0.01 && quant.KL.Top1 > 0.9 && quant.KL.Top1 < 1) {
		t.Errorf("Q8_0 against f32: KL %g, top-1 %g; want a small positive KL and agreement below 100%%", quant.KL.Mean, quant.KL.Top1)
	}

	// Q4_K_M (on stories260K's rows of 64 mostly Q4_0, the fallback, as `dflash convert` says):
	// measured +7.8% perplexity, KL 0.081 nats, top-1 87% on this text. The bound is what a
	// working 4-bit model stays within; broken blocks or a wrong scale put it far outside.
	q4r := runPerplexity(t, "--model", q4, "--kl-base", f32, "--data", data, "--ctx", "128")
	t.Logf("Q4_K_M: PPL %.4f, f32 %.4f (%+.2f%%), KL %.4f, top-1 %.2f%%", q4r.PPL, q4r.KL.BasePPL,
		100*(q4r.PPL/q4r.KL.BasePPL-1), q4r.KL.Mean, 100*q4r.KL.Top1)
	if q4r.KL.LnPPLRatio > 0.15 || q4r.KL.Mean > 0.2 || q4r.KL.Top1 < 0.8 || q4r.KL.Mean <= quant.KL.Mean {
		t.Errorf("Q4_K_M against f32: ln(PPL ratio) %g, KL %g, top-1 %g; want within 0.15, 0.2, above 0.8, and a larger KL than Q8_0's %g",
			q4r.KL.LnPPLRatio, q4r.KL.Mean, q4r.KL.Top1, quant.KL.Mean)
	}

	// Without --json: a summary a person reads, with the same figures.
	code, out, errs := runCLI(t, "", "perplexity", "--model", bin, "--data", data, "--ctx", "128", "--chunks", "2")
	if code != 0 || !strings.Contains(out, "PPL ") || !strings.Contains(out, "2 chunks of 128 tokens, 126 tokens scored") {
		t.Errorf("text summary: exit %d, %q, %s", code, out, errs)
	}
}

// Bad input is refused naming the cause: no such text, a text shorter than one chunk, a base
// model whose tokenizer reads the text otherwise, a missing --data.
func TestPerplexityRefuses(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	short := filepath.Join(t.TempDir(), "short.txt")
	if err := os.WriteFile(short, []byte("Once upon a time there was a cat.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nothing.txt")
	qwen := testmodel.Qwen3(t, "")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing file", []string{"--model", bin, "--data", missing}, 1, "nothing.txt"},
		{"short text", []string{"--model", bin, "--data", short, "--ctx", "64"}, 1, "text shorter than one chunk"},
		{"tokenizer mismatch", []string{"--model", bin, "--kl-base", qwen, "--data", short}, 1, "tokenizer differs"},
		{"no data", []string{"--model", bin}, 2, "--data"},
	} {
		code, _, errs := runCLI(t, "", append([]string{"perplexity"}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want %d naming %q", c.name, code, errs, c.code, c.want)
		}
	}
}
