package server_test

import (
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// TestHugePromptRefusedUntokenized: a prompt whose cheap bound already exceeds the context is
// refused as context_length_exceeded on both APIs without Tokenize ever running; one just over
// the context, which the bound lets through, is still refused, after tokenizing.
func TestHugePromptRefusedUntokenized(t *testing.T) {
	b := &fake.Backend{}
	_, url := startServer(t, server.Config{MaxBodyBytes: 8 << 20}, b)
	huge := strings.Repeat("word ", 1_500_000) // 7.5 MB; the fake bounds it at over 750,000 tokens > 64
	for _, tc := range []struct{ path, body string }{
		{"/api/generate", `{"model":"fake","stream":false,"prompt":"` + huge + `"}`},
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
	r := post(t, url+"/api/generate", `{"model":"fake","stream":false,"prompt":"`+strings.Repeat("word ", 100)+`"}`)
	if r.status != 400 || b.Tokenizes() != 1 {
		t.Errorf("100-word prompt: %d %.200s after %d Tokenize calls, want 400 after 1", r.status, r.body, b.Tokenizes())
	}
}
