package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/engine/ref/hubtest"
)

// The default pair, served by a fake hub, is pulled into an empty cache and then run by its
// ids: the same ids as from its folders. A second pull fetches nothing, and offline pulls make
// no request at all.
func TestPullThenRunByID(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	th := hubtest.New(t, "dflash/tiny", hubtest.FromDir(t, target))
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("OLLAMA_MODELS", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")

	t.Setenv("HF_ENDPOINT", th.URL)
	code, out, errs := runCLI(t, "", "pull", "dflash/tiny")
	if code != 0 {
		t.Fatalf("pull: exit %d: %s", code, errs)
	}
	snap := strings.Fields(out)[1]
	if _, err := os.Stat(filepath.Join(snap, "model.safetensors")); err != nil || !strings.HasPrefix(snap, cache) {
		t.Fatalf("pull printed %q: %v", out, err)
	}
	for _, want := range []string{"config.json", "model.safetensors", "fetched", "5/5 files"} {
		if !strings.Contains(errs, want) {
			t.Errorf("progress %q lacks %q", errs, want)
		}
	}
	th.Reset()
	if code, _, errs = runCLI(t, "", "pull", "dflash/tiny"); code != 0 || !strings.Contains(errs, "cached") || th.Count("/dflash/tiny/resolve/") != 0 {
		t.Errorf("second pull: exit %d, %s, requests %v", code, errs, th.Requests())
	}

	dh := hubtest.New(t, "dflash/tiny-DFlash", hubtest.FromDir(t, draft))
	t.Setenv("HF_ENDPOINT", dh.URL)
	t.Setenv("HF_HUB_OFFLINE", "1")
	if code, _, errs = runCLI(t, "", "pull", "dflash/tiny-DFlash"); code != 1 || !strings.Contains(errs, "HF_HUB_OFFLINE") || len(dh.Requests()) != 0 {
		t.Errorf("offline pull of an uncached draft: exit %d, %s, requests %v", code, errs, dh.Requests())
	}
	t.Setenv("HF_HUB_OFFLINE", "")
	if code, _, errs = runCLI(t, "", "pull", "--parallel", "1", "dflash/tiny-DFlash"); code != 0 {
		t.Fatalf("pull draft: %s", errs)
	}

	_, byPath, _ := runCLI(t, "", "run", "--model", target, "--draft", draft, "-p", "once upon a time", "-n", "24", "--print-ids", "--compare=false")
	code, byID, errs := runCLI(t, "", "run", "--model", "dflash/tiny", "--draft", "dflash/tiny-DFlash", "-p", "once upon a time", "-n", "24", "--print-ids", "--compare=false")
	if code != 0 || byID != byPath {
		t.Fatalf("run by pulled ids (exit %d) %q, by path %q: %s", code, byID, byPath, errs)
	}
	if code, _, errs = runCLI(t, "", "pull", "qwen3:0.6b"); code != 2 || !strings.Contains(errs, "ollama pull") {
		t.Errorf("pull of an ollama name: exit %d, %s", code, errs)
	}
}

// On a terminal the printer redraws one line per file under way and a total line, moving back
// over what it drew last; a finished file leaves the block.
func TestPullPrinterRedraws(t *testing.T) {
	var b strings.Builder
	p := newPullPrinter(&b, true)
	p.update(ref.Progress{File: "model.safetensors", Done: 512, Size: 1024, Attempt: 1, TotalFiles: 2, TotalSize: 1034})
	p.update(ref.Progress{File: "config.json", Done: 10, Size: 10, Finished: true, TotalFiles: 2, TotalSize: 1034})
	out := b.String()
	first, second, _ := strings.Cut(out, "\x1b[2A")
	if !strings.Contains(first, "model.safetensors") || !strings.Contains(first, " 50%") || !strings.Contains(first, "0/2 files") {
		t.Errorf("first draw %q", first)
	}
	if strings.Contains(second, "config.json") || !strings.Contains(second, "1/2 files") || !strings.Contains(second, "model.safetensors") {
		t.Errorf("redraw %q", second)
	}
}
