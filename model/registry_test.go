package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadDispatch(t *testing.T) {
	// Loaders that report which one ran; the names are private to this test so they cannot clash
	// with the real families registered by model/transformer.
	errHF, errFile := errors.New("hf loader ran"), errors.New("file loader ran")
	Register("TestOnlyForCausalLM", func(string) (Target, error) { return nil, errHF })
	registryMu.Lock()
	prevLlama2C, had := loaders["llama2c"]
	loaders["llama2c"] = func(string) (Target, error) { return nil, errFile }
	registryMu.Unlock()
	defer func() {
		registryMu.Lock()
		delete(loaders, "TestOnlyForCausalLM")
		if had {
			loaders["llama2c"] = prevLlama2C
		} else {
			delete(loaders, "llama2c")
		}
		registryMu.Unlock()
	}()

	dir := t.TempDir()
	hfDir := filepath.Join(dir, "hf")
	os.Mkdir(hfDir, 0o755)
	os.WriteFile(filepath.Join(hfDir, "config.json"), []byte(`{"architectures": ["Unknown", "TestOnlyForCausalLM"]}`), 0o644)
	unknown := filepath.Join(dir, "unknown")
	os.Mkdir(unknown, 0o755)
	os.WriteFile(filepath.Join(unknown, "config.json"), []byte(`{"architectures": ["MambaForCausalLM"]}`), 0o644)
	bin := filepath.Join(dir, "model.bin")
	os.WriteFile(bin, []byte("x"), 0o644)

	tests := []struct {
		name, path string
		want       error  // the loader expected to run
		wantMsg    string // or a fragment of the dispatch error
	}{
		{"folder picks the first registered architecture", hfDir, errHF, ""},
		{"config.json path means its folder", filepath.Join(hfDir, "config.json"), errHF, ""},
		{"other files are llama2.c checkpoints", bin, errFile, ""},
		{"unregistered architecture is named", unknown, nil, "MambaForCausalLM"},
		{"missing path", filepath.Join(dir, "nope"), nil, "nope"},
	}
	for _, tc := range tests {
		_, err := Load(tc.path)
		switch {
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		case tc.want == nil && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
			t.Errorf("%s: err %v, want mention of %q", tc.name, err, tc.wantMsg)
		}
	}
}
