package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

func TestOperationalEndpoints(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		r := do(t, "GET", url+"/", "")
		if r.status != 200 || string(r.body) != "dflash is running" {
			t.Errorf("GET /: %d %q, want 200 %q", r.status, r.body, "dflash is running")
		}
		r = do(t, "HEAD", url+"/", "")
		if r.status != 200 || len(r.body) != 0 {
			t.Errorf("HEAD /: %d with %d body bytes, want 200 and none", r.status, len(r.body))
		}
		if r := do(t, "GET", url+"/health", ""); r.status != 200 {
			t.Errorf("GET /health: %d", r.status)
		}
		if r := do(t, "GET", url+"/ready", ""); r.status != 200 {
			t.Errorf("GET /ready: %d %s", r.status, r.body)
		}
		v := decode[map[string]string](t, do(t, "GET", url+"/api/version", "").body)
		if v["version"] != server.OllamaVersion || v["dflash_version"] != "dev" {
			t.Errorf("version %q, dflash_version %q; want ollama's %s and the default \"dev\"", v["version"], v["dflash_version"], server.OllamaVersion)
		}
		// A generation, then the metrics must show the request, its tokens and queue gauge.
		post(t, url+"/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"hi","stream":false}`, bc.model))
		m := string(do(t, "GET", url+"/metrics", "").body)
		for _, want := range []string{
			`dflash_http_requests_total{endpoint="/api/generate",status="200"} 1`,
			`dflash_generated_tokens_total{model="` + bc.model + `"}`,
			`dflash_prompt_tokens_total{model="` + bc.model + `"}`,
			`dflash_prompt_reused_tokens_total{model="` + bc.model + `"}`,
			"dflash_queue_depth 0",
			"dflash_time_per_output_token_seconds_bucket",
			"dflash_model_load_duration_seconds_count{model=\"" + bc.model + "\"} 1",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		if r := do(t, "GET", url+"/nope", ""); r.status != 404 || !strings.Contains(string(r.body), `"error"`) {
			t.Errorf("GET /nope: %d %s, want a JSON 404", r.status, r.body)
		}
		if r := do(t, "GET", url+"/api/generate", ""); r.status != 405 || r.header.Get("Allow") != "POST" {
			t.Errorf("GET /api/generate: %d Allow=%q, want 405 Allow=POST", r.status, r.header.Get("Allow"))
		}
	})
}

// noModels is a backend with nothing configured: /ready must say so.
type noModels struct{ fake.Backend }

func (*noModels) Models() []server.ModelInfo { return nil }

func TestReadyWithoutModels(t *testing.T) {
	_, url := startServer(t, server.Config{}, &noModels{})
	if r := do(t, "GET", url+"/ready", ""); r.status != 503 {
		t.Errorf("GET /ready with no models: %d, want 503", r.status)
	}
	if r := do(t, "GET", url+"/health", ""); r.status != 200 {
		t.Errorf("GET /health: %d, want 200 (liveness does not need models)", r.status)
	}
}

