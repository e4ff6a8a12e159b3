package backend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine/ref"
)

// A models file may name models by store name: the name stays as written (not joined to the
// file's folder) unless a file of that name sits beside it, and the backend resolves it in the
// stores; a model missing from them is listed as unavailable with how to get it.
func TestModelsFileStoreNames(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The target's snapshot is its folder under a commit, linked as the hub cache links.
	cache := t.TempDir()
	commit := strings.Repeat("a", 40)
	rd := ref.RepoDir(cache, "dflash/tiny")
	if err := os.MkdirAll(filepath.Join(rd, "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(rd, "snapshots", commit)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rd, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(draft, filepath.Join(dir, "local-draft")); err != nil {
		t.Fatal(err)
	}
	mf := filepath.Join(dir, "models.txt")
	if err := os.WriteFile(mf, []byte("tiny dflash/tiny local-draft\nq qwen3:0.6b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := ParseModelsFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].Path != "dflash/tiny" || specs[0].Draft != filepath.Join(dir, "local-draft") || specs[1].Path != "qwen3:0.6b" {
		t.Fatalf("specs %+v", specs)
	}
	stores := &ref.Env{HFCache: cache, OllamaModels: t.TempDir()}
	b, err := New(Options{Models: specs, Stores: stores, SkipBroken: true})
	if err != nil {
		t.Fatal(err)
	}
	ms := b.Models()
	if ms[0].Name != "tiny:latest" || ms[0].Error != "" || ms[0].Draft == "" {
		t.Errorf("hub model: %+v", ms[0])
	}
	if !strings.Contains(ms[1].Error, "ollama pull qwen3:0.6b") {
		t.Errorf("missing ollama model: %+v", ms[1])
	}
	// Without a name of its own a hub model is listed under its id.
	b, err = New(Options{Models: []Spec{{Path: "dflash/tiny"}}, Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.Models()[0].Name; n != "dflash/tiny:latest" {
		t.Errorf("default name %q", n)
	}
}

// "auto" as a models-file draft picks the hub cache's <target>-DFlash* draft that fits.
func TestServeDraftAuto(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	for repo, dir := range map[string]string{"dflash/tiny": target, "z-lab/tiny-DFlash-b16": draft} {
		commit := strings.Repeat("a", 40)
		rd := ref.RepoDir(cache, repo)
		if err := os.MkdirAll(filepath.Join(rd, "refs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(rd, "snapshots"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dir, filepath.Join(rd, "snapshots", commit)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := New(Options{Models: []Spec{{Path: "dflash/tiny", Draft: "auto"}}, Stores: &ref.Env{HFCache: cache, OllamaModels: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if m := b.Models()[0]; m.Draft != "z-lab/tiny-DFlash-b16" {
		t.Errorf("auto draft %q", m.Draft)
	}
}
