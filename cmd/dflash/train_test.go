package main

import (
	"os"
	"path/filepath"
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
