package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
)

// --version and the version command print the same one line; the module version and VCS
// revision come from the build information when the build recorded them.
func TestVersion(t *testing.T) {
	_, a, _ := runCLI(t, "", "--version")
	code, b, _ := runCLI(t, "", "version")
	if code != 0 || a != b || !strings.HasPrefix(a, "dflash ") || strings.Count(a, "\n") != 1 {
		t.Errorf("--version %q, version %q (exit %d); want the same single line starting with dflash", a, b, code)
	}
	cases := []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "dflash " + devVersion},
		// A checkout build: the module is (devel), so the fallback version, and its revision.
		{&debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "4c5b5040123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}},
			"dflash " + devVersion + " (revision 4c5b50401234, modified) go1.26"},
		// go install ...@v0.3.1: the module version, no VCS information.
		{&debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "v0.3.1"}}, "dflash v0.3.1 go1.26"},
	}
	for _, c := range cases {
		if got := versionLine(c.bi); got != c.want {
			t.Errorf("versionLine = %q, want %q", got, c.want)
		}
	}
}

// A mistyped command or flag is answered with the nearest name and exit code 2, not the whole
// list of flags.
func TestSuggestions(t *testing.T) {
	cases := []struct {
		args    []string
		want    string
		notWant string
	}{
		{[]string{"srve"}, "Did you mean 'dflash serve'?", "commands:"},
		{[]string{"tokenzie"}, "Did you mean 'dflash tokenize'?", ""},
		{[]string{"run", "--modle", "x"}, "Did you mean --model?", "-top-k"},
		{[]string{"run", "--temperature", "1"}, "Did you mean --temp?", "-top-k"},
		{[]string{"run", "--thread", "2"}, "Did you mean --threads?", "-top-k"},
		{[]string{"tokenize", "--zzz"}, "Run 'dflash tokenize -h' for its flags.", "Did you mean"},
		{[]string{"run", "-n", "x"}, "Run 'dflash run -h'", "-top-k"},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, "", c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || c.notWant != "" && strings.Contains(errs, c.notWant) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 with %q and without %q", c.args, code, errs, c.want, c.notWant)
		}
	}
	// -h still lists every flag.
	if code, _, errs := runCLI(t, "", "run", "-h"); code != 0 || !strings.Contains(errs, "-top-k") {
		t.Errorf("run -h: exit %d, %q; want the flag list", code, errs)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"model", "model", 0}, {"modle", "model", 1}, {"srve", "serve", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"ca", "abc", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	if s, ok := closest("xyz", []string{"run", "serve"}); ok {
		t.Errorf("closest(xyz) = %q, want no suggestion", s)
	}
}

// TestKVCacheLine: dflash show prices a Qwen3-0.6B-shaped model's cache as run and serve make it:
// bf16 for quantized and bf16 weights, f32 for f16 (widened at load) and f32 ones, or under
// --kv-cache f32.
func TestKVCacheLine(t *testing.T) {
	cfg, err := transformer.SyntheticConfig("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{"Q8_0": "bf16, 112 MiB", "Q4_K_M": "bf16, 112 MiB", "BF16": "bf16, 112 MiB", "F16": "f32, 224 MiB", "F32": "f32, 224 MiB"} {
		if got := kvCacheLine(&engine.Description{Config: cfg, DType: typ}); !strings.HasPrefix(got, want) {
			t.Errorf("%s weights: %q, want %q...", typ, got, want)
		}
	}
	defer nn.SetCacheKind(nn.SetCacheKind(nn.CacheF32))
	if got := kvCacheLine(&engine.Description{Config: cfg, DType: "Q8_0"}); !strings.HasPrefix(got, "f32, 224 MiB") {
		t.Errorf("Q8_0 under --kv-cache f32: %q", got)
	}
}
