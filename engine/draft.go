package engine

import (
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
)

// Draft is a loaded draft model attached to an engine's target. Its weights are shared; each
// sequence gets its own drafting session (and so its own draft cache) from NewSession.
type Draft struct {
	DraftInfo
	// NewSession opens a drafting session with room for capacity rows.
	NewSession func(capacity int) runner.Drafter
}

// LoadDraft describes a DFlash or DFlash2 draft folder for the engine's target (DescribeDraft:
// told apart by its config.json, any field that does not fit the target named) and loads it.
func (e *Engine) LoadDraft(dir string) (*Draft, error) {
	di, err := DescribeDraft(dir, e.Target.Config())
	if err != nil {
		return nil, err
	}
	return e.OpenDraft(di)
}

// OpenDraft loads the weights of a described draft.
func (e *Engine) OpenDraft(di DraftInfo) (*Draft, error) {
	if di.Arch == dflash2.Arch {
		d, err := dflash2.Load(di.Dir, e.Target, dflash2.Options{})
		if err != nil {
			return nil, err
		}
		return &Draft{DraftInfo: di, NewSession: func(c int) runner.Drafter { return runner.NewSelectorSession(d, c) }}, nil
	}
	d, err := dflash.Load(di.Dir, e.Target, dflash.Options{})
	if err != nil {
		return nil, err
	}
	return &Draft{DraftInfo: di, NewSession: func(c int) runner.Drafter { return runner.NewSession(d, c) }}, nil
}
