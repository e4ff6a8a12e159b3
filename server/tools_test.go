package server_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// The fake model "fake-tools" lists a template with tools and thinking; its script (package fake)
// thinks fake.Thinking when thinking is on, then calls fake.ToolName with fake.ToolArguments when
// tools are offered and no tool result is in the conversation yet, else answers fake.Text.

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather of a city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`

const clockTool = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}`

func toolsServer(t *testing.T, pieces ...string) (*fake.Backend, string) {
	t.Helper()
	b := &fake.Backend{Names: []string{"fake:latest", "fake-tools:latest"}, Pieces: pieces}
	_, url := startServer(t, server.Config{}, b)
	return b, url
}

// ollamaChatLine is a line of /api/chat with the tool call fields typed.
type ollamaChatLine struct {
	Message struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Index     int             `json:"index"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Done       bool   `json:"done"`
	DoneReason string `json:"done_reason"`
}

func ollamaLines(t *testing.T, body []byte) []ollamaChatLine {
	t.Helper()
	var out []ollamaChatLine
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		out = append(out, decode[ollamaChatLine](t, []byte(l)))
	}
	return out
}

func TestOllamaChatToolCall(t *testing.T) {
	b, url := toolsServer(t)
	body := `{"model":"fake-tools","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `],"stream":false}`
	r := post(t, url+"/api/chat", body)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The tool schema reaches the template as the client wrote it, and thinking is on (think
	// absent: the template's default), as ollama does for a thinking model.
	if got := b.LastRendered(); !strings.Contains(got, weatherTool) || !strings.Contains(got, "<|think|>") {
		t.Errorf("rendered prompt %q lacks the tool schema or the thinking switch", got)
	}
	l := decode[ollamaChatLine](t, r.body)
	m := l.Message
	if m.Thinking != fake.Thinking || m.Content != "" || len(m.ToolCalls) != 1 {
		t.Fatalf("message %+v: want thinking %q, no content and one call", m, fake.Thinking)
	}
	c := m.ToolCalls[0]
	if c.Function.Name != fake.ToolName || string(c.Function.Arguments) != fake.ToolArguments || c.Function.Index != 0 || !strings.HasPrefix(c.ID, "call_") {
		t.Errorf("call %+v, want %s(%s) at index 0 with a call_ id", c, fake.ToolName, fake.ToolArguments)
	}
	if !l.Done || l.DoneReason != "stop" {
		t.Errorf("done %v reason %q, want done with stop", l.Done, l.DoneReason)
	}

	// Streamed: the thinking comes first, in pieces, then one line with the call, then the
	// final line; no line carries text that belongs to a tag.
	r = post(t, url+"/api/chat", strings.Replace(body, `"stream":false`, `"stream":true`, 1))
	lines := ollamaLines(t, r.body)
	var thinking strings.Builder
	callAt, thinkingLines := -1, 0
	for i, l := range lines {
		if l.Message.Content != "" {
			t.Errorf("line %d has content %q; the script only thinks and calls", i, l.Message.Content)
		}
		if l.Message.Thinking != "" {
			if callAt >= 0 {
				t.Errorf("thinking after the call at line %d", i)
			}
			thinking.WriteString(l.Message.Thinking)
			thinkingLines++
		}
		if len(l.Message.ToolCalls) > 0 {
			if callAt >= 0 {
				t.Errorf("a second call line at %d", i)
			}
			callAt = i
			if c := l.Message.ToolCalls[0]; c.Function.Name != fake.ToolName || string(c.Function.Arguments) != fake.ToolArguments {
				t.Errorf("streamed call %+v", c)
			}
		}
	}
	if thinking.String() != fake.Thinking || thinkingLines < 2 || callAt < 0 || !lines[len(lines)-1].Done {
		t.Errorf("streamed: thinking %q in %d lines, call at line %d, last done %v; want %q in several lines, a call, done",
			thinking.String(), thinkingLines, callAt, lines[len(lines)-1].Done, fake.Thinking)
	}
}

// The second turn: the assistant's call and the tool's result go back to the template, and the
// model answers in text.
func TestOllamaChatToolResult(t *testing.T) {
	b, url := toolsServer(t)
	body := `{"model":"fake-tools","stream":false,"think":false,"tools":[` + weatherTool + `],"messages":[` +
		`{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":"","thinking":"Need the weather.","tool_calls":[{"id":"call_1","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},` +
		`{"role":"tool","content":"18C and sunny","tool_name":"get_weather","tool_call_id":"call_1"}]}`
	r := post(t, url+"/api/chat", body)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	got := b.LastRendered()
	for _, want := range []string{
		"thinking: Need the weather.",
		`call: call_1 get_weather {"city":"Paris"}`,
		"<|tool|> 18C and sunny", "result of: get_weather call_1",
		"<|no_think|>", // think: false renders the template's no-think form
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, got)
		}
	}
	m := decode[ollamaChatLine](t, r.body).Message
	if m.Content != fake.Text || m.Thinking != "" || len(m.ToolCalls) != 0 {
		t.Errorf("message %+v, want the plain answer %q without thinking or calls", m, fake.Text)
	}
}

