package backend

import (
	"context"
	"fmt"
	"strings"

	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/server"
)

// Pull implements server.Puller for Hugging Face ids: it downloads the model into the hub cache
// (ref.Pull) and, unless a model of that name is already configured, describes it and adds it to
// the listing under "Org/Name:latest" ("Org/Name:<revision>" for another revision). An ollama
// name is refused: the ollama registry is ollama's to pull from.
func (b *Backend) Pull(ctx context.Context, name string, progress func(server.PullProgress)) (string, error) {
	id, tag, _ := strings.Cut(name, ":")
	if tag != "" && tag != "latest" {
		id += "@" + tag // ollama's clients put a revision where a tag goes
	}
	repo, rev, err := ref.ParseHubID(id)
	if err != nil {
		return "", fmt.Errorf("pull %s: only Hugging Face ids (Org/Name[@revision]) are pulled here; for an ollama name use: ollama pull %s", name, name)
	}
	o := ref.PullOptionsFromEnv(repo, rev)
	if b.stores != nil {
		o.Cache = b.stores.HFCache
	}
	if b.pull.Endpoint != "" {
		o.Endpoint = b.pull.Endpoint
	}
	if b.pull.Token != "" {
		o.Token = b.pull.Token
	}
	o.Offline = o.Offline || b.pull.Offline
	o.Progress = func(p ref.Progress) {
		progress(server.PullProgress{Status: "pulling " + p.File, Digest: p.File, Total: p.Size, Completed: p.Done})
	}
	r, err := ref.Pull(ctx, o)
	if err != nil {
		return "", err
	}
	listed := repo + ":latest"
	if rev != "" && rev != "main" {
		listed = repo + ":" + rev
	}
	if _, err := b.add(Spec{Name: listed, Path: r.Path}); err != nil {
		return "", fmt.Errorf("pulled %s into %s, but it cannot be served: %w", name, r.Path, err)
	}
	return listed, nil
}

// add describes a model and appends it to the listing, unless one of that name is listed.
func (b *Backend) add(s Spec) (server.ModelInfo, error) {
	if in, ok := b.listed(s.Name); ok {
		return in, nil
	}
	d, in, err := describe(s, b.ctx, b.stores)
	if err != nil {
		return server.ModelInfo{}, err
	}
	in.Parallel = b.parallelOf(d, in.ContextLength)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, have := range b.specs {
		if have.Name == s.Name {
			return b.infos[i], nil // a concurrent add of the same model came first
		}
	}
	b.specs, b.descs, b.infos, b.errs = append(b.specs, s), append(b.descs, d), append(b.infos, in), append(b.errs, nil)
	return in, nil
}

func (b *Backend) listed(name string) (server.ModelInfo, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for i, s := range b.specs {
		if s.Name == name {
			return b.infos[i], true
		}
	}
	return server.ModelInfo{}, false
}

// Find implements server.Finder: a request may name a model in the stores (a Hugging Face id in
// the hub cache, an ollama name) that was not configured. Only store names are looked up, never
// paths: a client must not make the server open files of its choosing. A model that resolves
// but cannot be served (a draft, an ollama GGUF the engine does not load yet) is not found.
func (b *Backend) Find(name string) (server.ModelInfo, bool) {
	id, tag, _ := strings.Cut(name, ":")
	if tag == "latest" {
		name = id
	}
	if !ref.IsName(name) {
		return server.ModelInfo{}, false
	}
	env := ref.FromEnv()
	if b.stores != nil {
		env = *b.stores
	}
	r, err := env.Resolve(name)
	if err != nil || r.Kind == ref.KindPath {
		return server.ModelInfo{}, false
	}
	listed := r.Name
	if !strings.Contains(listed, ":") {
		listed += ":latest"
	}
	in, err := b.add(Spec{Name: listed, Path: name})
	return in, err == nil
}
