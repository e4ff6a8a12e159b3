package backend_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/internal/shareddata"
)

// TestJSClients runs test/js/run.sh (the official ollama and openai npm clients) against the fake
// backend and against `dflash serve` with stories260K. It needs node and the installed clients
// (CI runs `npm ci` in test/js first) and skips without them.
func TestJSClients(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: JS client tests build and start servers")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: JS client compatibility not tested")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(root, "test/js/node_modules")); err != nil {
		t.Skip("test/js/node_modules absent: run `npm ci` in test/js to test the JS clients")
	}
	cases := []struct {
		name  string
		model func(t *testing.T) string // "" for the fake backend
	}{
		{"fake", func(*testing.T) string { return "" }},
		{"stories260K", func(t *testing.T) string { return shareddata.Path(t, storiesRel) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model := c.model(t)
			cmd := exec.Command("bash", filepath.Join(root, "test/js/run.sh"))
			cmd.Env = append(os.Environ(), "DFLASH_URL=", "DFLASH_REAL_MODEL="+model)
			if model != "" {
				// The default target, served by a fake hub, is what the server pulls.
				t.Setenv("DFLASH_CACHE", t.TempDir())
				target, _, err := defaultmodel.Dirs()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Env = append(cmd.Env, "DFLASH_PULL_DIR="+target, "DFLASH_CACHE="+os.Getenv("DFLASH_CACHE"))
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("test/js/run.sh (DFLASH_REAL_MODEL=%q): %v\n%s", model, err, out)
			}
		})
	}
}
