package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// lp is one token's logprobs as every endpoint but completions sends them.
type lp struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

// checkLogprobs checks what holds for any backend's greedy answer with top alternatives: one
// entry per generated token, top alternatives in decreasing order, the chosen token the first of
// them (greedy), bytes that spell the token; and for the fake, exactly fake.Logprob's values.
func checkLogprobs(t *testing.T, bc backendCase, what string, got []lp, tokens, top int) {
	t.Helper()
	if len(got) != tokens {
		t.Fatalf("%s: %d logprobs for %d tokens", what, len(got), tokens)
	}
	for i, l := range got {
		if len(l.TopLogprobs) != top {
			t.Fatalf("%s: token %d has %d alternatives, want %d", what, i, len(l.TopLogprobs), top)
		}
		for k := 1; k < top; k++ {
			if l.TopLogprobs[k].Logprob > l.TopLogprobs[k-1].Logprob {
				t.Errorf("%s: token %d alternatives out of order: %+v", what, i, l.TopLogprobs)
			}
		}
		if l.Logprob > 0 || l.TopLogprobs[0].Token != l.Token || l.TopLogprobs[0].Logprob != l.Logprob {
			t.Errorf("%s: greedy token %d %q logprob %v is not its first alternative %+v", what, i, l.Token, l.Logprob, l.TopLogprobs[0])
		}
		if b := []byte(l.Token); !strings.ContainsRune(l.Token, '\uFFFD') && !slices.Equal(bytesOf(b), l.Bytes) {
			t.Errorf("%s: token %d %q has bytes %v", what, i, l.Token, l.Bytes)
		}
		if bc.words != nil {
			want := fake.Logprob(i, top)
			if l.Token != want.Token || l.Logprob != want.Logprob || l.TopLogprobs[top-1].Token != want.Top[top-1].Token {
				t.Errorf("%s: token %d is %+v, the fake says %+v", what, i, l, want)
			}
		}
	}
}