func TestOllamaGenerateThinking(t *testing.T) {
	_, url := toolsServer(t)
	r := post(t, url+"/api/generate", `{"model":"fake-tools","prompt":"Why?","think":"medium","stream":false}`)
	g := decode[map[string]any](t, r.body)
	if g["thinking"] != fake.Thinking || g["response"] != fake.Text {
		t.Errorf("generate: thinking %q response %q, want %q and %q", g["thinking"], g["response"], fake.Thinking, fake.Text)
	}
	// Streamed, the thinking lines come before the response lines.
	r = post(t, url+"/api/generate", `{"model":"fake-tools","prompt":"Why?","think":true}`)
	var thinking, response strings.Builder
	for i, l := range ndjsonLines(t, r.body) {
		th, _ := l["thinking"].(string)
		resp, _ := l["response"].(string)
		if th != "" && response.Len() > 0 {
			t.Errorf("line %d: thinking %q after response text", i, th)
		}
		thinking.WriteString(th)
		if l["done"] != true {
			response.WriteString(resp)
		}
	}
	if thinking.String() != fake.Thinking || response.String() != fake.Text {
		t.Errorf("streamed generate: thinking %q response %q", thinking.String(), response.String())
	}
	// A raw prompt is the client's to read: no split.
	r = post(t, url+"/api/generate", `{"model":"fake-tools","prompt":"Why?","raw":true,"stream":false}`)
	if g := decode[map[string]any](t, r.body); g["thinking"] != nil || g["response"] != fake.Text {
		t.Errorf("raw generate: %v", g)
	}
}

func TestShowCapabilities(t *testing.T) {
	_, url := toolsServer(t)
	for model, want := range map[string][]string{
		"fake":       {"completion"},
		"fake-tools": {"completion", "tools", "thinking"},
	} {
		show := decode[server.OllamaShowResponse](t, post(t, url+"/api/show", `{"model":"`+model+`"}`).body)
		if !slices.Equal(show.Capabilities, want) {
			t.Errorf("%s: capabilities %v, want %v", model, show.Capabilities, want)
		}
	}
}

