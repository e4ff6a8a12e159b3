package kerneltest

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel"
)

// TestForEachPathVisitsEveryPath: f runs once per available path, with that path active, and
// the path active before is active again afterwards.
func TestForEachPathVisitsEveryPath(t *testing.T) {
	before := kernel.Path()
	var seen []string
	ForEachPath(t, func(t *testing.T) { seen = append(seen, kernel.Path()) })
	if !slices.Equal(seen, kernel.Paths()) {
		t.Errorf("visited %v, want every path %v", seen, kernel.Paths())
	}
	if kernel.Path() != before {
		t.Errorf("active path after ForEachPath is %s, want %s", kernel.Path(), before)
	}
}
