package backend_test

import (
	"context"
	"strings"
	"testing"

	ollama "github.com/ollama/ollama/api"

	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/engine/ref/hubtest"
	"github.com/dflash/dflash/server/backend"
)

// The ollama client package pulls a Hugging Face id through /api/pull from a fake hub: it sees
// ollama's progress objects (pulling manifest, per-file totals, success), and the pulled model is
// then listed and answers a generation, with no restart.
func TestOllamaClientPull(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, _, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t, "dflash/tiny", hubtest.FromDir(t, target))
	stores := &ref.Env{HFCache: t.TempDir(), OllamaModels: t.TempDir()}
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "local", Path: target}}, Stores: stores,
		Pull: backend.PullOptions{Endpoint: hub.URL}})
	if err != nil {
		t.Fatal(err)
	}
	c := ollamaClient(t, b)
	ctx := context.Background()

	var statuses []string
	done := map[string]bool{}
	err = c.Pull(ctx, &ollama.PullRequest{Model: "dflash/tiny"}, func(p ollama.ProgressResponse) error {
		statuses = append(statuses, p.Status)
		if p.Total > 0 && p.Completed == p.Total {
			done[p.Digest] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if statuses[0] != "pulling manifest" || statuses[len(statuses)-1] != "success" {
		t.Errorf("statuses %v", statuses)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		if !done[f] {
			t.Errorf("no completed progress for %s: %v", f, done)
		}
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Models {
		names = append(names, m.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "dflash/tiny:latest") {
		t.Fatalf("listed %v", names)
	}
	stream := false
	var resp ollama.GenerateResponse
	err = c.Generate(ctx, &ollama.GenerateRequest{Model: "dflash/tiny", Prompt: "once upon a time", Stream: &stream,
		Options: map[string]any{"num_predict": 8, "temperature": 0}}, func(r ollama.GenerateResponse) error { resp = r; return nil })
	if err != nil || resp.EvalCount != 8 {
		t.Errorf("generate on the pulled model: %+v %v", resp, err)
	}

	// An ollama name is not pulled here, and the error says where it is.
	err = c.Pull(ctx, &ollama.PullRequest{Model: "qwen3:0.6b"}, func(ollama.ProgressResponse) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "ollama pull qwen3:0.6b") {
		t.Errorf("pull of an ollama name: %v", err)
	}
}

// A request may name a model that sits in the hub cache without being configured: it is found,
// listed from then on, and served. A path is never looked up that way.
func TestRequestFindsCachedModel(t *testing.T) {
	t.Setenv("DFLASH_CACHE", t.TempDir())
	target, _, err := defaultmodel.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t, "dflash/tiny", hubtest.FromDir(t, target))
	stores := &ref.Env{HFCache: t.TempDir(), OllamaModels: t.TempDir()}
	if _, err := ref.Pull(context.Background(), ref.PullOptions{Repo: "dflash/tiny", Cache: stores.HFCache, Endpoint: hub.URL}); err != nil {
		t.Fatal(err)
	}
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "local", Path: target}}, Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	c := ollamaClient(t, b)
	ctx := context.Background()
	stream := false
	var resp ollama.GenerateResponse
	err = c.Generate(ctx, &ollama.GenerateRequest{Model: "dflash/tiny:latest", Prompt: "once upon a time", Stream: &stream,
		Options: map[string]any{"num_predict": 4, "temperature": 0}}, func(r ollama.GenerateResponse) error { resp = r; return nil })
	if err != nil || resp.EvalCount != 4 {
		t.Fatalf("generate on a cached, unconfigured model: %+v %v", resp, err)
	}
	if len(b.Models()) != 2 {
		t.Errorf("listing after the find: %v", b.Models())
	}
	for _, name := range []string{target, "../" + target, "Qwen/Qwen3-0.6B"} {
		err = c.Generate(ctx, &ollama.GenerateRequest{Model: name, Prompt: "x", Stream: &stream}, func(ollama.GenerateResponse) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("request for %q: %v", name, err)
		}
	}
}
