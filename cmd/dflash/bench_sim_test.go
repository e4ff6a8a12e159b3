package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/runner"
)

// bench --acceptance is labelled a simulation, and its tau is the histogram's: with every round
// drawing exactly 3 accepted drafts at depth 7, each full round emits 4 tokens (only the last
// may be cut short by the budget). --acceptance-out writes the measured histogram back in the
// form --acceptance reads: every drafting round accepted 3.
func TestBenchSimulation(t *testing.T) {
	dir := t.TempDir()
	hist := filepath.Join(dir, "three.txt")
	if err := os.WriteFile(hist, []byte("# always 3\n0 0 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "measured.json")
	target, draft := "../../defaultmodel/files/target", "../../defaultmodel/files/draft"
	code, stdout, errs := runCLI(t, "", "bench", "--model", target, "--draft", draft, "--acceptance", hist,
		"--acceptance-out", out, "--depths", "7", "-n", "41", "--prefill", "32", "--reps", "1", "--probe=false", "--verify", "", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r benchReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("no JSON: %v\n%s", err, stdout)
	}
	if len(r.Speculation) != 1 || !strings.Contains(r.Speculation[0].Simulation, "three.txt") {
		t.Fatalf("the figure is not labelled a simulation: %+v", r.Speculation)
	}
	if s := r.Speculation[0]; s.Tau < 3.5 || s.Tau > 4 || s.PlainTokS <= 0 || s.SpecTokS <= 0 {
		t.Errorf("simulated tau %.2f (want about 4), plain %.1f, speculative %.1f", s.Tau, s.PlainTokS, s.SpecTokS)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	a, err := runner.ParseAcceptance(data)
	if err != nil {
		t.Fatal(err)
	}
	// Every round but perhaps the last (cut by the budget) accepted exactly 3.
	var total float64
	for _, c := range a.Counts {
		total += c
	}
	if len(a.Counts) < 4 || a.Counts[3] < total-1 {
		t.Errorf("measured histogram %v: want every drafting round at 3", a.Counts)
	}

	for _, args := range [][]string{
		{"--draft", "oracle", "--acceptance", hist},
		{"--draft", draft, "--acceptance", hist, "--temp", "0.8"},
		{"--acceptance", hist},
		{"--draft", "synthetic:", "--acceptance", hist},
	} {
		base := []string{"bench", "--model", target, "-n", "8", "--prefill", "16", "--reps", "1", "--probe=false", "--verify", ""}
		if code, _, errs := runCLI(t, "", append(base, args...)...); code == 0 {
			t.Errorf("%v: accepted (%s)", args, errs)
		}
	}
}
