package server_test

import (
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// TestHugePromptRefusedUntokenized: a prompt whose cheap bound already exceeds the context is
// refused as context_length_exceeded on the OpenAI APIs without Tokenize ever running; one just
// over the context, which the bound lets through, is still refused, after tokenizing. ollama's
// API truncates instead, and tokenizes only a tail of the 7.5 MB body that the bound proves holds
// more than the context: a few kB, not the body.
func TestHugePromptRefusedUntokenized(t *testing.T) {
	b := &fake.Backend{}
	_, url := startServer(t, server.Config{MaxBodyBytes: 8 << 20}, b)
	huge := strings.Repeat("word ", 1_500_000) // 7.5 MB; the fake bounds it at over 750,000 tokens > 64
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"fake","prompt":"` + huge + `"}`},
		{"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"` + huge + `"}]}`},
	} {
		r := post(t, url+tc.path, tc.body)
		if r.status != 400 || !strings.Contains(string(r.body), "prompt is at least 75000") {
			t.Errorf("%s: %d %.200s, want 400 for a prompt of at least 750,000 tokens", tc.path, r.status, r.body)
		}
	}
	if n := b.Tokenizes(); n != 0 {
		t.Errorf("Tokenize ran %d times for prompts the bound refuses", n)
	}
	r := post(t, url+"/v1/completions", `{"model":"fake","prompt":"`+strings.Repeat("word ", 100)+`"}`)
	if r.status != 400 || b.Tokenizes() != 1 {
		t.Errorf("100-word prompt: %d %.200s after %d Tokenize calls, want 400 after 1", r.status, r.body, b.Tokenizes())
	}

	r = post(t, url+"/api/generate", `{"model":"fake","stream":false,"prompt":"`+huge+`"}`)
	if r.status != 200 {
		t.Fatalf("ollama, 7.5 MB prompt: %d %.200s, want 200 (truncated)", r.status, r.body)
	}
	// The fake's context is 64: truncation keeps 48 tokens (a quarter is left to generate).
	if got := decode[server.OllamaGenerateResponse](t, r.body).PromptEvalCount; got != 48 {
		t.Errorf("ollama, 7.5 MB prompt: prompt_eval_count %d, want 48", got)
	}
	// The tail tokenized needs 2 x 64 tokens by the fake's bound (1 + words/2): 256 words of 5
	// bytes, found by doubling from 16 x 128 bytes; the empty prompt (for its BOS) is the other.
	if n := b.LongestTokenized(); n > 4096 {
		t.Errorf("ollama, 7.5 MB prompt: %d bytes tokenized, want a tail of at most 4096", n)
	}
}
