package backend_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/runner/depthcache"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// TestModelKeepsControllerCosts: a served model pair's depth controller starts from what an
// earlier load of the same pair learned and saves what it learns when it unloads, as `dflash run`
// does, in one file per pair of the backend's depth cache. A fresh load before any request already
// holds the saved costs; another pair (a DFlash2 draft, whose depth is fixed) writes nothing, and
// without a cache folder nothing is read or written.
func TestModelKeepsControllerCosts(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	draft := randomDraft(t, bin)
	dir := t.TempDir()
	load := func(cacheDir, draft string) *backend.Model {
		t.Helper()
		b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "stories", Path: bin, Draft: draft}}, DepthCache: cacheDir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := b.Load(context.Background(), "stories:latest")
		if err != nil {
			t.Fatal(err)
		}
		return m.(*backend.Model)
	}
	closeModel := func(m *backend.Model) {
		t.Helper()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	files := func() []string {
		t.Helper()
		fs, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}

	m := load(dir, draft)
	if l := m.Learned(); len(l.Cost) != 0 {
		t.Fatalf("the first load of the pair starts warm: %+v", l)
	}
	for i := range 3 {
		if _, err := m.Generate(context.Background(), server.GenRequest{Prompt: []int{1, 403, 407, 261}, MaxTokens: 60,
			Options: sample.Options{Seed: uint64(i)}}, func(server.Token) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Learned().Cost) == 0 {
		t.Fatal("three greedy requests taught the controller nothing: nothing to keep")
	}
	closeModel(m)
	saved := files()
	if len(saved) != 1 {
		t.Fatalf("after one pair unloaded the cache holds %v, want one file", saved)
	}

	m = load(dir, draft)
	warm := m.Learned()
	measured := 0
	for _, c := range warm.Cost {
		if c.N > 0 {
			measured++
		}
	}
	if measured == 0 {
		t.Fatalf("the second load did not start from the saved costs: %+v", warm)
	}
	closeModel(m)

	// The same pair without a cache folder: cold, and nothing written.
	cold := load("", draft)
	if l := cold.Learned(); len(l.Cost) != 0 {
		t.Fatalf("a backend without a depth cache started warm: %+v", l)
	}
	closeModel(cold)
	// A DFlash2 draft drafts a fixed depth: no controller, no file.
	fixed := load(dir, randomDraft2(t, bin))
	closeModel(fixed)
	if got := files(); len(got) != 1 {
		t.Fatalf("after the fixed-depth pair the cache holds %v, want still one file", got)
	}
	// The file is one depthcache reads back, holding the costs the second load started from.
	kept, err := depthcache.Load(dir, strings.TrimSuffix(filepath.Base(saved[0]), ".json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept.Cost) != len(warm.Cost) {
		t.Fatalf("the saved file has %d depths' costs, the warm controller %d", len(kept.Cost), len(warm.Cost))
	}
}
