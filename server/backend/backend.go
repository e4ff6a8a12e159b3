// Package backend implements server.Backend over the real engine: it opens the models named on
// the command line (engine.Open, engine.LoadDraft for DFlash and DFlash2 drafts), keeps one runner.Sequence per
// loaded model so a conversation that continues reuses its cached prefix, and maps the server's
// sampling options, streaming and counters onto the runner.
//
// It owns the bridge only: no HTTP (the server's), no decoding logic (the runner's), no weights
// (the models'). It must never panic on a request, and never let two forwards run on one target
// at once (a target's workspace is shared by its forwards).
//
// Models file format (ParseModelsFile): one model per line, "name path [draft]", fields separated
// by spaces or tabs; blank lines and lines starting with '#' are ignored; a relative path is
// relative to the file's folder. The path and draft may be references instead (an ollama name,
// a Hugging Face id: engine.Resolve), kept as written unless a file of that name sits beside the
// models file. A name without a tag gets ":latest".
package backend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/server"
)

// DefaultContext caps a model's context length unless Options.Context says otherwise, so a large
// model does not reserve gigabytes of cache for conversations that never get that long.
const DefaultContext = 4096

// Spec names one model to serve.
type Spec struct {
	Name  string // request name; default the file or folder name with ":latest"
	Path  string // a model reference: a folder, a checkpoint file, an ollama name, a Hugging Face id
	Draft string // a DFlash draft folder or Hugging Face id, "auto" (engine.AutoDraft), "" for plain decoding
}

// Options configure a Backend.
type Options struct {
	Models []Spec
	// Context caps every model's context length (default DefaultContext; the model's own
	// maximum if lower).
	Context int
	// SkipBroken lists a model that fails its startup checks as unavailable (ModelInfo.Error)
	// instead of refusing the whole configuration; its requests are refused with that error.
	// New still fails when no model is left.
	SkipBroken bool
	// Stores are where model names are looked up (nil: the process's, ref.FromEnv).
	Stores *ref.Env
	// Pull overrides where /api/pull downloads from (zero fields: the environment's).
	Pull PullOptions
	// DepthCache is the folder where each model pair's adaptive depth controller keeps what it
	// learned (runner/depthcache; depthcache.Dir() is the user cache's, which `dflash run`
	// shares): a loaded model's controller starts from it and saves to it. Empty: every load
	// starts cold and nothing is written.
	DepthCache string
	// Parallel is how many generations each model decodes together (dflash serve --parallel);
	// 0 derives it per model from the memory a sequence needs (AutoParallel).
	Parallel int
}

// PullOptions say where the backend's pulls go: the hub endpoint and token (default HF_ENDPOINT,
// HF_TOKEN) and offline mode (HF_HUB_OFFLINE); the cache is Stores' hub cache.
type PullOptions struct {
	Endpoint, Token string
	Offline         bool
}

// Backend serves the configured models. It is safe for concurrent use: after New the lists
// change only by appending (a pull adds a model), under mu.
type Backend struct {
	ctx        int
	parallel   int // Options.Parallel
	stores     *ref.Env
	pull       PullOptions
	depthCache string

	scan scanState

	mu    sync.RWMutex
	specs []Spec

	descs []*engine.Description // by spec; nil for a broken one (SkipBroken)
	infos []server.ModelInfo    // by spec, from descs
	errs  []error               // by spec: why a broken model is unavailable
}

// New checks the specs (unique names, paths that exist), describes each model and its draft
// (engine.Describe) and validates their weights' headers (Description.Validate) without reading
// weights, so a model whose files the engine could not run (a truncated or misshaped file, a
// missing tokenizer, a draft that does not fit its target) is refused here, by name, rather
// than at its first request; with o.SkipBroken it is listed as unavailable instead.
func New(o Options) (*Backend, error) {
	if len(o.Models) == 0 {
		return nil, errors.New("backend: no models configured")
	}
	b := &Backend{ctx: o.Context, stores: o.Stores, pull: o.Pull, depthCache: o.DepthCache, parallel: o.Parallel}
	if b.ctx <= 0 {
		b.ctx = DefaultContext
	}
	seen := map[string]bool{}
	broken := 0
	for _, s := range o.Models {
		if s.Path == "" {
			return nil, fmt.Errorf("backend: model %q has no path", s.Name)
		}
		if s.Name == "" {
			s.Name = defaultName(s.Path, o.Stores)
		}
		if !strings.Contains(s.Name, ":") {
			s.Name += ":latest"
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("backend: model name %q configured twice", s.Name)
		}
		seen[s.Name] = true
		d, in, err := describe(s, b.ctx, o.Stores)
		if err == nil {
			in.Parallel = b.parallelOf(d, in.ContextLength)
		}
		if err != nil {
			err = fmt.Errorf("backend: model %s: %w", s.Name, err)
			if !o.SkipBroken {
				return nil, err
			}
			broken++
			in = unavailable(s, err)
		}
		b.specs = append(b.specs, s)
		b.descs = append(b.descs, d)
		b.infos = append(b.infos, in)
		b.errs = append(b.errs, err)
	}
	if broken == len(b.specs) {
		return nil, fmt.Errorf("backend: every configured model is broken: %w", errors.Join(b.errs...))
	}
	return b, nil
}