func TestModelListings(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		tags := decode[struct {
			Models []server.OllamaModel `json:"models"`
		}](t, do(t, "GET", url+"/api/tags", "").body)
		found := false
		for _, m := range tags.Models {
			found = found || (m.Name == bc.model && m.Model == bc.model)
		}
		if !found {
			t.Errorf("/api/tags %+v lacks %s", tags.Models, bc.model)
		}

		r := post(t, url+"/api/show", fmt.Sprintf(`{"model":%q}`, bc.model))
		show := decode[server.OllamaShowResponse](t, r.body)
		if r.status != 200 || show.Details.Family == "" || len(show.Capabilities) == 0 {
			t.Errorf("/api/show: %d %s", r.status, r.body)
		}
		if r := post(t, url+"/api/show", `{"name":"no-such"}`); r.status != 404 {
			t.Errorf("/api/show unknown: %d, want 404", r.status)
		}
		if r := post(t, url+"/api/show", `{}`); r.status != 400 || !strings.Contains(string(r.body), "model") {
			t.Errorf("/api/show without model: %d %s, want 400 naming model", r.status, r.body)
		}

		list := decode[struct {
			Object string               `json:"object"`
			Data   []server.OpenAIModel `json:"data"`
		}](t, do(t, "GET", url+"/v1/models", "").body)
		if list.Object != "list" || len(list.Data) != len(tags.Models) {
			t.Errorf("/v1/models: %+v, want a list of %d", list, len(tags.Models))
		}
		one := decode[server.OpenAIModel](t, do(t, "GET", url+"/v1/models/"+bc.model, "").body)
		if one.ID != bc.model || one.Object != "model" {
			t.Errorf("/v1/models/%s: %+v", bc.model, one)
		}
		r = do(t, "GET", url+"/v1/models/no-such", "")
		e := decode[server.OpenAIError](t, r.body)
		if r.status != 404 || e.Error.Code == nil || *e.Error.Code != "model_not_found" {
			t.Errorf("/v1/models/no-such: %d %s", r.status, r.body)
		}
	})
}

func TestOllamaGenerate(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		// Non-streaming: one object with the whole answer and the counters.
		r := post(t, url+"/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Why is the sky blue?","stream":false}`, bc.model))
		g := decode[server.OllamaGenerateResponse](t, r.body)
		if r.status != 200 || !g.Done || !bc.ended(g.DoneReason) {
			t.Fatalf("non-stream: %d %s", r.status, r.body)
		}
		if bc.text != "" && g.Response != bc.text {
			t.Errorf("response %q, want %q", g.Response, bc.text)
		}
		if g.EvalCount <= 0 || g.PromptEvalCount <= 0 || g.TotalDuration <= 0 || g.EvalDuration <= 0 {
			t.Errorf("counters missing: %+v", g.OllamaMetrics)
		}
		if g.LoadDuration <= 0 {
			t.Errorf("first request must report its load_duration, got %d", g.LoadDuration)
		}

		// Streaming (the default): pieces then a final done line whose response is empty.
		r = post(t, url+"/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Why is the sky blue?"}`, bc.model))
		if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Errorf("stream content type %q", ct)
		}
		lines := ndjsonLines(t, r.body)
		var text strings.Builder
		for i, l := range lines {
			text.WriteString(l["response"].(string))
			if done := l["done"].(bool); done != (i == len(lines)-1) {
				t.Errorf("line %d done=%v of %d lines", i, done, len(lines))
			}
		}
		last := lines[len(lines)-1]
		if last["response"] != "" || !bc.ended(last["done_reason"]) || last["eval_count"] == nil {
			t.Errorf("final line %v", last)
		}
		if bc.words != nil && len(lines) != len(bc.words)+1 {
			t.Errorf("%d lines, want one per token (%d) plus the final", len(lines), len(bc.words))
		}
		if bc.text != "" && text.String() != bc.text {
			t.Errorf("streamed %q, want %q", text.String(), bc.text)
		}
		if g.LoadDuration > 0 && last["load_duration"] != nil {
			t.Errorf("second request reports load_duration %v, the model was already loaded", last["load_duration"])
		}
	})
}

