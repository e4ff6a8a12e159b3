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
	b.mu.RLock()
	for _, s := range b.specs {
		if s.Name == listed {
			b.mu.RUnlock()
			return listed, nil
		}
	}
	b.mu.RUnlock()
	s := Spec{Name: listed, Path: r.Path}
	d, in, err := describe(s, b.ctx, b.stores)
	if err != nil {
		return "", fmt.Errorf("pulled %s into %s, but it cannot be served: %w", name, r.Path, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.specs {
		if s.Name == listed {
			return listed, nil // a concurrent pull of the same model added it first
		}
	}
	b.specs, b.descs, b.infos, b.errs = append(b.specs, s), append(b.descs, d), append(b.infos, in), append(b.errs, nil)
	return listed, nil
}
