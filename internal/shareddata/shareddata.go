// Package shareddata finds the shared test data (../shared/data beside the checkout, or the folder
// named by DFLASH_SHARED_DATA) for tests and benchmarks. It never downloads anything: a test whose
// data is absent is skipped with a message saying what is missing and where it was looked for.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Root returns the shared data folder, or "" when none is found. It looks at DFLASH_SHARED_DATA,
// then walks up from the working directory looking for shared/data beside a parent.
func Root() string {
	if d := os.Getenv("DFLASH_SHARED_DATA"); d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		return ""
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		cand := filepath.Join(dir, "shared", "data")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Path returns the path of rel inside the shared data, skipping the test when it is absent.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	root := Root()
	if root == "" {
		tb.Skipf("shared test data not found (set DFLASH_SHARED_DATA or place shared/data beside the checkout); need %s", rel)
	}
	p := filepath.Join(root, rel)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared test data %s absent: %v", p, err)
	}
	return p
}