func TestOllamaGenerateOptions(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	cases := []struct {
		name, body, want, reason string
	}{
		// num_predict 3 keeps the first three tokens and reports "length".
		{"num_predict", `{"model":"fake","prompt":"x","stream":false,"options":{"num_predict":3,"temperature":0,"seed":7}}`, "The quick brown", "length"},
		// The stop sequence " fox" is cut with everything after it; the reason is "stop".
		{"stop", `{"model":"fake","prompt":"x","stream":false,"options":{"stop":[" fox"]}}`, "The quick brown", "stop"},
		// A stop spanning two tokens (" the laz") is still found and removed.
		{"stop across tokens", `{"model":"fake","prompt":"x","stream":false,"options":{"stop":["e laz"]}}`, "The quick brown fox jumps over th", "stop"},
		// raw skips the template; system is ignored with raw.
		{"raw", `{"model":"fake","prompt":"x","raw":true,"system":"s","stream":false}`, fake.Text, "stop"},
		// num_predict 0 generates nothing.
		{"num_predict 0", `{"model":"fake","prompt":"x","stream":false,"options":{"num_predict":0}}`, "", "length"},
		// A context of 8 with a 6-token prompt (BOS, "<|user|>", a, b, c, "<|assistant|>")
		// leaves room for 2.
		{"num_ctx", `{"model":"fake","prompt":"a b c","stream":false,"options":{"num_ctx":8}}`, "The quick", "length"},
		// Unknown options and template are accepted and ignored.
		{"ignored", `{"model":"fake","prompt":"x","stream":false,"template":"{{.Prompt}}","options":{"num_thread":4,"mirostat":1}}`, fake.Text, "stop"},
		// An empty prompt loads the model only.
		{"load", `{"model":"fake"}`, "", "load"},
		{"unload", `{"model":"fake","keep_alive":0}`, "", "unload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, url+"/api/generate", c.body)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			lines := ndjsonLines(t, r.body) // non-stream is one line
			var text strings.Builder
			for _, l := range lines {
				text.WriteString(l["response"].(string))
			}
			last := lines[len(lines)-1]
			if text.String() != c.want || last["done_reason"] != c.reason {
				t.Errorf("got %q (%v), want %q (%s)", text.String(), last["done_reason"], c.want, c.reason)
			}
		})
	}
}

