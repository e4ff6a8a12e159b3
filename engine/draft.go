package engine

import (
	"fmt"

	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
)

// Draft is a loaded draft model attached to an engine's target. Its weights are shared; each
// sequence gets its own drafting session (and so its own draft cache) from NewSession.
type Draft struct {
	Dir  string
	Arch string // dflash.Arch or dflash2.Arch
	// BlockSize is B: at most B-1 tokens are drafted a round.
	BlockSize int
	// NewSession opens a drafting session with room for capacity rows.
	NewSession func(capacity int) runner.Drafter
}

// LoadDraft loads a DFlash or DFlash2 draft folder (told apart by its config.json) for the
// engine's target. Loading checks the draft against the target and names any field that does not fit.
func (e *Engine) LoadDraft(dir string) (*Draft, error) {
	is2, err := dflash2.IsDraft(dir)
	if err != nil {
		return nil, fmt.Errorf("draft %s: %w", dir, err)
	}
	if is2 {
		d, err := dflash2.Load(dir, e.Target, dflash2.Options{})
		if err != nil {
			return nil, err
		}
		return &Draft{Dir: dir, Arch: dflash2.Arch, BlockSize: d.BlockSize(), NewSession: func(c int) runner.Drafter { return runner.NewSelectorSession(d, c) }}, nil
	}
	d, err := dflash.Load(dir, e.Target, dflash.Options{})
	if err != nil {
		return nil, err
	}
	return &Draft{Dir: dir, Arch: dflash.Arch, BlockSize: d.BlockSize(), NewSession: func(c int) runner.Drafter { return runner.NewSession(d, c) }}, nil
}
