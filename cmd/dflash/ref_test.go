package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine/ref"
)

// hubSnapshot puts the files of dir into a hub cache as huggingface_hub does: blobs named by
// sha256, snapshot entries as relative symlinks, refs/main naming the commit.
func hubSnapshot(t *testing.T, cache, repo, dir string) {
	t.Helper()
	rd := ref.RepoDir(cache, repo)
	commit := strings.Repeat("c", 40)
	snap := filepath.Join(rd, "snapshots", commit)
	for _, d := range []string{filepath.Join(rd, "blobs"), snap, filepath.Join(rd, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		etag := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(rd, "blobs", etag), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", etag), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A model and its draft named by Hugging Face id run from the hub cache exactly as from their
// folders: resolution changes which files are opened, never what they compute.
func TestRunByHubID(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("OLLAMA_MODELS", t.TempDir())
	hubSnapshot(t, cache, "dflash/tiny", target)
	hubSnapshot(t, cache, "dflash/tiny-DFlash", draft)
	_, byPath, errs := runCLI(t, "", "run", "--model", target, "--draft", draft, "-p", "once upon a time", "-n", "24", "--print-ids", "--compare=false")
	code, byID, errs2 := runCLI(t, "", "run", "--model", "dflash/tiny", "--draft", "dflash/tiny-DFlash", "-p", "once upon a time", "-n", "24", "--print-ids", "--compare=false")
	if code != 0 || byID != byPath || byID == "" {
		t.Fatalf("by id (exit %d) %q, by path %q\n%s\n%s", code, byID, byPath, errs, errs2)
	}
	code, _, errs = runCLI(t, "", "run", "--model", "qwen3:0.6b", "-n", "4")
	if code != 1 || !strings.Contains(errs, "ollama pull qwen3:0.6b") {
		t.Errorf("unknown ollama name: exit %d, %s", code, errs)
	}
	code, _, errs = runCLI(t, "", "run", "--model", "Qwen/Qwen3-0.6B", "-n", "4")
	if code != 1 || !strings.Contains(errs, "dflash pull Qwen/Qwen3-0.6B") || !strings.Contains(errs, cache) {
		t.Errorf("unknown hub id: exit %d, %s", code, errs)
	}
}

// With the default pair in the hub cache beside a "draft" that does not fit (the target itself,
// under a draft's name, sorted first), --draft auto skips the misfit, takes the real draft and
// says so; list and show report the same facts.
func TestDraftAutoListShow(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("OLLAMA_MODELS", t.TempDir())
	hubSnapshot(t, cache, "dflash/tiny", target)
	hubSnapshot(t, cache, "dflash/tiny-DFlash-b16", draft)
	hubSnapshot(t, cache, "other/tiny-dflash-a0", target)
	args := []string{"run", "--model", "dflash/tiny", "-p", "once upon a time", "-n", "24", "--print-ids", "--compare=false"}
	_, want, _ := runCLI(t, "", append(args, "--draft", draft)...)
	code, got, errs := runCLI(t, "", append(args, "--draft", "auto")...)
	if code != 0 || got != want || !strings.Contains(errs, "draft auto: dflash/tiny-DFlash-b16") {
		t.Fatalf("--draft auto: exit %d, %q want %q, %s", code, got, want, errs)
	}
	code, out, errs := runCLI(t, "", "list")
	if code != 0 {
		t.Fatal(errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(out, "draft") {
		t.Fatalf("list:\n%s", out)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "dflash/tiny ") && !strings.HasSuffix(l, "dflash/tiny-DFlash-b16") {
			t.Errorf("list row %q does not name its one fitting draft", l)
		}
	}
	code, out, errs = runCLI(t, "", "show", "dflash/tiny")
	if code != 0 || !strings.Contains(out, "draft       dflash/tiny-DFlash-b16 fits") || !strings.Contains(out, "other/tiny-dflash-a0 does not fit") || !strings.Contains(out, "stop ") {
		t.Errorf("show: exit %d\n%s%s", code, out, errs)
	}
	// A target with no draft in the cache under its name: auto says what it looked for.
	lonely := filepath.Join(t.TempDir(), "lonely")
	if err := os.CopyFS(lonely, os.DirFS(target)); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "", "run", "--model", lonely, "-p", "x", "--draft", "auto")
	if code == 0 || !strings.Contains(errs, "lonely-DFlash*") {
		t.Errorf("auto without drafts: exit %d %s", code, errs)
	}
}