func TestOllamaChat(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]`
		r := post(t, url+"/api/chat", fmt.Sprintf(`{"model":%q,"messages":%s,"stream":false}`, bc.model, msgs))
		c := decode[server.OllamaChatResponse](t, r.body)
		if r.status != 200 || !c.Done || c.Message.Role != "assistant" || !bc.ended(c.DoneReason) {
			t.Fatalf("non-stream: %d %s", r.status, r.body)
		}
		if bc.text != "" && c.Message.Content != bc.text {
			t.Errorf("content %q, want %q", c.Message.Content, bc.text)
		}

		r = post(t, url+"/api/chat", fmt.Sprintf(`{"model":%q,"messages":%s}`, bc.model, msgs))
		lines := ndjsonLines(t, r.body)
		var text strings.Builder
		for _, l := range lines {
			m := l["message"].(map[string]any)
			if m["role"] != "assistant" {
				t.Errorf("line role %v", m["role"])
			}
			text.WriteString(m["content"].(string))
		}
		if bc.text != "" && text.String() != bc.text {
			t.Errorf("streamed %q, want %q", text.String(), bc.text)
		}
		if last := lines[len(lines)-1]; last["done"] != true || last["eval_count"] == nil {
			t.Errorf("final line %v", last)
		}

		if bc.draftModel != "" {
			r := post(t, url+"/api/chat", fmt.Sprintf(`{"model":%q,"messages":%s,"stream":false}`, bc.draftModel, msgs))
			c := decode[server.OllamaChatResponse](t, r.body)
			if s := c.Speculation; s == nil || s.Rounds <= 0 || s.Tau < 1 {
				t.Errorf("draft model speculation %+v in %s", s, r.body)
			}
		}
	})
}

func TestOpenAIChat(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		msgs := `[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"}]}]`
		r := post(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":%s,"max_tokens":1000,"seed":1}`, bc.model, msgs))
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Message      struct{ Role, Content string } `json:"message"`
				FinishReason string                         `json:"finish_reason"`
			} `json:"choices"`
			Usage server.OpenAIUsage `json:"usage"`
		}
		decodeInto(t, r.body, &c)
		if r.status != 200 || c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.Choices) != 1 {
			t.Fatalf("non-stream: %d %s", r.status, r.body)
		}
		ch := c.Choices[0]
		if ch.Message.Role != "assistant" || !bc.ended(ch.FinishReason) || (bc.text != "" && ch.Message.Content != bc.text) {
			t.Errorf("choice %+v", ch)
		}
		if u := c.Usage; u.CompletionTokens <= 0 || u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v", u)
		}

		// Streaming with include_usage: role first, content deltas, finish chunk, usage chunk
		// with empty choices, then [DONE]; every chunk but the last carries "usage": null.
		r = post(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":%s,"stream":true,"stream_options":{"include_usage":true}}`, bc.model, msgs))
		if ct := r.header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("content type %q", ct)
		}
		events := sseEvents(t, r.body)
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("stream does not end with [DONE]: %q", events[len(events)-1])
		}
		var text strings.Builder
		chunks := events[:len(events)-1]
		for i, e := range chunks {
			k := decode[map[string]json.RawMessage](t, []byte(e))
			if string(k["object"]) != `"chat.completion.chunk"` {
				t.Errorf("chunk %d object %s", i, k["object"])
			}
			if i < len(chunks)-1 {
				if string(k["usage"]) != "null" {
					t.Errorf("chunk %d usage %s, want null", i, k["usage"])
				}
				var choices []struct {
					Delta struct {
						Role    string  `json:"role"`
						Content *string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				}
				decodeInto(t, k["choices"], &choices)
				if len(choices) != 1 {
					t.Fatalf("chunk %d has %d choices", i, len(choices))
				}
				if (i == 0) != (choices[0].Delta.Role == "assistant") {
					t.Errorf("chunk %d role %q: only the first names the role", i, choices[0].Delta.Role)
				}
				if choices[0].Delta.Content != nil {
					text.WriteString(*choices[0].Delta.Content)
				}
				if (i == len(chunks)-2) != (choices[0].FinishReason != nil) {
					t.Errorf("chunk %d finish_reason %v: only the last choice chunk has one", i, choices[0].FinishReason)
				}
			} else {
				if string(k["choices"]) != "[]" {
					t.Errorf("usage chunk choices %s, want []", k["choices"])
				}
				u := decode[server.OpenAIUsage](t, k["usage"])
				if u.CompletionTokens <= 0 {
					t.Errorf("usage chunk %s", k["usage"])
				}
			}
		}
		if bc.text != "" && text.String() != bc.text {
			t.Errorf("streamed %q, want %q", text.String(), bc.text)
		}

		// max_completion_tokens wins over max_tokens and gives finish_reason "length".
		r = post(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":%s,"max_tokens":5,"max_completion_tokens":2}`, bc.model, msgs))
		decodeInto(t, r.body, &c)
		if c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 2 {
			t.Errorf("max_completion_tokens 2: %s", r.body)
		}
	})
}

func TestOpenAICompletion(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		type choice struct {
			Text         string  `json:"text"`
			FinishReason *string `json:"finish_reason"`
		}
		type resp struct {
			ID      string              `json:"id"`
			Object  string              `json:"object"`
			Choices []choice            `json:"choices"`
			Usage   *server.OpenAIUsage `json:"usage"`
		}
		r := post(t, url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"Once upon","max_tokens":2,"stop":"zzz"}`, bc.model))
		c := decode[resp](t, r.body)
		if r.status != 200 || c.Object != "text_completion" || len(c.Choices) != 1 || *c.Choices[0].FinishReason != "length" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if bc.words != nil && c.Choices[0].Text != bc.words[0]+bc.words[1] {
			t.Errorf("text %q, want the first two tokens", c.Choices[0].Text)
		}
		if c.Usage == nil || c.Usage.CompletionTokens != 2 {
			t.Errorf("usage %+v, want 2 completion tokens", c.Usage)
		}

		r = post(t, url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":["Once upon"],"stream":true,"max_tokens":100}`, bc.model))
		events := sseEvents(t, r.body)
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("no [DONE]: %q", events)
		}
		var text strings.Builder
		for i, e := range events[:len(events)-1] {
			k := decode[resp](t, []byte(e))
			if k.Object != "text_completion" || len(k.Choices) != 1 || k.Usage != nil {
				t.Errorf("chunk %d: %s", i, e)
			}
			text.WriteString(k.Choices[0].Text)
		}
		if bc.text != "" && text.String() != bc.text {
			t.Errorf("streamed %q, want %q", text.String(), bc.text)
		}
	})
}