func bytesOf(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// TestOllamaLogprobs: /api/generate and /api/chat with logprobs and top_logprobs, whole and
// streamed (the lines' logprobs joined are the whole answer's), and with a draft the same values
// as without (a greedy answer: the draft changes neither the tokens nor the target's rows).
func TestOllamaLogprobs(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		const top = 3
		// repeat_penalty 1: ollama's default 1.1 would make greedy pick other than the raw mode,
		// the distribution logprobs report.
		opts := `"options":{"temperature":0,"repeat_penalty":1,"num_predict":12},"logprobs":true,"top_logprobs":3`
		var plain []lp
		for _, m := range []string{bc.model, bc.draftModel} {
			r := post(t, url+"/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","stream":false,%s}`, m, opts))
			var g struct {
				EvalCount int  `json:"eval_count"`
				Logprobs  []lp `json:"logprobs"`
			}
			decodeInto(t, r.body, &g)
			if r.status != 200 {
				t.Fatalf("%s: %d %s", m, r.status, r.body)
			}
			checkLogprobs(t, bc, m+" generate", g.Logprobs, g.EvalCount, top)
			if plain == nil {
				plain = g.Logprobs
			} else if !sameJSON(plain, g.Logprobs) {
				t.Errorf("with a draft the logprobs differ:\n got %+v\nwant %+v", g.Logprobs, plain)
			}

			r = post(t, url+"/api/chat", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Once upon a time"}],%s}`, m, opts))
			var streamed []lp
			var count int
			for _, l := range ndjsonLines(t, r.body) {
				var line struct {
					EvalCount int  `json:"eval_count"`
					Logprobs  []lp `json:"logprobs"`
				}
				b, _ := json.Marshal(l)
				decodeInto(t, b, &line)
				streamed = append(streamed, line.Logprobs...)
				count += line.EvalCount
			}
			checkLogprobs(t, bc, m+" chat stream", streamed, count, top)
		}

		// Without logprobs asked, none are sent.
		r := post(t, url+"/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"hi","stream":false,"options":{"num_predict":3}}`, bc.model))
		if strings.Contains(string(r.body), "logprobs") {
			t.Errorf("logprobs sent unasked: %s", r.body)
		}
	})
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestOpenAILogprobs: chat completions' choices[].logprobs.content, whole and streamed per chunk,
// and completions' parallel lists, whose text_offset points at each token's text in the answer.
func TestOpenAILogprobs(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		const top = 2
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Once upon a time"}],"temperature":0,"max_tokens":10,"logprobs":true,"top_logprobs":2`, bc.model)
		r := post(t, url+"/v1/chat/completions", body+"}")
		var c struct {
			Choices []struct {
				Message  struct{ Content string } `json:"message"`
				Logprobs *struct {
					Content []lp `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage server.OpenAIUsage `json:"usage"`
		}
		decodeInto(t, r.body, &c)
		if r.status != 200 || c.Choices[0].Logprobs == nil {
			t.Fatalf("chat: %d %s", r.status, r.body)
		}
		whole := c.Choices[0].Logprobs.Content
		checkLogprobs(t, bc, "chat", whole, c.Usage.CompletionTokens, top)

		r = post(t, url+"/v1/chat/completions", body+`,"stream":true}`)
		var streamed []lp
		for _, e := range sseEvents(t, r.body) {
			if e == "[DONE]" {
				continue
			}
			var k struct {
				Choices []struct {
					Logprobs *struct {
						Content []lp `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			decodeInto(t, []byte(e), &k)
			if len(k.Choices) == 1 && k.Choices[0].Logprobs != nil {
				streamed = append(streamed, k.Choices[0].Logprobs.Content...)
			}
		}
		if !sameJSON(streamed, whole) {
			t.Errorf("streamed chunks' logprobs %+v, whole answer's %+v", streamed, whole)
		}

		r = post(t, url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","temperature":0,"max_tokens":8,"logprobs":2}`, bc.model))
		var tc struct {
			Choices []struct {
				Text     string `json:"text"`
				Logprobs struct {
					Tokens        []string             `json:"tokens"`
					TokenLogprobs []float64            `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
					TextOffset    []int                `json:"text_offset"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage server.OpenAIUsage `json:"usage"`
		}
		decodeInto(t, r.body, &tc)
		if r.status != 200 {
			t.Fatalf("completions: %d %s", r.status, r.body)
		}
		ch := tc.Choices[0]
		l := ch.Logprobs
		n := tc.Usage.CompletionTokens
		if len(l.Tokens) != n || len(l.TokenLogprobs) != n || len(l.TopLogprobs) != n || len(l.TextOffset) != n {
			t.Fatalf("completions logprobs lists of %d %d %d %d for %d tokens", len(l.Tokens), len(l.TokenLogprobs), len(l.TopLogprobs), len(l.TextOffset), n)
		}
		for i := range n {
			if len(l.TopLogprobs[i]) < 1 || len(l.TopLogprobs[i]) > top || l.TopLogprobs[i][l.Tokens[i]] != l.TokenLogprobs[i] {
				t.Errorf("token %d %q logprob %v, alternatives %v", i, l.Tokens[i], l.TokenLogprobs[i], l.TopLogprobs[i])
			}
			if i > 0 && l.TextOffset[i] < l.TextOffset[i-1] || l.TextOffset[i] > len(ch.Text) {
				t.Errorf("text_offset %v does not walk the text %q", l.TextOffset, ch.Text)
			}
			if bc.words != nil && !strings.HasPrefix(ch.Text[l.TextOffset[i]:], l.Tokens[i]) {
				t.Errorf("token %d %q is not at text_offset %d of %q", i, l.Tokens[i], l.TextOffset[i], ch.Text)
			}
		}
	})
}

// TestLogprobsRefused: out-of-range counts and top_logprobs without logprobs are 400s naming the
// field.
func TestLogprobsRefused(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	for _, c := range []struct{ path, body, param string }{
		{"/api/generate", `{"model":"fake:latest","prompt":"x","logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"/api/chat", `{"model":"fake:latest","messages":[],"logprobs":true,"top_logprobs":-1}`, "top_logprobs"},
		{"/v1/chat/completions", `{"model":"fake:latest","messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, "top_logprobs"},
		{"/v1/chat/completions", `{"model":"fake:latest","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30}`, "top_logprobs"},
		{"/v1/completions", `{"model":"fake:latest","prompt":"x","logprobs":-2}`, "logprobs"},
	} {
		r := post(t, url+c.path, c.body)
		if r.status != 400 || !strings.Contains(string(r.body), c.param) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, r.status, r.body, c.param)
		}
	}
}

// TestLogprobsAcrossAStopString: tokens whose text is held back and then cut by a stop string
// still get their logprobs, on the stream's last line, so a stream and a whole answer list the
// same tokens: every token generated, as eval_count counts them.
func TestLogprobsAcrossAStopString(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	// " lazy" is held back (it may begin " lazy dog") and then cut with it.
	body := `{"model":"fake:latest","prompt":"x","raw":true,"logprobs":true,"options":{"stop":[" lazy dog"]}`
	r := post(t, url+"/api/generate", body+`,"stream":false}`)
	var whole struct {
		Response  string `json:"response"`
		EvalCount int    `json:"eval_count"`
		Logprobs  []lp   `json:"logprobs"`
	}
	decodeInto(t, r.body, &whole)
	if whole.Response != "The quick brown fox jumps over the" || len(whole.Logprobs) != whole.EvalCount {
		t.Fatalf("whole answer %q with %d logprobs for %d tokens", whole.Response, len(whole.Logprobs), whole.EvalCount)
	}
	r = post(t, url+"/api/generate", body+`}`)
	lines := ndjsonLines(t, r.body)
	var streamed []any
	for _, l := range lines {
		if v, ok := l["logprobs"].([]any); ok {
			streamed = append(streamed, v...)
		}
	}
	if len(streamed) != whole.EvalCount || lines[len(lines)-1]["logprobs"] == nil {
		t.Errorf("stream carried %d logprobs for %d tokens (last line %v), want all, the held-back ones last", len(streamed), whole.EvalCount, lines[len(lines)-1])
	}
}

// TestOpenAIStreamedLogprobsNullWithoutTokens: a streamed chunk that carries no token has
// "logprobs": null, as OpenAI's do, never an empty object; among them the opening chunk of a
// reply whose first token is held back (here by a stop string that matches it, so nothing is
// generated), on chat completions and completions both.
func TestOpenAIStreamedLogprobsNullWithoutTokens(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"fake:latest","messages":[{"role":"user","content":"hi"}],"logprobs":true,"stream":true`},
		{"/v1/completions", `{"model":"fake:latest","prompt":"hi","logprobs":1,"stream":true`},
	} {
		for _, extra := range []string{`,"stop":["The"]}`, `,"max_tokens":3}`} {
			r := post(t, url+c.path, c.body+extra)
			if r.status != 200 {
				t.Fatalf("%s%s: %d %s", c.path, extra, r.status, r.body)
			}
			tokens := 0
			for i, e := range sseEvents(t, r.body) {
				if e == "[DONE]" {
					continue
				}
				var k struct {
					Choices []struct {
						Logprobs *struct {
							Content []json.RawMessage `json:"content"` // chat
							Tokens  []string          `json:"tokens"`  // completions
						} `json:"logprobs"`
					} `json:"choices"`
				}
				decodeInto(t, []byte(e), &k)
				if len(k.Choices) == 0 {
					continue
				}
				l := k.Choices[0].Logprobs
				if l == nil {
					continue
				}
				n := len(l.Content) + len(l.Tokens)
				if n == 0 {
					t.Errorf("%s%s: chunk %d has an empty logprobs object, want null: %s", c.path, extra, i, e)
				}
				tokens += n
			}
			if tokens == 0 {
				t.Errorf("%s%s: no chunk carried the generated tokens' logprobs", c.path, extra)
			}
		}
	}
}
