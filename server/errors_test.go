package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

func TestBadRequests(t *testing.T) {
	_, url := startServer(t, server.Config{MaxBodyBytes: 4096}, &fake.Backend{Names: []string{"fake:latest", "fake-tools:latest"}})
	long := strings.Repeat("word ", 100) // 100 tokens + template > the fake's 64
	big := `{"model":"fake","prompt":"` + strings.Repeat("a", 5000) + `"}`
	cases := []struct {
		name, path, body string
		status           int
		want             string // must appear in the message
		param            string // OpenAI param, checked for /v1 paths
	}{
		{"malformed", "/api/generate", `{"model":"fake",`, 400, "byte offset", ""},
		{"empty body", "/api/chat", ``, 400, "missing request body", ""},
		{"not an object", "/api/generate", `[1,2]`, 400, "JSON object", ""},
		{"no model", "/api/generate", `{"prompt":"x"}`, 400, `"model"`, ""},
		{"unknown model", "/api/generate", `{"model":"nope","prompt":"x"}`, 404, `"nope" not found`, ""},
		{"wrong type", "/api/generate", `{"model":"fake","prompt":5}`, 400, `"prompt"`, ""},
		{"wrong option type", "/api/generate", `{"model":"fake","prompt":"x","options":{"temperature":"hot"}}`, 400, "options.temperature", ""},
		{"num_predict < -2", "/api/generate", `{"model":"fake","prompt":"x","options":{"num_predict":-3}}`, 400, "options.num_predict", ""},
		{"top_p > 1", "/api/chat", `{"model":"fake","messages":[],"options":{"top_p":1.5}}`, 400, "options.top_p", ""},
		{"negative temperature", "/api/chat", `{"model":"fake","messages":[],"options":{"temperature":-1}}`, 400, "options.temperature", ""},
		{"fractional top_k", "/api/chat", `{"model":"fake","messages":[],"options":{"top_k":1.5}}`, 400, "options.top_k", ""},
		{"bad keep_alive", "/api/generate", `{"model":"fake","keep_alive":"soon"}`, 400, "keep_alive", ""},
		{"format not json", "/api/generate", `{"model":"fake","prompt":"x","format":"yaml"}`, 400, `neither "json" nor a JSON schema`, ""},
		{"format bad keyword", "/api/chat", `{"model":"fake","messages":[],"format":{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}}`, 400, `format.properties.n.multipleOf`, ""},
		{"format bad schema", "/api/generate", `{"model":"fake","prompt":"x","format":{"type":"strin"}}`, 400, `unknown type "strin"`, ""},
		{"format with tools", "/api/chat", `{"model":"fake-tools","messages":[],"format":"json","tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "tools", ""},
		{"images", "/api/generate", `{"model":"fake","prompt":"x","images":["AAAA"]}`, 400, `"images"`, ""},
		// The fake's template has neither thinking tags nor tools: refused as ollama refuses them.
		{"think", "/api/chat", `{"model":"fake","messages":[],"think":true}`, 400, `"fake" does not support thinking`, ""},
		{"think level", "/api/generate", `{"model":"fake","prompt":"x","think":"high"}`, 400, `"fake" does not support thinking`, ""},
		{"think bad level", "/api/chat", `{"model":"fake","messages":[],"think":"extreme"}`, 400, `invalid "think"`, ""},
		{"tools", "/api/chat", `{"model":"fake","messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "fake does not support tools", ""},
		{"tool without name", "/api/chat", `{"model":"fake-tools","messages":[],"tools":[{"type":"function"}]}`, 400, `"tools[0].function.name"`, ""},
		{"tool of another type", "/api/chat", `{"model":"fake-tools","messages":[],"tools":[{"type":"retrieval","function":{"name":"f"}}]}`, 400, `"tools[0].type" is not supported`, ""},
		{"call arguments not an object", "/api/chat", `{"model":"fake-tools","messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]}`, 400, `"messages[0].tool_calls[0].function.arguments"`, ""},
		{"bad role", "/api/chat", `{"model":"fake","messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", ""},
		// ollama's APIs truncate a long prompt (truncate_test.go) unless asked not to.
		{"too long", "/api/generate", `{"model":"fake","truncate":false,"prompt":"` + long + `"}`, 400, "prompt is 103 tokens but the model's context is 64 tokens", ""},
		{"too long num_ctx", "/api/chat", `{"model":"fake","truncate":false,"messages":[{"role":"user","content":"a b c"}],"options":{"num_ctx":4}}`, 400, "num_ctx is 4 tokens", ""},
		{"too large", "/api/generate", big, 413, "larger than 4096 bytes", ""},

		{"oai malformed", "/v1/chat/completions", `{"model":`, 400, "byte offset", ""},
		{"oai unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "not found", "model"},
		{"oai no messages", "/v1/chat/completions", `{"model":"fake","messages":[]}`, 400, "messages", "messages"},
		{"oai temperature", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"temperature":2.5}`, 400, "[0, 2]", "temperature"},
		{"oai top_p", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"top_p":-0.1}`, 400, "[0, 1]", "top_p"},
		{"oai max_tokens 0", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "at least 1", "max_tokens"},
		{"oai max_completion_tokens", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-5}`, 400, "at least 1", "max_completion_tokens"},
		{"oai n", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"n":2}`, 400, "n=1", "n"},
		{"oai top_logprobs", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "outside", "top_logprobs"},
		{"oai tools", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "does not support tools", "tools"},
		{"oai tool without name", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"tools":[{}]}`, 400, "function name", "tools[0].function.name"},
		{"oai tool_choice unknown", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, `"g" is not among the tools`, "tool_choice"},
		{"oai tool_choice bad", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"tool_choice":"always"}`, 400, "want", "tool_choice"},
		{"oai required without tools", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, 400, "needs tools", "tool_choice"},
		{"oai reasoning_effort", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"}`, 400, `"fake" does not support thinking`, "reasoning_effort"},
		{"oai reasoning_effort bad", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"}`, 400, "want", "reasoning_effort"},
		{"oai call type", "/v1/chat/completions", `{"model":"fake-tools","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"code","function":{"name":"f","arguments":"{}"}}]}]}`, 400, "not supported", "messages[0].tool_calls[0].type"},
		{"oai response_format type", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, 400, "json_schema", "response_format.type"},
		{"oai json_schema without schema", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, 400, "schema is required", "response_format.json_schema.schema"},
		{"oai json_schema keyword", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"not":{}}}}}}}`, 400, "not supported", "response_format.json_schema.schema.properties.a.not"},
		{"oai json_schema bad json", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","items":[{}]}}}}`, 400, "prefixItems", "response_format.json_schema.schema.items"},
		{"oai stop list", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}`, 400, "at most 4", "stop"},
		{"oai image part", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "not supported", "messages[0].content[0].type"},
		{"oai wrong type", "/v1/chat/completions", `{"model":"fake","messages":"hi"}`, 400, "messages", "messages"},
		{"oai stream_options", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, 400, "stream", "stream_options"},
		{"oai too long", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "tokens but the model's context is 64 tokens", "messages"},
		{"oai completion no prompt", "/v1/completions", `{"model":"fake"}`, 400, "prompt", "prompt"},
		{"oai completion two prompts", "/v1/completions", `{"model":"fake","prompt":["a","b"]}`, 400, "one prompt", "prompt"},
		{"oai completion echo", "/v1/completions", `{"model":"fake","prompt":"a","echo":true}`, 400, "not supported", "echo"},
		{"oai too large", "/v1/completions", big, 413, "larger than", ""},
		{"oai unknown path", "/v1/images/generations", `{}`, 404, "no such endpoint", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, url+c.path, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if strings.HasPrefix(c.path, "/v1/") {
				e := decode[server.OpenAIError](t, r.body)
				if !strings.Contains(e.Error.Message, c.want) || e.Error.Type == "" {
					t.Errorf("error %+v, want message containing %q", e.Error, c.want)
				}
				if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
					t.Errorf("param %v, want %q", e.Error.Param, c.param)
				}
				return
			}
			e := decode[map[string]string](t, r.body)
			if !strings.Contains(e["error"], c.want) {
				t.Errorf("error %q, want it to contain %q", e["error"], c.want)
			}
		})
	}
}

func TestLoadFailure(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{FailLoad: map[string]bool{"fake:latest": true}})
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"x"}`)
	if r.status != 500 || !strings.Contains(string(r.body), "load failure") {
		t.Errorf("%d %s, want 500 naming the load failure", r.status, r.body)
	}
	r = post(t, url+"/v1/chat/completions", `{"model":"fake:latest","messages":[{"role":"user","content":"x"}]}`)
	e := decode[server.OpenAIError](t, r.body)
	if r.status != 500 || e.Error.Type != "server_error" {
		t.Errorf("%d %s, want a 500 server_error", r.status, r.body)
	}
}