// describe reads and checks one model's files, weights excepted, into its description and listing.
func describe(s Spec, ctxCap int, stores *ref.Env) (*engine.Description, server.ModelInfo, error) {
	o := engine.Options{Model: s.Path}
	if s.Draft != "" && s.Draft != "auto" {
		dir, err := engine.ResolveDraft(s.Draft, stores)
		if err != nil {
			return nil, server.ModelInfo{}, err
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, server.ModelInfo{}, fmt.Errorf("draft %s is not a folder", s.Draft)
		}
		o.Drafts = []string{dir}
	}
	o, src, err := engine.Resolve(o, stores)
	if err != nil {
		return nil, server.ModelInfo{}, err
	}
	d, err := engine.Describe(o)
	if err != nil {
		return nil, server.ModelInfo{}, err
	}
	if src.Kind != ref.KindPath {
		d.Ref, d.Name = s.Path, src.Name
	}
	if src.Kind == ref.KindOllama {
		if err := d.ApplyOllama(src.Ollama); err != nil {
			return nil, server.ModelInfo{}, err
		}
	}
	if s.Draft == "auto" {
		name := src.Name
		if src.Kind == ref.KindHF {
			name = src.Repo
		}
		c, err := engine.AutoDraft(d.Config, name, stores)
		if err != nil {
			return nil, server.ModelInfo{}, err
		}
		c.Info.Name = c.Ref
		d.Drafts = append(d.Drafts, c.Info)
	}
	if d.Tok == nil {
		return nil, server.ModelInfo{}, fmt.Errorf("no tokenizer beside %s: the server needs text", s.Path)
	}
	if err := d.Validate(); err != nil {
		return nil, server.ModelInfo{}, err
	}
	// Refused at startup, not at the first request that would load the draft.
	if len(d.Drafts) > 0 {
		if err := d.CheckSpeculation(); err != nil {
			return nil, server.ModelInfo{}, err
		}
	}
	digest, err := d.Digest()
	if err != nil {
		return nil, server.ModelInfo{}, err
	}
	return d, info(s.Name, d, ctxCap, digest), nil
}

// parallelOf is how many generations a model decodes together: Options.Parallel, or AutoParallel
// of what one sequence of ctxLen positions needs.
func (b *Backend) parallelOf(d *engine.Description, ctxLen int) int {
	if b.parallel > 0 {
		return b.parallel
	}
	return AutoParallel(SequenceBytes(d, ctxLen), memAvailable())
}

// defaultName is the request name of a model configured without one: a store's own name for a
// reference that resolves in a store, else the file or folder name.
func defaultName(path string, stores *ref.Env) string {
	env := ref.FromEnv()
	if stores != nil {
		env = *stores
	}
	if r, err := env.Resolve(path); err == nil && r.Kind != ref.KindPath {
		return r.Name
	}
	base := filepath.Base(strings.TrimSuffix(path, "/"))
	if ext := filepath.Ext(base); ext == ".bin" {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// Models implements server.Backend.
func (b *Backend) Models() []server.ModelInfo {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]server.ModelInfo(nil), b.infos...)
}

// Describe returns the description a configured model's listing and loading come from (false
// for an unavailable one too).
func (b *Backend) Describe(name string) (*engine.Description, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for i, s := range b.specs {
		if s.Name == name && b.descs[i] != nil {
			return b.descs[i], true
		}
	}
	return nil, false
}

// Load implements server.Backend: it opens the model (and its draft). It is slow; ctx is checked
// before the work starts, since a load in progress cannot be interrupted.
func (b *Backend) Load(ctx context.Context, name string) (server.Model, error) {
	b.mu.RLock()
	i := -1
	for j, s := range b.specs {
		if s.Name == name {
			i = j
		}
	}
	if i < 0 {
		b.mu.RUnlock()
		return nil, fmt.Errorf("backend: %q: %w", name, server.ErrModelNotFound)
	}
	desc, in, err := b.descs[i], b.infos[i], b.errs[i]
	b.mu.RUnlock()
	if err != nil {
		return nil, err // the server refuses a listed-unavailable model before loading; this is the backstop
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m, err := open(desc, in, b.ctx, b.depthCache)
	if err != nil {
		return nil, fmt.Errorf("backend: load %s: %w", name, err)
	}
	return m, nil
}

// ParseModelsFile reads a models file (see the package comment).
func ParseModelsFile(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("models file: %w", err)
	}
	defer f.Close()
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		j := filepath.Join(dir, p)
		if _, err := os.Stat(j); err != nil && ref.IsName(p) {
			return p // a store name, resolved when the model is described
		}
		return j
	}
	var specs []Spec
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 || len(fields) > 3 {
			return nil, fmt.Errorf("models file %s:%d: want \"name path [draft]\", got %d fields", path, line, len(fields))
		}
		s := Spec{Name: fields[0], Path: rel(fields[1])}
		if len(fields) == 3 {
			s.Draft = rel(fields[2])
		}
		specs = append(specs, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("models file %s: %w", path, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("models file %s: no models", path)
	}
	return specs, nil
}
