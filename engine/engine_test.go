package engine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/tokenizer/chat"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenQwen3Folder(t *testing.T) {
	// generation_config.json lists an extra end id (151643, <|endoftext|>) besides config.json's.
	dir := testmodel.Qwen3(t, `{"eos_token_id": [151645, 151643], "temperature": 0.6}`)
	e, err := Open(Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	// <|im_end|> ends a chat turn, <|endoftext|> a document: both stop generation, once each.
	if want := []int{151643, 151645}; !slices.Equal(e.Stop, want) {
		t.Errorf("stop ids %v, want %v", e.Stop, want)
	}
	if e.Tok == nil || e.Chat == nil {
		t.Fatalf("tokenizer %v, chat template %v: both should load from the folder", e.Tok, e.Chat)
	}
	// Qwen3 prompts start without BOS.
	ids, err := e.EncodePrompt("<|im_start|>user\nhi<|im_end|>")
	must(t, err)
	if want := []int{151644, 872, 198, 6023, 151645}; !slices.Equal(ids, want) {
		t.Errorf("prompt ids %v, want %v", ids, want)
	}
	text, err := e.Chat.Render([]chat.Message{{Role: "user", Content: "hi"}}, chat.Options{AddGenerationPrompt: true})
	must(t, err)
	if !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Errorf("rendered prompt %q does not end in the generation prompt", text)
	}
}

func TestOpenErrorsNameTheCause(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	// A config.json whose vocabulary disagrees with the weights beside it (a mismatched download):
	// the weights' headers (Validate) name the tensor. With the tokenizer beside it too, the
	// description already refuses it, before any weight is read, naming the vocabulary.
	small, smallTok := t.TempDir(), t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	for _, d := range []string{small, smallTok} {
		must(t, os.WriteFile(filepath.Join(d, "config.json"), []byte(strings.Replace(string(cfg), `"vocab_size":151936`, `"vocab_size":1000`, 1)), 0o644))
	}
	copyFiles(t, dir, small, "model.safetensors")
	copyFiles(t, dir, smallTok, "tokenizer.json", "tokenizer_config.json", "model.safetensors")
	cases := []struct {
		o    Options
		want string
	}{
		{Options{}, "no model given"},
		{Options{Model: filepath.Join(dir, "nope")}, "nope"},
		{Options{Synthetic: "qwen9-100b"}, "qwen9-100b"},
		{Options{Model: small}, "embed_tokens"},
		{Options{Model: smallTok}, "has 151669 tokens but model " + smallTok + " has a vocabulary of 1000"},
	}
	for _, c := range cases {
		_, err := Open(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v; want an error naming %q", c.o, err, c.want)
		}
	}
}

func copyFiles(t *testing.T, from, to string, names ...string) {
	t.Helper()
	for _, f := range names {
		data, err := os.ReadFile(filepath.Join(from, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(to, f), data, 0o644))
	}
}
