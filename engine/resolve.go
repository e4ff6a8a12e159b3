package engine

import (
	"fmt"

	"github.com/dflash/dflash/engine/ref"
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