func TestParseHost(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "127.0.0.1:11434"},
		{"0.0.0.0", "0.0.0.0:11434"},
		{":8080", "127.0.0.1:8080"},
		{"http://example.com:9000/", "example.com:9000"},
		{"[::1]:7000", "[::1]:7000"},
	} {
		if got := server.ParseHost(c.in); got != c.want {
			t.Errorf("ParseHost(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	t.Setenv("DFLASH_HOST", ":1234")
	if got := server.AddrFromEnv(); got != "127.0.0.1:1234" {
		t.Errorf("AddrFromEnv with DFLASH_HOST=:1234 = %q", got)
	}
}

// TestMidStreamError: once a stream has started its status is sent, so a generation failure
// must arrive in-band: an {"error"} line for ollama, an error event for OpenAI (both clients
// throw on these); without streaming it is a plain 500.
func TestMidStreamError(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{FailAfter: 2})
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"x"}`)
	lines := ndjsonLines(t, r.body)
	if r.status != 200 || len(lines) != 3 || !strings.Contains(lines[2]["error"].(string), "failure requested") {
		t.Errorf("ollama stream: %d %s, want two pieces then an error line", r.status, r.body)
	}
	r = post(t, url+"/v1/chat/completions", `{"model":"fake","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	events := sseEvents(t, r.body)
	if len(events) != 3 || !strings.Contains(events[2], `"error":{"message":"fake: generation failure requested","type":"server_error"`) {
		t.Errorf("OpenAI stream: %q, want two chunks then an error event", events)
	}
	r = post(t, url+"/api/chat", `{"model":"fake","stream":false,"messages":[{"role":"user","content":"x"}]}`)
	if r.status != 500 || !strings.Contains(string(r.body), "failure requested") {
		t.Errorf("non-stream: %d %s, want 500", r.status, r.body)
	}
}

func TestListenAndServe(t *testing.T) {
	// An address that cannot be bound is an error naming it.
	s := server.New(server.Config{Addr: "256.0.0.1:1"}, &fake.Backend{}, nil)
	if err := s.ListenAndServe(t.Context()); err == nil || !strings.Contains(err.Error(), "256.0.0.1:1") {
		t.Errorf("ListenAndServe on a bad address: %v", err)
	}
	// Cancelling the context shuts down cleanly.
	s = server.New(server.Config{Addr: "127.0.0.1:0"}, &fake.Backend{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.ListenAndServe(ctx); err != nil {
		t.Errorf("ListenAndServe with a cancelled context: %v, want nil", err)
	}
}
