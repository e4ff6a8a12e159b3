package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// train tokenizer writes a folder that tokenize (the normal loader) reads back, and the learned
// vocabulary round-trips the training text.
func TestTrainTokenizerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	text := strings.Repeat("the cat sat on the mat. the dog sat on the log.\n", 50)
	data := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(data, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tok")
	code, stdout, errs := runCLI(t, "", "train", "tokenizer", "--data", data, "--out", out, "--vocab", "300")
	// Ten distinct words run out of pairs seen twice long before 300 tokens; the trainer stops
	// there rather than inventing merges.
	if code != 0 || !strings.Contains(stdout, "278 tokens (18 merges)") {
		t.Fatalf("exit %d: %s %s", code, stdout, errs)
	}
	code, ids, errs := runCLI(t, "", "tokenize", "--tokenizer", out, "the cat sat on the mat.")
	if code != 0 {
		t.Fatalf("tokenize: %s", errs)
	}
	// Frequent words of the training text are single tokens: far fewer ids than bytes.
	if n := len(strings.Split(strings.TrimSpace(ids), ",")); n > 8 {
		t.Errorf("%d ids for 23 bytes of training text: the merges were not learned", n)
	}
	code, back, _ := runCLI(t, strings.TrimSpace(ids), "tokenize", "--tokenizer", out, "--decode")
	if code != 0 || strings.TrimSpace(back) != "the cat sat on the mat." {
		t.Errorf("decode: %q", back)
	}
	if code, _, errs := runCLI(t, "", "train", "tokenizer", "--data", data); code != 2 || !strings.Contains(errs, "--out") {
		t.Errorf("missing --out: exit %d %q", code, errs)
	}
}

// train draft runs end to end on stories260K in seconds: data from the target's continuations
// (cached in the output folder), a few steps, a folder that --draft loads, and a held-out tau.
// An interrupted or repeated run resumes from the checkpoint instead of starting over.
func TestTrainDraftEndToEnd(t *testing.T) {
	bin := storiesPath(t)
	corpus := testdataPath(t, "corpora/tinystories_val_800K.txt")
	out := filepath.Join(t.TempDir(), "draft")
	args := []string{"train", "draft", "--target", bin, "--data", corpus, "--out", out, "--lower",
		"--n", "16", "--len", "40", "--steps", "12", "--layers", "1", "--block", "8", "--batch", "4", "--anchors", "4",
		"--eval", corpus, "--eval-n", "4"}
	code, stdout, errs := runCLI(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "draft: 12 steps (0 resumed)") || !strings.Contains(stdout, "held-out: 4 sequences, tau") {
		t.Fatalf("summary: %q", stdout)
	}
	if _, err := os.Stat(filepath.Join(out, "data.json")); err != nil {
		t.Errorf("target data not cached: %v", err)
	}
	// The written draft speculates for its target; the output is the target's own.
	code, plain, _ := runCLI(t, "", "run", "--model", bin, "-p", "once upon a time", "-n", "40", "--print-ids")
	code2, spec, errs := runCLI(t, "", "run", "--model", bin, "-p", "once upon a time", "-n", "40", "--print-ids", "--draft", out)
	if code != 0 || code2 != 0 || plain != spec {
		t.Fatalf("speculative output with the trained draft differs: %q vs %q (%s)", spec, plain, errs)
	}
	// Running the finished command again resumes at the last step: nothing left to train.
	code, stdout, errs = runCLI(t, "", args...)
	if code != 0 || !strings.Contains(stdout, "(12 resumed)") {
		t.Errorf("second run: exit %d, %q %s", code, stdout, errs)
	}
}

// --arch dflash2 writes a DFlash2 folder that run loads as a selector draft (told apart by its
// config); speculation with it leaves the output unchanged.
func TestTrainDraftDFlash2(t *testing.T) {
	bin := storiesPath(t)
	corpus := testdataPath(t, "corpora/tinystories_val_800K.txt")
	out := filepath.Join(t.TempDir(), "d2")
	code, stdout, errs := runCLI(t, "", "train", "draft", "--arch", "dflash2", "--target", bin, "--data", corpus, "--out", out,
		"--lower", "--n", "8", "--len", "40", "--steps", "6", "--layers", "1", "--block", "8", "--batch", "4", "--anchors", "4",
		"--eval", corpus, "--eval-n", "2")
	if code != 0 || !strings.Contains(stdout, "DFlash2DraftModel") {
		t.Fatalf("exit %d: %q %s", code, stdout, errs)
	}
	code, plain, _ := runCLI(t, "", "run", "--model", bin, "-p", "once upon a time", "-n", "30", "--print-ids")
	code2, spec, errs := runCLI(t, "", "run", "--model", bin, "-p", "once upon a time", "-n", "30", "--print-ids", "--draft", out)
	if code != 0 || code2 != 0 || plain != spec {
		t.Fatalf("DFlash2 speculative output differs: %q vs %q (%s)", spec, plain, errs)
	}
}

// --data-temps and --loss mix train from sampled continuations with soft targets (8 per token
// by default), --eval-temps reports held-out tau at each temperature, and a second run with
// other data flags is refused with the cached recipe's differences rather than silently
// training on other data; --regen-data rebuilds it, and the checkpoint (trained on the old
// data) then refuses to resume.
func TestTrainDraftSampledSoft(t *testing.T) {
	bin := storiesPath(t)
	corpus := testdataPath(t, "corpora/tinystories_val_800K.txt")
	out := filepath.Join(t.TempDir(), "draft")
	base := []string{"train", "draft", "--target", bin, "--data", corpus, "--out", out, "--lower",
		"--n", "12", "--len", "40", "--steps", "8", "--layers", "1", "--block", "8", "--batch", "4", "--anchors", "4", "--loss", "mix"}
	code, stdout, errs := runCLI(t, "", append(slices.Clone(base), "--data-temps", "0,1", "--eval", corpus, "--eval-n", "3", "--eval-temps", "0,1")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"draft: 8 steps (0 resumed)", "held-out: 3 sequences, tau", "at temperature 0 (", "at temperature 1 ("} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary %q lacks %q", stdout, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "data.json"))
	if err != nil || !strings.Contains(string(b), `"temps":[0,1]`) || !strings.Contains(string(b), `"soft_top_k":8`) {
		t.Errorf("data.json does not record its recipe (err %v)", err)
	}
	other := append(slices.Clone(base), "--data-temp", "0.8")
	code, _, errs = runCLI(t, "", other...)
	if code == 0 || !strings.Contains(errs, "made differently") || !strings.Contains(errs, "temps [0 1] (cached) vs [0.8] (asked)") {
		t.Errorf("other data flags: exit %d, %s", code, errs)
	}
	code, _, errs = runCLI(t, "", append(other, "--regen-data")...)
	if code == 0 || !strings.Contains(errs, "written for the data") {
		t.Errorf("regenerated data with the old checkpoint: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, "", "train", "draft", "--target", bin, "--data", corpus, "--out", out, "--loss", "kl"); code != 2 || !strings.Contains(errs, "--loss") {
		t.Errorf("--loss kl: exit %d %q", code, errs)
	}
}