// A model that failed its startup checks and was kept (dflash serve --skip-broken) is listed
// with its error, refused on use with it (before any load, so the loaded model stays), and does
// not make the server unready while another model is available.
func TestUnavailableModel(t *testing.T) {
	const why = "backend: model broken:latest: load /srv/models/broken: model /srv/models/broken: tensor model.norm.weight is missing (want shape [16])"
	b := &fake.Backend{Names: []string{"fake:latest", "broken:latest"}, Unavailable: map[string]string{"broken:latest": why}}
	_, url := startServer(t, server.Config{}, b)
	// The error clients see names the tensor and the folder, not the server's disk layout.
	const told = "tensor model.norm.weight is missing"

	tags := decode[struct {
		Models []server.OllamaModel `json:"models"`
	}](t, do(t, "GET", url+"/api/tags", "").body)
	errs := map[string]string{}
	for _, m := range tags.Models {
		errs[m.Name] = m.Error
	}
	if len(errs) != 2 || errs["fake:latest"] != "" || !strings.Contains(errs["broken:latest"], told) || strings.Contains(errs["broken:latest"], "/srv/") {
		t.Errorf("/api/tags errors %q; want broken:latest listed with %q (paths redacted), fake:latest without", errs, told)
	}
	if r := do(t, "GET", url+"/ready", ""); r.status != 200 {
		t.Errorf("/ready with one model unavailable: %d %s, want 200 for the other", r.status, r.body)
	}

	post(t, url+"/api/generate", `{"model":"fake","prompt":"hi","stream":false,"keep_alive":-1}`)
	loads := b.Loads()
	for _, c := range []struct{ path, body string }{
		{"/api/generate", `{"model":"broken","prompt":"hi"}`},
		{"/api/chat", `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"model":"broken:latest","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/completions", `{"model":"broken:latest","prompt":"hi"}`},
	} {
		r := post(t, url+c.path, c.body)
		if r.status != 500 || !strings.Contains(string(r.body), told) || !strings.Contains(string(r.body), "unavailable") {
			t.Errorf("%s on the unavailable model: %d %s; want 500 saying it is unavailable and why", c.path, r.status, r.body)
		}
	}
	if b.Loads() != loads || b.Closes() != 0 {
		t.Errorf("refusing the unavailable model loaded %d and closed %d models; want neither", b.Loads()-loads, b.Closes())
	}
	if r := post(t, url+"/api/show", `{"model":"broken"}`); !strings.Contains(string(r.body), told) {
		t.Errorf("/api/show of the unavailable model: %d %s; want its error", r.status, r.body)
	}
	one := decode[server.OpenAIModel](t, do(t, "GET", url+"/v1/models/broken:latest", "").body)
	if !strings.Contains(one.Error, told) {
		t.Errorf("/v1/models/broken:latest: %+v; want its error", one)
	}

	// Every model unavailable: not ready.
	all := &fake.Backend{Names: []string{"broken:latest"}, Unavailable: map[string]string{"broken:latest": why}}
	_, url2 := startServer(t, server.Config{}, all)
	if r := do(t, "GET", url2+"/ready", ""); r.status != 503 {
		t.Errorf("/ready with no model available: %d, want 503", r.status)
	}
}
