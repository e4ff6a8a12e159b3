package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner/depthcache"
)

// A draft folder on the command line, DFlash or DFlash2 (told apart by its config), speculates for
// the target; whatever a random draft proposes, greedy output is the plain output.
func TestRunWithDraftFoldersEqualsPlain(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := transformer.LoadLlama2C(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d1 := filepath.Join(dir, "dflash")
	if err := dflash.WriteRandom(d1, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	d2 := filepath.Join(dir, "dflash2")
	if err := dflash2.WriteRandom(d2, target.Config(), dflash2.ConfigFor(target.Config(), 1, 8), 4, kernel.F32); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--model", bin, "-p", "Once upon a time", "-n", "80", "--print-ids"}
	code, want, errs := runCLI(t, "", base...)
	if code != 0 {
		t.Fatalf("plain: %s", errs)
	}
	for _, d := range []string{d1, d2} {
		for _, depth := range []string{"0", "5"} {
			code, got, errs := runCLI(t, "", append(base, "--draft", d, "--depth", depth)...)
			if code != 0 {
				t.Fatalf("%s depth %s: exit %d: %s", d, depth, code, errs)
			}
			if got != want {
				t.Errorf("%s depth %s: speculative ids differ from plain\n got %s\nwant %s", filepath.Base(d), depth, got, want)
			}
			if !strings.Contains(errs, "tau") {
				t.Errorf("%s: no speculation summary in %q", d, errs)
			}
		}
	}
	// A draft built for another target is refused with the field that does not fit.
	other := dflash.ConfigFor(target.Config(), 1, 8)
	other.Hidden = 32
	bad := filepath.Join(dir, "bad")
	if err := dflash.WriteRandom(bad, other, 1, kernel.F32); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "", append(base, "--draft", bad)...)
	if code != 1 || !strings.Contains(errs, "hidden") {
		t.Errorf("mismatched draft: exit %d, %q; want exit 1 naming hidden_size", code, errs)
	}
}

// --stop ends `dflash run`'s output at the first occurrence of the text, plain or speculative
// alike, through the runner's one stop matcher; the stop text is not printed.
func TestRunStopString(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := transformer.LoadLlama2C(bin)
	if err != nil {
		t.Fatal(err)
	}
	d1 := filepath.Join(t.TempDir(), "dflash")
	if err := dflash.WriteRandom(d1, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--model", bin, "-p", "Once upon a time", "-n", "80"}
	code, full, errs := runCLI(t, "", base...)
	if code != 0 {
		t.Fatalf("plain: %s", errs)
	}
	// Stop at the second word after the prompt: a string that spans tokens and appears late
	// enough that text was printed before it.
	rest := strings.TrimPrefix(full, "Once upon a time")
	words := strings.Fields(rest)
	if len(words) < 4 {
		t.Fatalf("too short an output to pick a stop: %q", full)
	}
	stop := " " + words[2] + " " + words[3]
	cut := strings.Index(full, stop)
	if cut < 0 {
		t.Fatalf("stop %q not in %q", stop, full)
	}
	want := full[:cut] + "\n"
	for _, extra := range [][]string{nil, {"--draft", d1}} {
		code, got, errs := runCLI(t, "", append(append(base, "--stop", stop), extra...)...)
		if code != 0 {
			t.Fatalf("--stop %v: exit %d: %s", extra, code, errs)
		}
		if got != want {
			t.Errorf("--stop %q %v:\n got %q\nwant %q", stop, extra, got, want)
		}
	}
}

// With the depth controller (the default for a DFlash draft, or --depth auto), a run leaves what
// it learned in DFLASH_CACHE/costs for the next run of the same pair; a corrupt file is a
// warning, never a failed run, and is rewritten. A fixed depth keeps no file.
func TestRunKeepsControllerCosts(t *testing.T) {
	cacheDir := t.TempDir()
	t.Setenv("DFLASH_CACHE", cacheDir)
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := transformer.LoadLlama2C(bin)
	if err != nil {
		t.Fatal(err)
	}
	draft := filepath.Join(t.TempDir(), "dflash")
	if err := dflash.WriteRandom(draft, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--model", bin, "-p", "Once upon a time", "-n", "30", "--print-ids", "--draft", draft}
	costs := filepath.Join(cacheDir, "costs")
	if code, _, errs := runCLI(t, "", append(base, "--depth", "3")...); code != 0 {
		t.Fatalf("fixed depth: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(costs); !os.IsNotExist(err) {
		t.Fatalf("a fixed-depth run wrote the controller cache (%v)", err)
	}
	code, want, errs := runCLI(t, "", base...)
	if code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("first run: exit %d: %s", code, errs)
	}
	files, _ := filepath.Glob(filepath.Join(costs, "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	l, err := depthcache.Load(costs, strings.TrimSuffix(filepath.Base(files[0]), ".json"))
	if err != nil || len(l.Cost) == 0 || l.Cost[0].N == 0 {
		t.Fatalf("cache holds %+v, %v: want plain decoding's measured cost at least", l, err)
	}
	if err := os.WriteFile(files[0], []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, got, errs := runCLI(t, "", append(base, "--depth", "auto")...)
	if code != 0 || !strings.Contains(errs, "warning: depth controller starts cold") {
		t.Fatalf("corrupt cache: exit %d, stderr %q; want success with a warning", code, errs)
	}
	if got != want {
		t.Fatalf("output changed with the cache: %s, then %s", want, got)
	}
	if _, err := depthcache.Load(costs, strings.TrimSuffix(filepath.Base(files[0]), ".json")); err != nil {
		t.Fatalf("the corrupt file was not rewritten: %v", err)
	}
	if code, _, errs := runCLI(t, "", append(base, "--depth", "-1")...); code != 2 {
		t.Fatalf("--depth -1: exit %d, %s; want a usage error", code, errs)
	}
}
