package backend

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/server"
)

// linkSnapshot puts dir in a hub cache as repo at one commit, linked as the cache links.
func linkSnapshot(t *testing.T, cache, repo, dir string) {
	t.Helper()
	commit := strings.Repeat("a", 40)
	rd := ref.RepoDir(cache, repo)
	for _, d := range []string{"refs", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(rd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(dir, filepath.Join(rd, "snapshots", commit)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
}

// /api/tags and /v1/models list the models the stores hold, not only the configured one: the
// hub cache's servable model appears under its id; its draft, which cannot be served alone,
// and a folder that is no model repository do not; a model added to the cache appears once
// the scan is older than scanEvery.
func TestListingsIncludeStoreModels(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, draft, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	linkSnapshot(t, cache, "dflash/tiny", target)
	linkSnapshot(t, cache, "z-lab/tiny-DFlash-b16", draft)
	if err := os.MkdirAll(filepath.Join(cache, "datasets--a--b"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Models: []Spec{{Name: "configured", Path: target}}, Stores: &ref.Env{HFCache: cache, OllamaModels: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(server.Config{}, b, slog.New(slog.DiscardHandler)).Handler())
	defer ts.Close()
	names := func() (tags, openai []string) {
		t.Helper()
		var tr struct {
			Models []struct{ Name string } `json:"models"`
		}
		var or struct {
			Data []struct{ ID string } `json:"data"`
		}
		for u, v := range map[string]any{"/api/tags": &tr, "/v1/models": &or} {
			resp, err := http.Get(ts.URL + u)
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(resp.Body).Decode(v)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range tr.Models {
			tags = append(tags, m.Name)
		}
		for _, m := range or.Data {
			openai = append(openai, m.ID)
		}
		return tags, openai
	}
	want := "configured:latest dflash/tiny:latest"
	tags, openai := names()
	if strings.Join(tags, " ") != want || strings.Join(openai, " ") != want {
		t.Errorf("/api/tags %v, /v1/models %v; want %s", tags, openai, want)
	}

	// A model pulled by someone else shows up after the scan ages out, not before.
	linkSnapshot(t, cache, "dflash/tiny2", target)
	if tags, _ := names(); len(tags) != 2 {
		t.Errorf("rescanned within scanEvery: %v", tags)
	}
	b.scan.mu.Lock()
	b.scan.at = b.scan.at.Add(-scanEvery)
	b.scan.mu.Unlock()
	if tags, _ := names(); strings.Join(tags, " ") != want+" dflash/tiny2:latest" {
		t.Errorf("after the scan aged: %v", tags)
	}
}
