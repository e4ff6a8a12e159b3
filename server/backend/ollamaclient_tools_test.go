package backend_test

import (
	"context"
	"encoding/json"
	"testing"

	ollama "github.com/ollama/ollama/api"

	"github.com/dflash/dflash/server/fake"
)

// Tools and thinking through the ollama CLI's own client package: its ToolCall (arguments in an
// ordered map) and ThinkValue must round-trip through the server, over two turns, on the fake's
// script (see server/fake).
func TestOllamaClientToolsAndThinking(t *testing.T) {
	c := ollamaClient(t, &fake.Backend{Names: []string{"fake-tools:latest"}})
	var tools ollama.Tools
	if err := json.Unmarshal([]byte(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`), &tools); err != nil {
		t.Fatal(err)
	}
	msgs := []ollama.Message{{Role: "user", Content: "Weather in Paris?"}}
	var reply ollama.Message
	err := c.Chat(context.Background(), &ollama.ChatRequest{Model: "fake-tools", Messages: msgs, Tools: tools, Think: &ollama.ThinkValue{Value: "high"}},
		func(r ollama.ChatResponse) error {
			reply.Role = r.Message.Role
			reply.Content += r.Message.Content
			reply.Thinking += r.Message.Thinking
			reply.ToolCalls = append(reply.ToolCalls, r.Message.ToolCalls...)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Thinking != fake.Thinking || reply.Content != "" || len(reply.ToolCalls) != 1 {
		t.Fatalf("reply %+v: want thinking %q and one call", reply, fake.Thinking)
	}
	fn := reply.ToolCalls[0].Function
	if city, _ := fn.Arguments.Get("city"); fn.Name != fake.ToolName || city != "Paris" {
		t.Fatalf("call %s(%v), want %s(city=Paris)", fn.Name, fn.Arguments, fake.ToolName)
	}

	// The second turn sends the client's own message back with the tool's result.
	msgs = append(msgs, reply, ollama.Message{Role: "tool", Content: "18C", ToolName: fn.Name, ToolCallID: reply.ToolCalls[0].ID})
	stream := false
	var answer ollama.ChatResponse
	err = c.Chat(context.Background(), &ollama.ChatRequest{Model: "fake-tools", Messages: msgs, Tools: tools, Stream: &stream,
		Think: &ollama.ThinkValue{Value: false}}, func(r ollama.ChatResponse) error { answer = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if answer.Message.Content != fake.Text || answer.Message.Thinking != "" || len(answer.Message.ToolCalls) != 0 || answer.DoneReason != "stop" {
		t.Errorf("answer %+v, want %q alone", answer.Message, fake.Text)
	}

	var gen ollama.GenerateResponse
	err = c.Generate(context.Background(), &ollama.GenerateRequest{Model: "fake-tools", Prompt: "Why?", Stream: &stream, Think: &ollama.ThinkValue{Value: true}},
		func(r ollama.GenerateResponse) error { gen = r; return nil })
	if err != nil || gen.Thinking != fake.Thinking || gen.Response != fake.Text {
		t.Errorf("generate: %v, thinking %q response %q", err, gen.Thinking, gen.Response)
	}
}
