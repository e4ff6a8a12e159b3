package engine

import (
	"strings"
	"testing"

	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/engine/ref/ollamatest"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/tokenizer/chat"
)

// storyTemplate is an ollama messages template, in Go template syntax as ollama's library writes
// them.
const storyTemplate = `{{- if .System }}[system] {{ .System }}
{{ end }}{{ range .Messages }}{{ if ne .Role "system" }}[{{ .Role }}] {{ .Content }}
{{ end }}{{ end }}[assistant]`

// An ollama name whose manifest carries template, system and params layers opens with all three
// applied: the template layer renders the chat (the GGUF has none of its own), the system layer is
// the default system message (a conversation's own system message replaces it), and the params
// layer the description's default options. Without a template layer the fallback template stays
// and the system message still applies; a template layer Go cannot parse is refused naming the
// layer.
func TestOllamaLayersApplied(t *testing.T) {
	gguf := convertTo(t, shareddata.Path(t, "stories260K/stories260K.bin"), "f32")
	root := t.TempDir()
	model := ollamatest.Model(t, gguf)
	ollamatest.Write(t, root, "stories", "latest", model,
		ollamatest.Layer{Media: ref.MediaTemplate, Content: []byte(storyTemplate)},
		ollamatest.Layer{Media: ref.MediaSystem, Content: []byte("You tell stories.")},
		ollamatest.Layer{Media: ref.MediaParams, Content: []byte(`{"temperature": 0.5, "stop": ["The end"], "num_ctx": 256}`)})
	ollamatest.Write(t, root, "stories", "notemplate", model,
		ollamatest.Layer{Media: ref.MediaSystem, Content: []byte("You tell stories.")})
	ollamatest.Write(t, root, "stories", "broken", model,
		ollamatest.Layer{Media: ref.MediaTemplate, Content: []byte("{{ range .Messages }}unclosed")})
	stores := &ref.Env{OllamaModels: root, HFCache: t.TempDir()}

	e, err := Open(Options{Model: "stories:latest", Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	tm := e.Desc.Template
	if tm.Kind != TemplateOllama || tm.Source != storyTemplate {
		t.Fatalf("template kind %v source %q: the template layer was not applied", tm.Kind, tm.Source)
	}
	got, err := tm.Render([]chat.Message{{Role: "user", Content: "A dragon, please."}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[system] You tell stories.\n[user] A dragon, please.\n[assistant]"; got != want {
		t.Errorf("render with the default system message:\n got %q\nwant %q", got, want)
	}
	got, err = tm.Render([]chat.Message{{Role: "system", Content: "Be short."}, {Role: "user", Content: "Go."}}, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[system] Be short.\n[user] Go.\n[assistant]"; got != want {
		t.Errorf("render with the conversation's own system message:\n got %q\nwant %q", got, want)
	}
	if p := e.Desc.Params; p["temperature"] != 0.5 || p["num_ctx"] != 256.0 || len(p["stop"].([]any)) != 1 {
		t.Errorf("params %v: the params layer was not carried as default options", p)
	}

	e, err = Open(Options{Model: "stories:notemplate", Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	if e.Desc.Template.Kind != TemplatePlain || e.Desc.Params != nil {
		t.Errorf("no template layer: kind %v, params %v; want the plain fallback and no defaults", e.Desc.Template.Kind, e.Desc.Params)
	}
	got, err = e.Desc.Template.Render([]chat.Message{{Role: "user", Content: "Hi"}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "System: You tell stories.\n\nUser: Hi\n\nAssistant:"; got != want {
		t.Errorf("fallback with the system layer:\n got %q\nwant %q", got, want)
	}

	if _, err := Open(Options{Model: "stories:broken", Stores: stores}); err == nil || !strings.Contains(err.Error(), "template layer") {
		t.Errorf("unparsable template layer: %v, want an error naming the template layer", err)
	}
}
