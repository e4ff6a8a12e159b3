package main

import (
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/engine/ref/ollamatest"
	"github.com/dflash/dflash/internal/shareddata"
)

// `dflash run NAME` takes an ollama model's params layer as its default options: the name runs
// like its GGUF file given those options as flags, and a flag the command line sets wins over the
// layer's value.
func TestRunOllamaParams(t *testing.T) {
	gguf := filepath.Join(t.TempDir(), "stories.gguf")
	if _, err := engine.ConvertGGUF(shareddata.Path(t, "stories260K/stories260K.bin"), gguf, "f32"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ollamatest.Write(t, root, "stories", "latest", ollamatest.Model(t, gguf),
		ollamatest.Layer{Media: ref.MediaParams, Content: []byte(`{"temperature": 0.9, "top_k": 20, "seed": 4}`)})
	t.Setenv("OLLAMA_MODELS", root)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	run := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, "", append([]string{"run", "-p", "Once upon a time", "-n", "40", "--print-ids"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		return out
	}
	byName := run("--model", "stories:latest")
	if want := run("--model", gguf, "--temp", "0.9", "--top-k", "20", "--seed", "4"); byName != want {
		t.Errorf("the params layer was not applied:\n got %s\nwant %s", byName, want)
	}
	if got, want := run("--model", "stories:latest", "--temp", "0"), run("--model", gguf); got != want {
		t.Errorf("--temp 0 must override the layer's temperature:\n got %s\nwant %s", got, want)
	}
	if byName == run("--model", gguf) {
		t.Error("the sampled run equals the greedy one: the test cannot see the params layer")
	}
}
