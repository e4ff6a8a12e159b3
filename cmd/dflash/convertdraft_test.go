package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
)

// convertCLI runs dflash convert and returns what it printed.
func convertCLI(t *testing.T, in, out, typ string) string {
	t.Helper()
	code, msg, errs := runCLI(t, "", "convert", "--model", in, "--out", out, "--type", typ)
	if code != 0 {
		t.Fatalf("convert %s --type %s: exit %d: %s", in, typ, code, errs)
	}
	return msg
}

// traceRounds reads a --trace file without its timings: what the draft proposed (and with what
// probabilities), what was accepted and emitted, round by round.
func traceRounds(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rounds []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		delete(r, "draft_ns")
		delete(r, "verify_ns")
		b, _ := json.Marshal(r)
		rounds = append(rounds, string(b))
	}
	return rounds
}

// A bf16 draft folder converted to a bf16 draft GGUF holds the same bits, so --draft FILE
// proposes exactly what --draft FOLDER proposes: the same tokens with the same draft
// probabilities (sampled, so the trace carries q), round for round. Both kinds of draft: the
// default pair's DFlash draft and a random DFlash2 one.
func TestConvertDraftBF16ProposesAsTheFolder(t *testing.T) {
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Options{Model: target})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d2 := filepath.Join(dir, "dflash2")
	if err := dflash2.WriteRandom(d2, e.Target.Config(), dflash2.ConfigFor(e.Target.Config(), 1, 8), 5, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	for _, folder := range []string{draft, d2} {
		file := filepath.Join(dir, filepath.Base(folder)+"-bf16.gguf")
		if msg := convertCLI(t, folder, file, "bf16"); !strings.Contains(msg, "as BF16") {
			t.Errorf("convert says %q", msg)
		}
		var traces [2][]string
		var outs [2]string
		for i, d := range []string{folder, file} {
			tr := filepath.Join(dir, "trace"+strconv.Itoa(i))
			code, out, errs := runCLI(t, "", "run", "--model", target, "--draft", d, "--depth", "4", "-p", "Once upon a time",
				"-n", "48", "--temp", "0.8", "--seed", "3", "--print-ids", "--trace", tr)
			if code != 0 {
				t.Fatalf("run --draft %s: exit %d: %s", d, code, errs)
			}
			traces[i], outs[i] = traceRounds(t, tr), out
		}
		if outs[0] != outs[1] || strings.Join(traces[0], "\n") != strings.Join(traces[1], "\n") {
			t.Errorf("%s: the bf16 GGUF drafts otherwise than the folder\nfolder: %s\n%s\nGGUF: %s\n%s", filepath.Base(folder),
				outs[0], strings.Join(traces[0], "\n"), outs[1], strings.Join(traces[1], "\n"))
		}
		if len(traces[0]) < 5 || !strings.Contains(traces[0][0], `"q":[`) {
			t.Errorf("%s: %d rounds, first %s: want several rounds with draft probabilities", filepath.Base(folder), len(traces[0]), traces[0][0])
		}
	}
}

// Quantized drafts on quantized targets: the default pair converted to Q8_0 and Q4_K_M (each
// draft on the target of its type), and the bf16 draft folder on the Q8_0 target (on the default
// path only). Greedy speculative output is the plain output on every kernel path, and the quantized drafts still
// draft well (tau well above 1; the bf16 pair's is about 4 at depth 4). Each model is loaded
// once and decoded on every path in-process, as dflash run would.
func TestQuantizedDraftOnQuantizedTarget(t *testing.T) {
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, typ := range []string{"q8_0", "q4_k_m"} {
		files["target-"+typ] = filepath.Join(dir, "target-"+typ+".gguf")
		files["draft-"+typ] = filepath.Join(dir, "draft-"+typ+".gguf")
		convertCLI(t, target, files["target-"+typ], typ)
		if msg := convertCLI(t, draft, files["draft-"+typ], typ); !strings.Contains(msg, "as "+strings.ToUpper(typ)) {
			t.Errorf("convert of the draft says %q", msg)
		}
	}
	type pair struct {
		name string
		e    *engine.Engine
		d    *engine.Draft
	}
	var pairs []pair
	for _, p := range [][2]string{
		{files["target-q8_0"], files["draft-q8_0"]},
		{files["target-q4_k_m"], files["draft-q4_k_m"]},
		{files["target-q8_0"], draft},
	} {
		e, err := engine.Open(engine.Options{Model: p[0]})
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.LoadDraft(p[1])
		if err != nil {
			t.Fatal(err)
		}
		if !e.Target.Config().DType.Quantized() {
			t.Errorf("%s computes in %v, want a quantized type", p[0], e.Target.Config().DType)
		}
		pairs = append(pairs, pair{filepath.Base(p[0]) + " with " + filepath.Base(p[1]), e, d})
	}
	first := kernel.Path()
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for i, p := range pairs {
			if i == 2 && kernel.Path() != first {
				continue // the bf16 draft's products are the bf16 ones, checked on every path elsewhere
			}
			prompt, err := p.e.EncodePrompt("Once upon a time")
			if err != nil {
				t.Fatal(err)
			}
			decode := func(dr runner.Drafter) ([]int, runner.Stats) {
				var ids []int
				seq := runner.NewSequence(p.e.Target, 128)
				st, err := generate(context.Background(), seq, dr, runner.Fixed(4), runner.Request{Prompt: prompt, MaxTokens: 32},
					func(tk runner.Token) error { ids = append(ids, tk.ID); return nil })
				if err != nil {
					t.Fatalf("%s: %v", p.name, err)
				}
				return ids, st
			}
			want, _ := decode(nil)
			got, st := decode(p.d.Drafter)
			if !slices.Equal(got, want) {
				t.Errorf("%s: speculative ids\n got %v\nwant %v", p.name, got, want)
			}
			if st.Tau() < 1.5 {
				t.Errorf("%s: tau %g: the draft no longer drafts the target's continuation", p.name, st.Tau())
			}
		}
	})
	// A draft GGUF is no model, and a target GGUF no draft: each refused naming what the file is.
	code, _, errs := runCLI(t, "", "run", "--model", files["draft-q8_0"], "-n", "4", "-p", "Once")
	if code == 0 || !strings.Contains(errs, "a DFlash draft GGUF, not a model") {
		t.Errorf("a draft GGUF as --model: exit %d, %q", code, errs)
	}
	if code, out, errs := runCLI(t, "", "show", files["draft-q8_0"]); code != 0 || !strings.Contains(out, "DFlash draft") {
		t.Errorf("show of a draft GGUF: exit %d, %q, %s", code, out, errs)
	}
	code, _, errs = runCLI(t, "", "run", "--model", files["target-q8_0"], "--draft", files["target-q8_0"], "-n", "4", "-p", "Once")
	if code == 0 || !strings.Contains(errs, `general.architecture is "qwen3"`) {
		t.Errorf("a target GGUF as --draft: exit %d, %q", code, errs)
	}
}
