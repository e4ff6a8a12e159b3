package depthcache

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/dflash/dflash/runner"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := &runner.Controller{}
	for n := range 4 {
		c.Observe(n, n/2, time.Duration(1+n)*time.Millisecond)
	}
	want := c.Learned()
	if err := Save(dir, "k", "a pair", want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v, saved %+v", got, want)
	}
	// Saving again replaces the file and leaves no temporary behind.
	if err := Save(dir, "k", "a pair", runner.Learned{}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "k.json" {
		t.Fatalf("cache folder holds %v, want only k.json", entries)
	}
}

func TestMissingAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, "absent"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want os.ErrNotExist (a cold start)", err)
	}
	for name, body := range map[string]string{
		"truncated": `{"version":1,"learned":{"cost":[{"v":0.001`,
		"garbage":   "\x00\x01 not json",
		"version":   `{"version":99,"learned":{}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir, name); err == nil || errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s file: %v, want an error that is not os.ErrNotExist", name, err)
		}
	}
}

func TestKeyChangesWithWhatCostsDependOn(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.bin")
	folder := filepath.Join(dir, "draft")
	if err := os.WriteFile(model, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "model.safetensors"), []byte("draft"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func(extra ...string) string {
		t.Helper()
		k, _, err := Key([]string{model, folder}, extra...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key("avx2", "2", "0")
	if again := key("avx2", "2", "0"); again != base {
		t.Fatalf("the same setting gave keys %s and %s", base, again)
	}
	seen := map[string]string{base: "base"}
	check := func(what, k string) {
		t.Helper()
		if prev, ok := seen[k]; ok {
			t.Fatalf("%s gives the key of %s", what, prev)
		}
		seen[k] = what
	}
	check("another kernel path", key("go", "2", "0"))
	check("another thread count", key("avx2", "1", "0"))
	check("another temperature", key("avx2", "2", "0.8"))
	if err := os.WriteFile(model, []byte("weights, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a rewritten target", key("avx2", "2", "0"))
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(folder, "model.safetensors"), later, later); err != nil {
		t.Fatal(err)
	}
	check("a draft file touched", key("avx2", "2", "0"))
	if _, _, err := Key([]string{filepath.Join(dir, "nowhere")}); err == nil {
		t.Fatal("a missing model gave a key")
	}
}

// Dir follows DFLASH_CACHE, as the default model's folder does.
func TestDirFollowsDFLASHCACHE(t *testing.T) {
	base := t.TempDir()
	t.Setenv("DFLASH_CACHE", base)
	d, err := Dir()
	if err != nil || d != filepath.Join(base, "costs") {
		t.Fatalf("Dir() = %q, %v; want %q", d, err, filepath.Join(base, "costs"))
	}
}
