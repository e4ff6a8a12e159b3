package ollamatmpl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dflash/dflash/tokenizer/chat"
)

func render(t *testing.T, src string, msgs []chat.Message, opt chat.Options) string {
	t.Helper()
	tm, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tm.Render(msgs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var conversation = []chat.Message{
	{Role: "system", Content: "Be brief."},
	{Role: "user", Content: "Hi"},
	{Role: "assistant", Content: "Hello."},
	{Role: "user", Content: "Name a colour."},
}

// A messages template (ChatML, as ollama's library writes it) runs once: .System holds the
// system message, .Messages every message in order, and the text after the last one is the
// template's own reply header.
func TestMessagesTemplate(t *testing.T) {
	const src = `{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}
{{- range .Messages }}{{ if ne .Role "system" }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}{{ end }}<|im_start|>assistant
`
	want := "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n" +
		"<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
	if got := render(t, src, conversation, chat.Options{}); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// A legacy template (System, Prompt, Response) runs once per turn; the last turn stops where its
// response would be written, so its closing <|im_end|> is not there.
func TestLegacyTemplate(t *testing.T) {
	const src = `{{ if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ .Response }}<|im_end|>
`
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n" +
		"<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
	if got := render(t, src, conversation, chat.Options{}); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// A template that names neither .Messages nor .Response (ollama's default "{{ .Prompt }}") gets
// each completed turn's response after it.
func TestPromptOnlyTemplate(t *testing.T) {
	if got, want := render(t, "{{ .Prompt }}", conversation, chat.Options{}), "HiHello.Name a colour."; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Consecutive messages of one role are merged with a blank line; tool results stay apart, with
// their tool's name.
func TestCollate(t *testing.T) {
	const src = `{{ range .Messages }}[{{ .Role }}{{ if .ToolName }}:{{ .ToolName }}{{ end }}] {{ .Content }}
{{ end }}`
	msgs := []chat.Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"},
		{Role: "tool", Content: "1", Name: "f"}, {Role: "tool", Content: "2", Name: "g"}}
	want := "[user] a\n\nb\n[tool:f] 1\n[tool:g] 2\n"
	if got := render(t, src, msgs, chat.Options{}); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// Tools and tool calls reach the template in ollama's shapes: .Tools prints as its JSON array,
// json works on it, fields are reached by ollama's names, arguments print as a JSON object and
// toTypeScriptType names a property's type. Thinking is passed as .Think and .IsThinkSet, and an
// assistant's reasoning as .Thinking.
func TestToolsAndThinking(t *testing.T) {
	const src = `{{ if .IsThinkSet }}think={{ .Think }} {{ end }}tools={{ .Tools }}
{{ range .Tools }}{{ .Function.Name }}({{ range $k, $v := .Function.Parameters.Properties }}{{ $k }}: {{ toTypeScriptType $v }}{{ end }}){{ end }}
{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}{{ end }}
{{ json .Tools }}`
	var tool any
	if err := json.Unmarshal([]byte(`{"type": "function", "function": {"name": "weather", "description": "d",
		"parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}`), &tool); err != nil {
		t.Fatal(err)
	}
	on := true
	msgs := []chat.Message{{Role: "user", Content: "?"},
		{Role: "assistant", ReasoningContent: "hm", ToolCalls: []chat.ToolCall{{Name: "weather", Arguments: `{"city": "Oslo"}`}}}}
	got := render(t, src, msgs, chat.Options{Tools: []any{tool}, EnableThinking: &on})
	js := `[{"type":"function","function":{"name":"weather","description":"d","parameters":{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}}}]`
	want := "think=true tools=" + js + "\nweather(city: string)\n<think>hm</think>weather{\"city\":\"Oslo\"}\n" + js
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := render(t, `{{ if .IsThinkSet }}set{{ else }}unset{{ end }}`, msgs, chat.Options{}); got != "unset" {
		t.Fatalf("without EnableThinking: %q, want unset", got)
	}
}

// Errors: a template Go cannot parse fails Parse; one that fails while running fails Render, with
// Go's message; arguments that are not a JSON object are refused naming the message.
func TestErrors(t *testing.T) {
	if _, err := Parse("{{ if .System }}unclosed"); err == nil || !strings.Contains(err.Error(), "ollama template") {
		t.Fatalf("unclosed if: %v", err)
	}
	tm, err := Parse("{{ index .Messages 5 }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Render(conversation, chat.Options{}); err == nil || !strings.Contains(err.Error(), "index") {
		t.Fatalf("index out of range: %v", err)
	}
	bad := []chat.Message{{Role: "assistant", ToolCalls: []chat.ToolCall{{Name: "f", Arguments: "[1]"}}}}
	if _, err := tm.Render(bad, chat.Options{}); err == nil || !strings.Contains(err.Error(), "messages[0].tool_calls[0]") {
		t.Fatalf("array arguments: %v", err)
	}
}
