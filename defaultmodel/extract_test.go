package defaultmodel

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func TestMaterializeCopiesOnceAndRedoesPartialCopies(t *testing.T) {
	fsys := fstest.MapFS{
		"target/config.json": {Data: []byte(`{"a":1}`)},
		"draft/config.json":  {Data: []byte(`{"b":2}`)},
	}
	root := t.TempDir()
	dir, err := materialize(fsys, root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "draft", "config.json"))
	if err != nil || string(got) != `{"b":2}` {
		t.Fatalf("extracted %q, %v", got, err)
	}
	// A second call finds the finished copy and returns the same folder.
	again, err := materialize(fsys, root)
	if err != nil || again != dir {
		t.Fatalf("second call: %s, %v; want %s", again, err, dir)
	}
	// A copy without its manifest (interrupted before the rename finished) is redone.
	if err := os.Remove(filepath.Join(dir, manifestName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "target", "config.json")); err != nil {
		t.Fatal(err)
	}
	if dir2, err := materialize(fsys, root); err != nil || dir2 != dir {
		t.Fatalf("redo: %s, %v", dir2, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "target", "config.json")); err != nil {
		t.Errorf("partial copy was not redone: %v", err)
	}
	// Different content lands in a different folder, so an upgrade never reads stale weights.
	fsys["target/config.json"] = &fstest.MapFile{Data: []byte(`{"a":2}`)}
	other, err := materialize(fsys, root)
	if err != nil || other == dir {
		t.Errorf("changed content: %s, %v; want a new folder", other, err)
	}
	// The older version's folder is gone; a folder this package did not write stays.
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the older copy %s is still there (%v)", dir, err)
	}
	foreign := filepath.Join(root, "default-mine")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if again, err := materialize(fsys, root); err != nil || again != other {
		t.Fatalf("third call: %s, %v; want %s", again, err, other)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a folder without a manifest was removed: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(other, "target", "config.json")); err != nil || string(got) != `{"a":2}` {
		t.Errorf("new copy holds %q, %v", got, err)
	}
	if _, err := materialize(fstest.MapFS{}, root); err == nil {
		t.Error("an empty FS must be an error")
	}
}
