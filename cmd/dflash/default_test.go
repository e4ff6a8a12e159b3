package main

import (
	"strings"
	"testing"
)

// With no model named, run uses the embedded default pair (target and DFlash draft), prints the
// story, and ends with the side-by-side summary; speculation changes nothing in the output.
func TestRunDefaultPair(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	code, out, errs := runCLI(t, "", "run", "-n", "40")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, "once upon a time") {
		t.Errorf("output %q does not start with the default prompt", out)
	}
	if !strings.Contains(errs, "summary: 40 tokens, tau ") || !strings.Contains(errs, "plain ") {
		t.Errorf("no side-by-side summary in %q", errs)
	}
	code, spec, _ := runCLI(t, "", "run", "-n", "40", "--print-ids", "--compare=false")
	code2, plain, errs := runCLI(t, "", "run", "-n", "40", "--print-ids", "--draft", "none", "--compare=false")
	if code != 0 || code2 != 0 || spec != plain {
		t.Fatalf("default pair: speculative ids %q differ from plain %q (%s)", spec, plain, errs)
	}
}
