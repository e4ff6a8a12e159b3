// Package engine decides what a model reference means and opens it. Describe reads every file of
// a model except its weights, once, into a Description (family, shape, parameters, dtype,
// context, tokenizer, chat template and its fallback, stop ids, fitting drafts); Load then reads
// the weights. The CLI and the server both go through it, so no other package parses a model's
// config.json, tokenizer_config.json, generation_config.json or checkpoint header to learn what
// the model is.
//
// It owns no decoding logic (that is the runner's) and no weights or kernels (the models').
package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// Options name what to open.
type Options struct {
	// Model is a reference (ref.Env.Resolve): a Hugging Face folder, a llama2.c checkpoint
	// file, an ollama name or a Hugging Face id. Synthetic, when set instead,
	// names a random-weight model of a real shape ("qwen3-0.6b"): no tokenizer, no files.
	Model     string
	Synthetic string
	// Tokenizer overrides where the tokenizer is read from.
	Tokenizer string
	// Drafts name drafts (folders or Hugging Face ids) to describe with the model (each
	// checked to fit it).
	Drafts []string
	// Stores are where names are looked up (nil: the process's, ref.FromEnv).
	Stores *ref.Env
	// Compute selects the weight dtype the kernels use (default: the file's).
	Compute transformer.Compute
	// Seed seeds synthetic weights.
	Seed uint64
}

// Engine is an opened model: everything needed to tokenize, template, decode and stop.
type Engine struct {
	// Desc is what the model is; the fields below repeat its parts most callers use.
	Desc   *Description
	Name   string
	Target model.Target
	// Tok is nil for synthetic models, which are driven by token ids only.
	Tok tokenizer.Tokenizer
	// Chat is the model's own chat template, or nil when its folder has none (Desc.Template
	// holds the fallback chosen then).
	Chat *chat.Template
	// Stop lists the ids that end generation (Description.Stop).
	Stop []int
	// Source is how the reference resolved (nil for a synthetic model): for an ollama name it
	// carries the store's template, system prompt and default options.
	Source *ref.Resolved
}

// Open resolves a model reference, describes the model, validates its weights' headers and
// loads it. Errors name the path and the part that failed.
func Open(o Options) (*Engine, error) {
	given := o.Model
	o, src, err := Resolve(o, o.Stores)
	if err != nil {
		return nil, err
	}
	d, err := Describe(o)
	if err != nil {
		return nil, err
	}
	if src != nil && src.Kind != ref.KindPath {
		// A store's file names are digests and commit hashes: the name the user typed is the
		// one to show.
		d.Ref, d.Name = given, src.Name
	}
	if src != nil && src.Kind == ref.KindOllama {
		if err := d.ApplyOllama(src.Ollama); err != nil {
			return nil, err
		}
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	e, err := d.Load(o.Compute)
	if err != nil {
		return nil, err
	}
	e.Source = src
	return e, nil
}

// Load reads the target's weights; everything else comes from the description.
func (d *Description) Load(c transformer.Compute) (*Engine, error) {
	var (
		t   model.Target
		err error
	)
	switch {
	case d.Format == FormatSynthetic && d.hybrid != nil:
		if t, err = qwen35.Synthetic(*d.hybrid, d.seed); err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", d.Ref, err)
		}
	case d.Format == FormatSynthetic:
		if t, err = transformer.Synthetic(d.Config, d.seed); err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", d.Ref, err)
		}
	case d.Format == FormatGGUF:
		t, err = transformer.LoadGGUF(d.Path, transformer.Options{DType: c})
	case d.hybrid != nil && d.hf != nil:
		t, err = qwen35.LoadHF(d.Path, transformer.Options{DType: c})
	case d.hf != nil:
		t, err = transformer.LoadHFConfig(d.Path, d.hf, transformer.Options{DType: c})
	default:
		// A llama2.c checkpoint is f32 and stays so: there is no dtype to choose.
		t, err = transformer.LoadLlama2C(d.Path)
	}
	if err != nil {
		return nil, err
	}
	e := &Engine{Desc: d, Name: d.Name, Target: t, Tok: d.Tok, Stop: d.Stop}
	if d.Template.Kind == TemplateModel {
		e.Chat = d.Template.Chat
	}
	return e, nil
}

// FindTokenizer looks for the tokenizer of a model: inside a folder, or beside a checkpoint file
// as tokenizer.bin or llama2.c's tok<vocab>.bin convention (any single tok*.bin when vocab is 0,
// unknown). It returns "" when there is none.
func FindTokenizer(modelPath string, vocab int) string {
	st, err := os.Stat(modelPath)
	if err != nil {
		return ""
	}
	if st.IsDir() {
		for _, n := range []string{"tokenizer.json", "tokenizer.model", "tokenizer.bin"} {
			if _, err := os.Stat(filepath.Join(modelPath, n)); err == nil {
				return modelPath
			}
		}
		return ""
	}
	dir := filepath.Dir(modelPath)
	for _, n := range []string{"tokenizer.bin", fmt.Sprintf("tok%d.bin", vocab)} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "tok*.bin")); vocab == 0 && len(m) == 1 {
		return m[0]
	}
	return ""
}

// EncodePrompt tokenizes raw prompt text, adding BOS where the tokenizer expects it.
func (e *Engine) EncodePrompt(text string) ([]int, error) {
	if e.Tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer: give the prompt as token ids", e.Name)
	}
	ids := e.Tok.Encode(text)
	if e.Tok.AddBOS() && e.Tok.BOS() >= 0 {
		ids = append([]int{e.Tok.BOS()}, ids...)
	}
	return ids, nil
}
