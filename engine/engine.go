// Package engine composes what one model needs to turn text into text: the target, its tokenizer,
// chat template and stop tokens, and optionally a draft for speculative decoding. The CLI and the
// server both open models through it, so "what a model folder means" is decided in one place.
//
// It owns no decoding logic (that is the runner's) and no weights or kernels (the models').
package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// Options name what to open.
type Options struct {
	// Model is a Hugging Face folder or a llama2.c checkpoint file. Synthetic, when set instead,
	// names a random-weight model of a real shape ("qwen3-0.6b"): no tokenizer, no files.
	Model     string
	Synthetic string
	// Tokenizer overrides where the tokenizer is read from.
	Tokenizer string
	// Compute selects the weight dtype the kernels use (default: the file's).
	Compute transformer.Compute
	// Seed seeds synthetic weights.
	Seed uint64
}

// Engine is an opened model: everything needed to tokenize, template, decode and stop.
type Engine struct {
	Name   string
	Target model.Target
	// Tok is nil for synthetic models, which are driven by token ids only.
	Tok tokenizer.Tokenizer
	// Chat is the model's chat template, or nil when its folder has none (raw prompts only).
	Chat *chat.Template
	// Stop lists the ids that end generation: the tokenizer's EOS, generation_config.json's
	// eos_token_id and config.json's, and the chat template's end-of-turn token.
	Stop []int
}

// Open loads a model and what belongs with it. Errors name the path and the part that failed.
func Open(o Options) (*Engine, error) {
	if o.Synthetic != "" {
		cfg, err := transformer.SyntheticConfig(o.Synthetic)
		if err != nil {
			return nil, err
		}
		t, err := transformer.Synthetic(cfg, o.Seed)
		if err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", o.Synthetic, err)
		}
		return &Engine{Name: "synthetic-" + o.Synthetic, Target: t, Stop: nil}, nil
	}
	if o.Model == "" {
		return nil, errors.New("no model given (a Hugging Face folder or a llama2.c checkpoint)")
	}
	var (
		t   model.Target
		err error
	)
	if o.Compute != transformer.KeepDType {
		t, err = loadWith(o.Model, o.Compute)
	} else {
		t, err = model.Load(o.Model)
	}
	if err != nil {
		return nil, err
	}
	e := &Engine{Name: filepath.Base(strings.TrimSuffix(o.Model, "/")), Target: t}
	tokPath := o.Tokenizer
	if tokPath == "" {
		tokPath = FindTokenizer(o.Model, t.Config().Vocab)
	}
	if tokPath != "" {
		if e.Tok, err = tokenizer.Load(tokPath); err != nil {
			return nil, err
		}
		if e.Tok.Vocab() > t.Config().Vocab {
			return nil, fmt.Errorf("tokenizer %s has %d tokens but model %s has a vocabulary of %d", tokPath, e.Tok.Vocab(), o.Model, t.Config().Vocab)
		}
	}
	stop := map[int]bool{}
	add := func(ids ...int) {
		for _, id := range ids {
			if id >= 0 && id < t.Config().Vocab {
				stop[id] = true
			}
		}
	}
	add(t.Config().EOS...)
	if e.Tok != nil {
		add(e.Tok.EOS()...)
		if t.Config().Arch == transformer.ArchLlama2C {
			// llama2.c models are trained on stories each preceded by BOS and followed by
			// nothing, so they end a story by predicting BOS; run.c stops there too.
			add(e.Tok.BOS())
		}
	}
	if st, err := os.Stat(o.Model); err == nil && st.IsDir() {
		gc, err := hf.LoadGenerationConfig(o.Model)
		if err != nil {
			return nil, err
		}
		add(gc.EOSTokenIDs...)
		if _, err := os.Stat(filepath.Join(o.Model, "tokenizer_config.json")); err == nil {
			cc, err := chat.LoadConfig(o.Model)
			if err != nil {
				return nil, err
			}
			e.Chat = cc.Template
			if e.Tok != nil && cc.EOSToken != "" {
				if id, ok := e.Tok.TokenID(cc.EOSToken); ok {
					add(id)
				}
			}
		}
	}
	if e.Tok != nil && e.Chat != nil {
		// The end-of-turn token of ChatML templates ends a reply even where the folder's
		// eos lists forget it.
		if id, ok := e.Tok.TokenID("<|im_end|>"); ok {
			add(id)
		}
	}
	for id := range stop {
		e.Stop = append(e.Stop, id)
	}
	sortInts(e.Stop)
	return e, nil
}

func loadWith(path string, c transformer.Compute) (model.Target, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if !st.IsDir() {
		return transformer.LoadLlama2C(path)
	}
	return transformer.LoadHF(path, transformer.Options{DType: c})
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

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
