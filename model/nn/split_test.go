package nn

import (
	"fmt"
	"github.com/dflash/dflash/kernel"
	"slices"
	"sync"
	"testing"
)

// recordingStack records what each part did and where the joins fell. A part's log holds its
// steps in order; joins go to their own log with how many Opens of that layer came before.
type recordingStack struct {
	mu     sync.Mutex
	steps  map[int][]string // per part index
	opened map[int]int      // per layer: rows opened so far
	joins  []string
	rows   []int // per row: how many times Embed saw it
}

func (s *recordingStack) log(p *Part, step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps[p.Index] = append(s.steps[p.Index], fmt.Sprintf("%s[%d,%d)", step, p.Lo, p.Hi))
}

func (s *recordingStack) Embed(p *Part) {
	s.log(p, "embed")
	s.mu.Lock()
	for r := p.Lo; r < p.Hi; r++ {
		s.rows[r]++
	}
	s.mu.Unlock()
	if len(p.X) != p.Rows*3 || p.Rows != p.Hi-p.Lo {
		panic("part view of the wrong size")
	}
	for i := range p.X {
		p.X[i] = float32(p.Lo*3 + i) // the view starts at the part's first row
	}
}
func (s *recordingStack) Open(p *Part, l int) {
	s.log(p, fmt.Sprintf("open%d", l))
	s.mu.Lock()
	s.opened[l] += p.Rows
	s.mu.Unlock()
}
func (s *recordingStack) Join(l int) {
	s.joins = append(s.joins, fmt.Sprintf("join%d after %d rows", l, s.opened[l]))
}
func (s *recordingStack) Close(p *Part, l int) {
	s.mu.Lock()
	early := len(s.joins) <= l
	s.mu.Unlock()
	if early {
		s.log(p, "early")
	}
	s.log(p, fmt.Sprintf("close%d", l))
}
func (s *recordingStack) Head(p *Part) { s.log(p, "head") }

// TestPhasesOrder: a 7-row forward of 2 layers in 3 parts (rows 0-1, 2-3, 4-6). Each part embeds,
// opens layer 0, closes it, opens layer 1, closes it and runs the head, in that order; layer l
// joins only after all 7 rows opened it, and before any part closes it (Close of layer l runs in
// the phase after Join(l)). Every row is embedded once and each part's view is its own rows.
func TestPhasesOrder(t *testing.T) {
	// The portable path leaves the row split to Parts' own rule (amx keeps such forwards whole).
	defer kernel.SetPath(kernel.Path())
	if err := kernel.SetPath("go"); err != nil {
		t.Fatal(err)
	}
	s := &recordingStack{steps: map[int][]string{}, opened: map[int]int{}, rows: make([]int, 7)}
	ws := NewWorkspace(8, 3, 2, 4)
	ph := NewPhases(s, ws, 2)
	scratch := make(PartScratch, 3)
	ph.Run(scratch, 7)
	want := map[int][]string{
		0: {"embed[0,2)", "open0[0,2)", "close0[0,2)", "open1[0,2)", "close1[0,2)", "head[0,2)"},
		1: {"embed[2,4)", "open0[2,4)", "close0[2,4)", "open1[2,4)", "close1[2,4)", "head[2,4)"},
		2: {"embed[4,7)", "open0[4,7)", "close0[4,7)", "open1[4,7)", "close1[4,7)", "head[4,7)"},
	}
	for i := 0; i < 3; i++ {
		if !slices.Equal(s.steps[i], want[i]) {
			t.Errorf("part %d: %v, want %v", i, s.steps[i], want[i])
		}
	}
	if w := []string{"join0 after 7 rows", "join1 after 7 rows"}; !slices.Equal(s.joins, w) {
		t.Errorf("joins %v, want %v", s.joins, w)
	}
	if !slices.Equal(s.rows, []int{1, 1, 1, 1, 1, 1, 1}) {
		t.Errorf("rows embedded %v times, want once each", s.rows)
	}
	for i := 0; i < 7*3; i++ {
		if ws.X[i] != float32(i) {
			t.Fatalf("X[%d] = %g: the parts' views overlap or miss rows", i, ws.X[i])
		}
	}
}

// TestPartsFollowsTheKernelPath: a path whose multi-row products split their panels across cores
// (kernel.RowSplitFrom > 0) keeps forwards narrower than that in one part; every path splits
// forwards past it, and none splits a forward below splitMinRows.
func TestPartsFollowsTheKernelPath(t *testing.T) {
	defer kernel.SetPath(kernel.Path())
	scratch := make(PartScratch, 2)
	for _, path := range kernel.Paths() {
		if err := kernel.SetPath(path); err != nil {
			t.Fatal(err)
		}
		from := max(splitMinRows, kernel.RowSplitFrom())
		for rows := 1; rows <= 64; rows++ {
			want := 1
			if rows >= from {
				want = 2
			}
			if got := scratch.Parts(rows); got != want {
				t.Errorf("%s: Parts(%d) = %d, want %d (split from %d rows)", path, rows, got, want, from)
			}
		}
	}
}
