package backend

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/reply"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// What the server sends a model's template, through the real Qwen3 template: the tools block,
// an assistant's call and thinking, the tool's result and the no-think form. And the call format
// the template teaches is the one server/reply reads back.
func TestQwen3TemplateToolsAndThinking(t *testing.T) {
	dir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	cfg, err := chat.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Key order of the schema as the client wrote it ("type" before "function"; "parameters"
	// before "name"), which Qwen3's tojson keeps.
	tool := json.RawMessage(`{"type":"function","function":{"parameters":{"type":"object","properties":{"city":{"type":"string"}}},"name":"get_weather"}}`)
	m := &Model{tmpl: engine.Template{Kind: engine.TemplateModel, Chat: cfg.Template, Source: cfg.Source}}
	msgs := []server.ChatMessage{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Thinking: "Need the weather.", ToolCalls: []server.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Content: "18C", ToolName: "get_weather", ToolCallID: "call_1"},
	}
	off := false
	got, err := m.RenderChat(msgs, server.ChatOptions{AddGenerationPrompt: true, Tools: []json.RawMessage{tool}, Think: &off})
	if err != nil {
		t.Fatal(err)
	}
	// Expected pieces read off Qwen3's template: tojson of the schema with ", " and ": "
	// separators, the call as {"name": ..., "arguments": ...}, the result wrapped in
	// <tool_response> in a user turn, the thinking of the turn after the last user query kept,
	// and the empty think block that enable_thinking=false appends to the generation prompt.
	for _, want := range []string{
		"<tools>\n" + `{"type": "function", "function": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "name": "get_weather"}}` + "\n</tools>",
		"<|im_start|>assistant\n<think>\nNeed the weather.\n</think>\n\n<tool_call>\n" + `{"name": "get_weather", "arguments": {"city": "Paris"}}` + "\n</tool_call><|im_end|>",
		"<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("think false: prompt ends %q, want the no-think form", got[max(0, len(got)-60):])
	}

	// The assistant turn as rendered is what a model taught by this template writes: the parser
	// must read back the thinking and the call the turn was made of.
	turn := got[strings.Index(got, "<|im_start|>assistant\n")+len("<|im_start|>assistant\n"):]
	turn = turn[:strings.Index(turn, "<|im_end|>")]
	p := reply.New(reply.Config{Thinking: true, Tools: true})
	parts := append(p.Add(turn), p.Flush()...)
	if len(parts) != 2 || parts[0].Text != "Need the weather." || parts[1].Kind != reply.ToolCall ||
		parts[1].Call.Name != "get_weather" || string(parts[1].Call.Arguments) != `{"city":"Paris"}` {
		t.Errorf("parsed %+v from %q, want the thinking and the call", parts, turn)
	}
}

// What Qwen3 writes, token by token through the real tokenizer's stream decoder: <think>,
// </think>, <tool_call> and </tool_call> are single added tokens whose text is the tag, so the
// split sees them as text; here the decoded pieces go through the parser one token at a time.
func TestQwen3TokensSplit(t *testing.T) {
	tok, err := tokenizer.Load(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text := "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n" +
		`{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}` + "\n</tool_call>"
	ids := tok.Encode(text)
	for _, tag := range []string{"<think>", "</think>", "<tool_call>", "</tool_call>"} {
		if id, ok := tok.TokenID(tag); !ok || !slices.Contains(ids, id) {
			t.Fatalf("%s is not one token of the encoded reply (id %d, %v)", tag, id, ok)
		}
	}
	s := tokenizer.NewStream(tok)
	p := reply.New(reply.Config{Thinking: true, Tools: true})
	var parts []reply.Part
	for _, id := range ids {
		parts = append(parts, p.Add(s.Add(id))...)
	}
	parts = append(parts, p.Add(s.Flush())...)
	parts = append(parts, p.Flush()...)
	var thinking, content strings.Builder
	var calls []string
	for _, part := range parts {
		switch part.Kind {
		case reply.Thinking:
			thinking.WriteString(part.Text)
		case reply.Content:
			content.WriteString(part.Text)
		case reply.ToolCall:
			calls = append(calls, part.Call.Name+string(part.Call.Arguments))
		}
	}
	if thinking.String() != "The user wants the weather." || content.String() != "Let me check." ||
		!slices.Equal(calls, []string{`get_weather{"city":"Paris","days":[1,2]}`}) {
		t.Errorf("thinking %q, content %q, calls %q", thinking.String(), content.String(), calls)
	}
}
