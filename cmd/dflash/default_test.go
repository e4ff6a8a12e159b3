package main

import (
	"io"
	"strings"
	"testing"

	"github.com/dflash/dflash/sample"
)

// With no model named, run uses the embedded default pair (target and DFlash draft), says how it
// samples, prints the story, and ends with the side-by-side summary. Greedy (--temp 0),
// speculation changes nothing in the output.
func TestRunDefaultPair(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	code, out, errs := runCLI(t, "", "run", "-n", "40")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, "once upon a time") {
		t.Errorf("output %q does not start with the default prompt", out)
	}
	if !strings.Contains(errs, "sampling coupled: temperature 0.8, top-p 0.95, repeat penalty 1.1 over the last 64 tokens, seed 1 ") {
		t.Errorf("the sampling settings and seed are not printed in %q", errs)
	}
	if !strings.Contains(errs, "summary: 40 tokens, tau ") || !strings.Contains(errs, "plain ") {
		t.Errorf("no side-by-side summary in %q", errs)
	}
	code, spec, _ := runCLI(t, "", "run", "-n", "40", "--temp", "0", "--print-ids", "--compare=false")
	code2, plain, errs := runCLI(t, "", "run", "-n", "40", "--temp", "0", "--print-ids", "--draft", "none", "--compare=false")
	if code != 0 || code2 != 0 || spec != plain {
		t.Fatalf("default pair, greedy: speculative ids %q differ from plain %q (%s)", spec, plain, errs)
	}
	if strings.Contains(errs, "sampling:") {
		t.Errorf("--temp 0 still reports sampling: %q", errs)
	}
}

// The default run's sampling settings: each applies only when its flag is not given, and an
// explicit --temp 0 is the greedy run, untouched.
func TestDefaultSamplingFlags(t *testing.T) {
	parse := func(args ...string) (sample.Options, bool) {
		t.Helper()
		fs := newFlags("run", io.Discard)
		var sf sampleFlags
		sf.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		ok := defaultSampling(fs, &sf.o)
		if err := sf.o.Validate(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return sf.o, ok
	}
	o, ok := parse()
	want := sample.Options{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1.1, Seed: defaultSeed, Coupled: true}
	if !ok || o != want {
		t.Errorf("no flags: %+v (sampling %v), want %+v", o, ok, want)
	}
	if o.PenaltyWindow != 0 || sample.DefaultPenaltyWindow != 64 {
		t.Errorf("penalty window %d (default %d), want ollama's 64", o.PenaltyWindow, sample.DefaultPenaltyWindow)
	}
	o, ok = parse("--seed", "7", "--temp", "1", "--repeat-penalty", "1", "--coupled=false")
	if want := (sample.Options{Temperature: 1, TopP: 0.95, RepeatPenalty: 1, Seed: 7}); !ok || o != want {
		t.Errorf("flags given: %+v (sampling %v), want %+v", o, ok, want)
	}
	if o, ok = parse("--temp", "0"); ok || o != (sample.Options{}) {
		t.Errorf("--temp 0: %+v (sampling %v), want plain greedy options", o, ok)
	}
}

// The default run's seed reproduces its story, with the draft at the controller's depths and
// without the draft alike (coupled sampling), and another seed tells another.
func TestRunDefaultSeedRepeats(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	run := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, "", append([]string{"run", "-n", "48", "--print-ids", "--compare=false"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		return out
	}
	first, again := run(), run()
	if first != again {
		t.Fatalf("the default seed gave two outputs:\n%s\n%s", first, again)
	}
	if plain := run("--draft", "none"); plain != first {
		t.Errorf("without the draft the default seed gave %q, with it %q", plain, first)
	}
	if explicit := run("--seed", "1"); explicit != first {
		t.Errorf("--seed 1 (the default seed) gave %q, the default run %q", explicit, first)
	}
	if other := run("--seed", "2"); other == first {
		t.Errorf("--seed 2 repeats the default seed's output %q", first)
	}
	if greedy := run("--temp", "0"); greedy == first {
		t.Errorf("--temp 0 gives the sampled output %q", first)
	}
}
