package main

import (
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner/depthcache"
)

// `dflash run --coupled` with a seed prints the same ids with a draft at depth 2, at depth 7 and
// at the controller's depth as without one; without --coupled the drafted run prints other ids
// for this seed, so the flag is what makes the difference.
func TestRunCoupledIgnoresTheDraft(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := transformer.LoadLlama2C(bin)
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(t.TempDir(), "dflash")
	if err := dflash.WriteRandom(d, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DFLASH_CACHE", t.TempDir())
	base := []string{"run", "--model", bin, "-p", "Once upon a time", "-n", "80", "--print-ids", "--temp", "1", "--top-p", "0.95", "--seed", "12"}
	run := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, "", append(base, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		return out
	}
	want := run("--coupled")
	for _, depth := range []string{"2", "7", "auto"} {
		if got := run("--coupled", "--draft", d, "--depth", depth); got != want {
			t.Errorf("coupled, depth %s: ids differ from the plain coupled run\n got %s\nwant %s", depth, got, want)
		}
	}
	if plain, drafted := run(), run("--draft", d, "--depth", "7"); plain == drafted {
		t.Errorf("rejection sampling gave the plain ids with the draft too: the seed does not tell the two apart")
	}
}

// `dflash serve` keeps a drafted pair's depth costs in the user cache's costs/ folder when it
// stops, where the next serve of the pair starts from them (the backend's tests check the warm
// start itself).
func TestServeKeepsDepthCosts(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	target, err := transformer.LoadLlama2C(bin)
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(t.TempDir(), "dflash")
	if err := dflash.WriteRandom(d, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DFLASH_CACHE", t.TempDir())
	dir, err := depthcache.Dir()
	if err != nil {
		t.Fatal(err)
	}
	url, stop := startServe(t, "--model", bin, "--draft", d, "--name", "stories")
	if code, body := postJSON(t, url+"/api/generate", `{"model":"stories","prompt":"Once upon a time","raw":true,"stream":false,"options":{"temperature":0,"num_predict":40}}`); code != 200 {
		t.Fatalf("/api/generate: %d %s", code, body)
	}
	if code, logs := stop(); code != 0 {
		t.Fatalf("serve exited with %d: %s", code, logs)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("costs folder %s holds %v (%v), want one file for the pair", dir, files, err)
	}
}
