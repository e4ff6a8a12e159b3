package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/model"
)

// Resolve turns the references in o (the model and its drafts: paths, ollama names, Hugging Face
// ids) into the paths Describe opens, looking in stores (nil: the process's, ref.FromEnv). It is
// the one step before Describe that knows about stores, so Describe and everything after it
// deal in files only. The model's resolution is returned for what a store carries beside the
// files (ollama's template, system prompt and default options); nil for a synthetic model.
func Resolve(o Options, stores *ref.Env) (Options, *ref.Resolved, error) {
	env := ref.FromEnv()
	if stores != nil {
		env = *stores
	}
	var src *ref.Resolved
	if o.Model != "" && o.Synthetic == "" {
		r, err := env.Resolve(o.Model)
		if err != nil {
			return o, nil, fmt.Errorf("model %w", err)
		}
		o.Model, src = r.Path, r
	}
	drafts := make([]string, len(o.Drafts))
	for i, d := range o.Drafts {
		r, err := ResolveDraft(d, &env)
		if err != nil {
			return o, nil, err
		}
		drafts[i] = r
	}
	o.Drafts = drafts
	return o, src, nil
}

// ResolveDraft turns a draft reference (a folder or a Hugging Face id such as
// z-lab/Qwen3-4B-DFlash-b16) into its folder. An ollama store holds no DFlash drafts, so a name
// that resolves there is refused.
func ResolveDraft(d string, stores *ref.Env) (string, error) {
	env := ref.FromEnv()
	if stores != nil {
		env = *stores
	}
	r, err := env.Resolve(d)
	if err != nil {
		return "", fmt.Errorf("draft %w", err)
	}
	if r.Kind == ref.KindOllama {
		return "", fmt.Errorf("draft %s: an ollama model (%s), not a DFlash draft folder", d, r.Path)
	}
	return r.Path, nil
}

// DraftCandidate is a draft in the hub cache named for a target, and whether it fits it.
type DraftCandidate struct {
	Ref  string // its hub id
	Info DraftInfo
	Err  error // why it does not fit (or does not resolve); nil when it fits
}

// DraftCandidates describes each draft the hub cache holds under the target's name
// (ref.Env.DraftCandidates: z-lab's "<target>-DFlash*") against the target's shape, as
// LoadDraft would check it.
func DraftCandidates(target model.Config, targetName string, stores *ref.Env) []DraftCandidate {
	env := ref.FromEnv()
	if stores != nil {
		env = *stores
	}
	var out []DraftCandidate
	for _, ent := range env.DraftCandidates(targetName) {
		c := DraftCandidate{Ref: ent.Name, Err: ent.Err}
		if ent.Err == nil {
			c.Info, c.Err = DescribeDraft(ent.Resolved.Path, target)
		}
		out = append(out, c)
	}
	return out
}

// AutoDraft picks the first draft candidate (by name) that fits the target, or says which were
// found and why none fits.
func AutoDraft(target model.Config, targetName string, stores *ref.Env) (DraftCandidate, error) {
	cands := DraftCandidates(target, targetName, stores)
	var why []error
	for _, c := range cands {
		if c.Err == nil {
			return c, nil
		}
		why = append(why, fmt.Errorf("%s: %w", c.Ref, c.Err))
	}
	if len(cands) == 0 {
		return DraftCandidate{}, fmt.Errorf("--draft auto: no draft named %s-DFlash* in the hub cache (get one with: dflash pull z-lab/%s-DFlash-b16, if z-lab publishes it)",
			shortName(targetName), shortName(targetName))
	}
	return DraftCandidate{}, fmt.Errorf("--draft auto: no draft in the hub cache fits %s: %w", targetName, errors.Join(why...))
}

func shortName(n string) string { return n[strings.LastIndex(n, "/")+1:] }

// RefName is the name drafts are matched against: the hub repository for a hub id, else the
// engine's name (a folder's name).
func (e *Engine) RefName() string {
	if e.Source != nil && e.Source.Kind == ref.KindHF {
		return e.Source.Repo
	}
	return e.Name
}
