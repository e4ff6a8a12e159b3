package engine

import (
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
)

// Draft is a loaded draft model attached to an engine's target. Its weights are shared; each
// sequence gets its own drafting session (and so its own draft cache) from Drafter.Open.
type Draft struct {
	DraftInfo
	// Drafter is the draft's long-lived side: it opens one session per sequence and holds the
	// depth policy (an adaptive controller for DFlash, a fixed depth for DFlash2).
	Drafter runner.Drafter
}

// LoadDraft resolves a draft reference (a folder, a Hugging Face id, or "auto": AutoDraft),
// describes the DFlash or DFlash2 draft for the engine's target (DescribeDraft: told apart by
// its config.json, any field that does not fit the target named) and loads it.
func (e *Engine) LoadDraft(draft string) (*Draft, error) {
	if draft == "auto" {
		c, err := AutoDraft(e.Target.Config(), e.RefName(), nil)
		if err != nil {
			return nil, err
		}
		d, err := e.OpenDraft(c.Info)
		if d != nil {
			d.Name = c.Ref
		}
		return d, err
	}
	dir, err := ResolveDraft(draft, nil)
	if err != nil {
		return nil, err
	}
	di, err := DescribeDraft(dir, e.Target.Config())
	if err != nil {
		return nil, err
	}
	return e.OpenDraft(di)
}

// OpenDraft loads the weights of a described draft; a target that cannot speculate yet
// (CheckSpeculation) is refused before any weight is read.
func (e *Engine) OpenDraft(di DraftInfo) (*Draft, error) {
	if e.Desc != nil {
		if err := e.Desc.CheckSpeculation(); err != nil {
			return nil, err
		}
	}
	if di.Arch == dflash2.Arch {
		d, err := dflash2.Load(di.Dir, e.Target, dflash2.Options{})
		if err != nil {
			return nil, err
		}
		return &Draft{DraftInfo: di, Drafter: runner.NewSelectorDrafter(d)}, nil
	}
	d, err := dflash.Load(di.Dir, e.Target, dflash.Options{})
	if err != nil {
		return nil, err
	}
	return &Draft{DraftInfo: di, Drafter: runner.NewBlockDrafter(d)}, nil
}
