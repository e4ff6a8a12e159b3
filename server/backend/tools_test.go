package backend_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// A random Qwen3 model with the real Qwen3 tokenizer and template, served over HTTP: its template
// gives it tools and thinking; requests with tools and think get through the real template and
// tokenizer; and whatever the random weights write, the split answer is the same streamed and
// not (a greedy answer is one text however it is cut into pieces).
func TestQwen3ToolsAndThinkingOverHTTP(t *testing.T) {
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "qwen", Path: testmodel.Qwen3(t, "")}}, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{}, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	post := func(path, body string) []byte {
		t.Helper()
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		return out
	}

	var show server.OllamaShowResponse
	if err := json.Unmarshal(post("/api/show", `{"model":"qwen"}`), &show); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(show.Capabilities, []string{"completion", "tools", "thinking"}) {
		t.Errorf("capabilities %v, want completion, tools, thinking", show.Capabilities)
	}

	const tool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`
	chat := func(extra string) string {
		return `{"model":"qwen","messages":[{"role":"user","content":"Weather in Paris?"}],"options":{"temperature":0,"repeat_penalty":1,"num_predict":24}` + extra + `}`
	}
	type reply struct {
		Content, Thinking string
		Calls             []string
		PromptTokens      int
	}
	ollama := func(body string, stream bool) reply {
		var r reply
		if !stream {
			body = strings.Replace(body, `{"model"`, `{"stream":false,"model"`, 1)
		}
		sc := bufio.NewScanner(bytes.NewReader(post("/api/chat", body)))
		for sc.Scan() {
			var l server.OllamaChatResponse
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("line %q: %v", sc.Bytes(), err)
			}
			r.Content += l.Message.Content
			r.Thinking += l.Message.Thinking
			for _, c := range l.Message.ToolCalls {
				r.Calls = append(r.Calls, c.Function.Name+string(c.Function.Arguments))
			}
			r.PromptTokens += l.PromptEvalCount
		}
		return r
	}
	withTools := chat(`,"tools":[` + tool + `]`)
	whole, streamed := ollama(withTools, false), ollama(withTools, true)
	if whole.Content != streamed.Content || whole.Thinking != streamed.Thinking || !slices.Equal(whole.Calls, streamed.Calls) {
		t.Errorf("ollama: streamed %+v, not streamed %+v", streamed, whole)
	}
	// The tool schema and the no-think form reach the prompt: each adds tokens.
	plain, noThink := ollama(chat(""), false), ollama(chat(`,"think":false`), false)
	if !(whole.PromptTokens > plain.PromptTokens && noThink.PromptTokens > plain.PromptTokens) {
		t.Errorf("prompt tokens: with tools %d, think false %d, neither %d; want both above the last",
			whole.PromptTokens, noThink.PromptTokens, plain.PromptTokens)
	}

	// OpenAI, the same request: the same split, non-streamed and streamed.
	oai := `{"model":"qwen","messages":[{"role":"user","content":"Weather in Paris?"}],"temperature":0,"max_tokens":24,"tools":[` + tool + `]`
	var c struct {
		Choices []struct {
			Message server.OpenAIChatMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(post("/v1/chat/completions", oai+`}`), &c); err != nil {
		t.Fatal(err)
	}
	m := c.Choices[0].Message
	var got reply
	if m.Content != nil {
		got.Content = *m.Content
	}
	if m.ReasoningContent != nil {
		got.Thinking = *m.ReasoningContent
	}
	for _, tc := range m.ToolCalls {
		got.Calls = append(got.Calls, tc.Function.Name+tc.Function.Arguments)
	}
	var st reply
	for _, ev := range strings.Split(string(post("/v1/chat/completions", oai+`,"stream":true}`)), "\n\n") {
		data := strings.TrimPrefix(ev, "data: ")
		if data == "" || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta server.OpenAIChatMessage `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		d := ch.Choices[0].Delta
		if d.Content != nil {
			st.Content += *d.Content
		}
		if d.ReasoningContent != nil {
			st.Thinking += *d.ReasoningContent
		}
		for _, tc := range d.ToolCalls {
			if tc.Function.Name != "" {
				st.Calls = append(st.Calls, tc.Function.Name)
			}
			st.Calls[len(st.Calls)-1] += tc.Function.Arguments
		}
	}
	if got.Content != st.Content || got.Thinking != st.Thinking || !slices.Equal(got.Calls, st.Calls) {
		t.Errorf("openai: streamed %+v, not streamed %+v", st, got)
	}
	if got.Content != whole.Content || got.Thinking != whole.Thinking {
		t.Errorf("openai %+v and ollama %+v differ on one greedy request (same sampler: greedy, no penalty)", got, whole)
	}
	t.Logf("random Qwen3 answered: thinking %q, content %q, calls %q", whole.Thinking, whole.Content, whole.Calls)
}
