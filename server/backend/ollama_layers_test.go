package backend

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/engine/ref/ollamatest"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server"
)

// A model served by its ollama name renders chats with the manifest's template and system layers
// and lists the params layer as its default options (which the server applies under requests').
func TestServeOllamaLayers(t *testing.T) {
	gguf := filepath.Join(t.TempDir(), "stories.gguf")
	if _, err := engine.ConvertGGUF(shareddata.Path(t, "stories260K/stories260K.bin"), gguf, "f32"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ollamatest.Write(t, root, "stories", "latest", ollamatest.Model(t, gguf),
		ollamatest.Layer{Media: ref.MediaTemplate, Content: []byte(`{{ .System }}|{{ range .Messages }}{{ .Role }}={{ .Content }};{{ end }}`)},
		ollamatest.Layer{Media: ref.MediaSystem, Content: []byte("sys")},
		ollamatest.Layer{Media: ref.MediaParams, Content: []byte(`{"temperature": 0.3, "stop": ["x"]}`)})
	b, err := New(Options{Models: []Spec{{Path: "stories:latest"}}, Stores: &ref.Env{OllamaModels: root, HFCache: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	mi := b.Models()[0]
	var opts map[string]any
	if err := json.Unmarshal([]byte(mi.Options), &opts); err != nil || opts["temperature"] != 0.3 {
		t.Fatalf("listed options %q (%v): want the params layer", mi.Options, err)
	}
	if mi.System != "sys" {
		t.Errorf("listed system %q, want the system layer's for /api/show", mi.System)
	}
	m, err := b.Load(context.Background(), mi.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.RenderChat([]server.ChatMessage{{Role: "user", Content: "hi"}}, server.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "sys|system=sys;user=hi;"; got != want {
		t.Fatalf("rendered %q, want %q (the template layer with the system layer as default)", got, want)
	}
}
