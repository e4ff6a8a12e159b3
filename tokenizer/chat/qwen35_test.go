package chat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// loadQwen35Like parses testdata/qwen35-like.jinja: a template of ours after Qwen3.5's behaviour
// (its header says which), written in the constructs the Qwen3.5-family templates use: macros
// with arguments, namespace, reversed slices, tests (string, iterable, mapping, sequence,
// defined), inline if-else, ~, tojson, trim, items, loop.previtem/nextitem and raise_exception.
// No Qwen3.5 tokenizer_config.json is in the shared test data, so the real template is not
// rendered here.
func loadQwen35Like(t *testing.T) *Template {
	t.Helper()
	src, err := os.ReadFile("testdata/qwen35-like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// The expected strings are derived by hand from the template: every tag trims, so only the
// {{- ... }} expressions reach the output.
func TestQwen35LikeThinking(t *testing.T) {
	tmpl := loadQwen35Like(t)
	off, on := false, true
	head := qSys + qUser1 + qGen
	for _, c := range []struct {
		name  string
		think *bool
		want  string
	}{
		// Thinking is the default: the prompt opens a think block for the model to fill.
		{"default", nil, head + "<think>\n"},
		{"on", &on, head + "<think>\n"},
		// Off: an empty block, so the model answers at once.
		{"off", &off, head + "<think>\n\n</think>\n\n"},
	} {
		got, err := tmpl.Render([]Message{sys, user1}, Options{AddGenerationPrompt: true, EnableThinking: c.think})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: got %q\nwant %q", c.name, got, c.want)
		}
	}
	// A second turn: the first answer came before the last user query, so its reasoning is
	// dropped (only "Hello!" stays); user contents are trimmed.
	got, err := tmpl.Render([]Message{sys, user1, thinkingA, {Role: "user", Content: "  How are you?\n"}}, Options{AddGenerationPrompt: true, EnableThinking: &off})
	if err != nil {
		t.Fatal(err)
	}
	want := qSys + qUser1 + "<|im_start|>assistant\nHello!<|im_end|>\n" + qUser2 + qGen + "<think>\n\n</think>\n\n"
	if got != want {
		t.Errorf("second turn: got %q\nwant %q", got, want)
	}
}

// A tool loop: the assistant's turn after the last real user query keeps its reasoning (given
// apart, as reasoning_content), its call is written as XML with one parameter per argument
// (strings as they are, numbers through str, lists and objects as JSON), and the two tool
// results share one user turn.
func TestQwen35LikeTools(t *testing.T) {
	tmpl := loadQwen35Like(t)
	tool := json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)
	msgs := []Message{
		sys,
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ReasoningContent: "\nNeed the weather.\n", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris","days":2,"units":["C"]}`}}},
		{Role: "tool", Content: "sunny"},
		{Role: "tool", Content: " 20 C "},
	}
	got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true, Tools: []any{tool}})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nFunctions you may call, as JSON schemas:\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}` +
		"\n</tools>\n\nCall one as <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n<think>\nNeed the weather.\n</think>\n\n" +
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n" +
		"<parameter=units>\n[\"C\"]\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20 C\n</tool_response><|im_end|>\n" +
		qGen + "<think>\n"
	if got != want {
		t.Errorf("render:\n got %q\nwant %q", got, want)
	}
}

// The template's own errors come back as errors naming the cause.
func TestQwen35LikeRefuses(t *testing.T) {
	tmpl := loadQwen35Like(t)
	for _, c := range []struct {
		msgs []Message
		want string
	}{
		{[]Message{user1, sys}, "a system message must come first"},
		{[]Message{{Role: "narrator", Content: "x"}}, "unknown role narrator"},
		{[]Message{user1, {Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: `[1]`}}}}, "must be an object"},
	} {
		if _, err := tmpl.Render(c.msgs, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.msgs, err, c.want)
		}
	}
}
