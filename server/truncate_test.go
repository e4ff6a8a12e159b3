package server_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// storyPrompt is n words whose lengths cycle through 1..9, so the fake's tokens (word length +
// 2) show which part of the prompt a truncated one kept.
func storyPrompt(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = strings.Repeat("x", 1+i%9) + fmt.Sprint(i%10)
	}
	return strings.Join(words, " ")
}

// TestTruncation: a prompt longer than the context is truncated by ollama's APIs, keeping the
// BOS and the newest tokens, leaving a quarter of the context (or num_predict, when smaller) to
// generate, and prompt_eval_count reports the truncated prompt; "truncate": false refuses it as
// OpenAI's APIs always do, naming the prompt's length and the context.
func TestTruncation(t *testing.T) {
	b := &fake.Backend{}
	_, url := startServer(t, server.Config{}, b)
	text := storyPrompt(100)
	// The fake tokenizes one id per word after BOS (1): 101 tokens, over the context of 64.
	full := []int{1}
	for _, w := range strings.Fields(text) {
		full = append(full, len(w)+2)
	}
	keepTail := func(keep int) []int { return append([]int{1}, full[len(full)-(keep-1):]...) }

	for _, tc := range []struct {
		name, body string
		keep       int // prompt tokens kept: the context less the room left to generate
	}{
		{"generate raw", `{"model":"fake","raw":true,"stream":false,"prompt":"` + text + `"}`, 64 - 16},
		{"generate raw num_predict", `{"model":"fake","raw":true,"stream":false,"prompt":"` + text + `","options":{"num_predict":5}}`, 64 - 5},
		{"generate raw num_ctx", `{"model":"fake","raw":true,"stream":false,"prompt":"` + text + `","options":{"num_ctx":20}}`, 20 - 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, url+"/api/generate", tc.body)
			if r.status != 200 {
				t.Fatalf("status %d %s, want 200", r.status, r.body)
			}
			if got := decode[server.OllamaGenerateResponse](t, r.body).PromptEvalCount; got != tc.keep {
				t.Errorf("prompt_eval_count %d, want %d (the truncated prompt)", got, tc.keep)
			}
			if got, want := b.LastPrompt(), keepTail(tc.keep); !slices.Equal(got, want) {
				t.Errorf("prompt generated from\n %v\nwant BOS and the tail\n %v", got, want)
			}
		})
	}

	// A chat keeps the rendered conversation's tail: the last message and the generation prompt.
	r := post(t, url+"/api/chat", `{"model":"fake","stream":false,"messages":[{"role":"user","content":"`+text+`"}]}`)
	if got := decode[server.OllamaChatResponse](t, r.body).PromptEvalCount; r.status != 200 || got != 48 {
		t.Errorf("chat: %d %s, want 200 with prompt_eval_count 48", r.status, r.body)
	}
	if p := b.LastPrompt(); len(p) != 48 || p[0] != 1 || p[len(p)-1] != len("<|assistant|>")+2 {
		t.Errorf("chat prompt %v: want BOS, the message's tail and the assistant header", p)
	}

	// A context of one position has no room for any prompt and an answer: refused, not truncated
	// to nothing.
	if r := post(t, url+"/api/generate", `{"model":"fake","raw":true,"prompt":"a b","options":{"num_ctx":1}}`); r.status != 400 || !strings.Contains(string(r.body), "num_ctx is 1 tokens") {
		t.Errorf("num_ctx 1: %d %s, want 400 naming num_ctx", r.status, r.body)
	}

	// Refused: ollama when asked not to truncate, OpenAI always.
	for _, tc := range []struct{ path, body string }{
		{"/api/generate", `{"model":"fake","raw":true,"truncate":false,"prompt":"` + text + `"}`},
		{"/v1/completions", `{"model":"fake","prompt":"` + text + `"}`},
		{"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"` + text + `"}]}`},
	} {
		r := post(t, url+tc.path, tc.body)
		if r.status != 400 || !strings.Contains(string(r.body), "tokens but the model's context is 64 tokens") {
			t.Errorf("%s: %d %s, want 400 naming the prompt's tokens and the context of 64", tc.path, r.status, r.body)
		}
		if strings.HasPrefix(tc.path, "/v1/") {
			e := decode[server.OpenAIError](t, r.body)
			if e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "prompt is 10") {
				t.Errorf("%s: error %+v, want context_length_exceeded with the prompt's length", tc.path, e.Error)
			}
		}
	}
}

// TestContextCappedByCtx: when the server's --ctx caps what the model supports, a refusal says so
// with both numbers, and /api/show lists the model's own context_length and a num_ctx parameter
// line with the served one, as ollama shows them.
func TestContextCappedByCtx(t *testing.T) {
	b := &fake.Backend{ModelContext: 1024}
	_, url := startServer(t, server.Config{}, b)
	r := post(t, url+"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"`+storyPrompt(100)+`"}]}`)
	const want = "the context is 64 tokens (capped by --ctx; the model supports 1024)"
	if r.status != 400 || !strings.Contains(string(r.body), want) {
		t.Errorf("refusal %d %s, want it to say %q", r.status, r.body, want)
	}
	show := decode[server.OllamaShowResponse](t, post(t, url+"/api/show", `{"model":"fake"}`).body)
	if got := show.ModelInfo["fake.context_length"]; got != float64(1024) {
		t.Errorf("model_info fake.context_length %v, want the model's 1024", got)
	}
	if f := strings.Fields(show.Parameters); !slices.Equal(f, []string{"num_ctx", "64"}) {
		t.Errorf("parameters %q, want a num_ctx line of 64", show.Parameters)
	}
}