// openAIChunk is a chat.completion.chunk with the tool call fields typed.
type openAIChunk struct {
	Choices []struct {
		Delta struct {
			Role             *string `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    *int    `json:"index"`
				ID       *string `json:"id"`
				Type     *string `json:"type"`
				Function struct {
					Name      *string `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// streamedCall is a call put together from its deltas, as OpenAI's clients do.
type streamedCall struct {
	id, typ, name, args string
	fragments           int
}

// assemble reads an OpenAI chat stream the way the official clients accumulate it.
func assemble(t *testing.T, body []byte) (content, reasoning string, calls []streamedCall, finish string) {
	t.Helper()
	evs := sseEvents(t, body)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", evs[len(evs)-1])
	}
	for i, ev := range evs[:len(evs)-1] {
		c := decode[openAIChunk](t, []byte(ev))
		if len(c.Choices) != 1 {
			t.Fatalf("chunk %d: %d choices", i, len(c.Choices))
		}
		ch := c.Choices[0]
		if (ch.Delta.Role != nil) != (i == 0) {
			t.Errorf("chunk %d: role %v; only the first chunk has it", i, ch.Delta.Role)
		}
		if ch.Delta.Content != nil {
			content += *ch.Delta.Content
		}
		if ch.Delta.ReasoningContent != nil {
			reasoning += *ch.Delta.ReasoningContent
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index == nil {
				t.Fatalf("chunk %d: a tool call delta without index", i)
			}
			if *tc.Index == len(calls) { // a new call: its first fragment names it
				if tc.ID == nil || tc.Type == nil || tc.Function.Name == nil {
					t.Fatalf("chunk %d: the first fragment of call %d lacks id, type or name", i, *tc.Index)
				}
				calls = append(calls, streamedCall{id: *tc.ID, typ: *tc.Type, name: *tc.Function.Name})
			} else if *tc.Index != len(calls)-1 || tc.ID != nil || tc.Function.Name != nil {
				t.Fatalf("chunk %d: fragment for call %d (have %d calls) repeats id or name", i, *tc.Index, len(calls))
			}
			if tc.Function.Arguments != nil {
				calls[*tc.Index].args += *tc.Function.Arguments
			}
			calls[*tc.Index].fragments++
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	return
}

func TestOpenAIToolCall(t *testing.T) {
	b, url := toolsServer(t)
	body := `{"model":"fake-tools","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `,` + clockTool + `]}`
	r := post(t, url+"/v1/chat/completions", body)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var resp struct {
		Choices []struct {
			Message      map[string]json.RawMessage `json:"message"`
			FinishReason string                     `json:"finish_reason"`
		} `json:"choices"`
	}
	decodeInto(t, r.body, &resp)
	msg := resp.Choices[0].Message
	var calls []server.OpenAIToolCall
	decodeInto(t, msg["tool_calls"], &calls)
	// Content is absent (null) beside calls, as OpenAI sends it; the thinking is
	// reasoning_content; arguments are a JSON string.
	if _, has := msg["content"]; has || string(msg["reasoning_content"]) != `"`+fake.Thinking+`"` {
		t.Errorf("message %s: want no content and reasoning_content %q", r.body, fake.Thinking)
	}
	if len(calls) != 1 || calls[0].Type != "function" || calls[0].Function.Name != fake.ToolName ||
		calls[0].Function.Arguments != fake.ToolArguments || !strings.HasPrefix(calls[0].ID, "call_") {
		t.Errorf("tool_calls %+v, want one function call %s(%s) with a call_ id", calls, fake.ToolName, fake.ToolArguments)
	}
	if resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish_reason %q, want tool_calls", resp.Choices[0].FinishReason)
	}
	if got := b.LastRendered(); !strings.Contains(got, weatherTool) || !strings.Contains(got, clockTool) {
		t.Errorf("rendered prompt %q lacks the tools", got)
	}

	// Streamed: reasoning deltas, then the call as OpenAI streams one: a fragment with index, id,
	// type, name and empty arguments, then the arguments.
	r = post(t, url+"/v1/chat/completions", strings.Replace(body, `{"model"`, `{"stream":true,"model"`, 1))
	content, reasoning, scalls, finish := assemble(t, r.body)
	if content != "" || reasoning != fake.Thinking || finish != "tool_calls" {
		t.Errorf("stream: content %q reasoning %q finish %q", content, reasoning, finish)
	}
	if len(scalls) != 1 || scalls[0].name != fake.ToolName || scalls[0].args != fake.ToolArguments ||
		scalls[0].typ != "function" || scalls[0].fragments != 2 || !strings.HasPrefix(scalls[0].id, "call_") {
		t.Errorf("streamed calls %+v", scalls)
	}
}

func TestOpenAIToolChoice(t *testing.T) {
	b, url := toolsServer(t)
	msgs := `"messages":[{"role":"user","content":"Weather?"}]`
	tools := `"tools":[` + weatherTool + `,` + clockTool + `]`

	// "none": the template renders without tools and the script answers in text.
	r := post(t, url+"/v1/chat/completions", `{"model":"fake-tools",`+msgs+`,`+tools+`,"tool_choice":"none","reasoning_effort":"none"}`)
	var resp struct {
		Choices []struct {
			Message      server.OpenAIChatMessage `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
	}
	decodeInto(t, r.body, &resp)
	if got := b.LastRendered(); strings.Contains(got, "get_weather") || !strings.Contains(got, "<|no_think|>") {
		t.Errorf("tool_choice none, reasoning_effort none: rendered %q; want no tools and the no-think form", got)
	}
	if m := resp.Choices[0].Message; m.Content == nil || *m.Content != fake.Text || m.ToolCalls != nil || m.ReasoningContent != nil {
		t.Errorf("tool_choice none: message %+v, want the text answer alone", m)
	}

	// A named function: only its schema is rendered.
	post(t, url+"/v1/chat/completions", `{"model":"fake-tools",`+msgs+`,`+tools+`,"tool_choice":{"type":"function","function":{"name":"get_time"}}}`)
	if got := b.LastRendered(); strings.Contains(got, "get_weather") || !strings.Contains(got, clockTool) {
		t.Errorf("named tool_choice: rendered %q, want get_time's schema alone", got)
	}

	// "required", and a model that answers in text anyway (no constrained decoding): the text
	// comes back with finish_reason "stop".
	b.Pieces = []string{"No", " call."}
	r = post(t, url+"/v1/chat/completions", `{"model":"fake-tools",`+msgs+`,`+tools+`,"tool_choice":"required"}`)
	decodeInto(t, r.body, &resp)
	if m := resp.Choices[0].Message; m.Content == nil || *m.Content != "No call." || resp.Choices[0].FinishReason != "stop" {
		t.Errorf("required without a call: message %+v finish %q, want the text and stop", m, resp.Choices[0].FinishReason)
	}
}

// The output is parsed whatever the model writes: several calls, malformed calls, text around
// them; through both APIs, streamed and not.
func TestToolCallParsingThroughTheAPIs(t *testing.T) {
	cases := []struct {
		name    string
		pieces  []string
		content string   // the answer text
		calls   []string // name + arguments of each call
	}{
		{"two calls after text", []string{"Let me", " check.\n", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}", "\n</tool_call>\n<tool_", "call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"opts\":{\"units\":{\"t\":\"C\"}}}}\n</tool_call>"},
			"Let me check.", []string{`get_time{}`, `get_weather{"city":"Oslo","opts":{"units":{"t":"C"}}}`}},
		{"malformed call", []string{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"},
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", nil},
		{"cut off call", []string{"<tool_call>\n{\"name\": \"get_wea"}, "<tool_call>\n{\"name\": \"get_wea", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, url := toolsServer(t, c.pieces...)
			base := `"model":"fake-tools","think":false,"messages":[{"role":"user","content":"x"}],"tools":[` + weatherTool + `,` + clockTool + `]`
			wantFinish := "stop"
			if len(c.calls) > 0 {
				wantFinish = "tool_calls"
			}

			// ollama, not streamed and streamed.
			m := decode[ollamaChatLine](t, post(t, url+"/api/chat", `{`+base+`,"stream":false}`).body).Message
			var got []string
			for i, tc := range m.ToolCalls {
				got = append(got, tc.Function.Name+string(tc.Function.Arguments))
				if tc.Function.Index != i {
					t.Errorf("ollama call %d has index %d", i, tc.Function.Index)
				}
			}
			if m.Content != c.content || !slices.Equal(got, c.calls) {
				t.Errorf("ollama: content %q calls %q, want %q %q", m.Content, got, c.content, c.calls)
			}
			var content strings.Builder
			got = nil
			for _, l := range ollamaLines(t, post(t, url+"/api/chat", `{`+base+`}`).body) {
				content.WriteString(l.Message.Content)
				for _, tc := range l.Message.ToolCalls {
					got = append(got, tc.Function.Name+string(tc.Function.Arguments))
				}
			}
			if content.String() != c.content || !slices.Equal(got, c.calls) {
				t.Errorf("ollama streamed: content %q calls %q", content.String(), got)
			}

			// OpenAI streamed.
			text, _, calls, finish := assemble(t, post(t, url+"/v1/chat/completions", `{`+base+`,"stream":true}`).body)
			got = nil
			for _, sc := range calls {
				got = append(got, sc.name+sc.args)
			}
			if text != c.content || !slices.Equal(got, c.calls) || finish != wantFinish {
				t.Errorf("openai streamed: content %q calls %q finish %q, want %q %q %q", text, got, finish, c.content, c.calls, wantFinish)
			}
		})
	}
}
