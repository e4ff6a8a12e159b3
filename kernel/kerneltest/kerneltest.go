// Package kerneltest helps other packages' tests run against every kernel path this CPU offers.
// It owns nothing but that loop; it must never be imported by non-test code, since switching the
// active path while products run is not safe.
package kerneltest

import (
	"testing"

	"github.com/dflash/dflash/kernel"
)

// ForEachPath runs f as a subtest named after each kernel path the CPU can run (kernel.Paths),
// with that path active, and restores the previously active path afterwards. The subtests run
// one after another; f must not call t.Parallel, because the active path is process-wide.
func ForEachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	prev := kernel.Path()
	defer func() {
		if err := kernel.SetPath(prev); err != nil {
			t.Errorf("restore kernel path: %v", err)
		}
	}()
	for _, name := range kernel.Paths() {
		t.Run(name, func(t *testing.T) {
			if err := kernel.SetPath(name); err != nil {
				t.Fatalf("select kernel path: %v", err)
			}
			f(t)
		})
	}
}
