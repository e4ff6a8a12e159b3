package server_test

import (
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// TestModelDefaultOptions: a model's default options (an ollama params layer) apply to the
// ollama and the OpenAI endpoints under the request's own: an option the request leaves out takes the model's
// value, one it gives wins, and one neither gives keeps ollama's default. A broken default is the
// model's fault (500 naming the params layer), a broken request option the client's (400).
func TestModelDefaultOptions(t *testing.T) {
	b := &fake.Backend{Options: `{"temperature": 0.25, "top_k": 7, "seed": 9, "stop": ["lazy"]}`}
	_, url := startServer(t, server.Config{}, b)
	gen := func(body string) response {
		t.Helper()
		return post(t, url+"/api/generate", body)
	}
	r := gen(`{"model": "fake", "prompt": "hi", "stream": false}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	o, _ := b.LastOptions()
	// top_p is ollama's default 0.9; the rest are the model's.
	if o.Temperature != 0.25 || o.TopK != 7 || o.Seed != 9 || o.TopP != 0.9 {
		t.Errorf("model defaults not applied: %+v", o)
	}
	if res := decode[map[string]any](t, r.body); strings.Contains(res["response"].(string), "lazy") {
		t.Errorf("the model's default stop string was not applied: %q", res["response"])
	}
	if r := gen(`{"model": "fake", "prompt": "hi", "stream": false, "options": {"temperature": 0.9, "top_k": null}}`); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if o, _ := b.LastOptions(); o.Temperature != 0.9 || o.TopK != 7 {
		t.Errorf("request options must win over the model's (a null one leaves the default): %+v", o)
	}
	// The chat endpoint takes the defaults too.
	if r := post(t, url+"/api/chat", `{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": false}`); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if o, _ := b.LastOptions(); o.Temperature != 0.25 {
		t.Errorf("/api/chat: temperature %v, want the model's 0.25", o.Temperature)
	}
	if r := gen(`{"model": "fake", "prompt": "hi", "stream": false, "options": {"temperature": "hot"}}`); r.status != 400 {
		t.Errorf("a bad request option: %d %s, want 400", r.status, r.body)
	}

	// The OpenAI endpoints take the defaults for the options a request leaves out.
	if r := post(t, url+"/v1/completions", `{"model": "fake", "prompt": "hi", "top_p": 0.5}`); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if o, _ := b.LastOptions(); o.Temperature != 0.25 || o.TopK != 7 || o.Seed != 9 || o.TopP != 0.5 {
		t.Errorf("/v1/completions: %+v, want the model's temperature, top_k and seed and the request's top_p", o)
	}
	if r := post(t, url+"/v1/chat/completions", `{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.5}`); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if o, _ := b.LastOptions(); o.Temperature != 1.5 || o.TopK != 7 {
		t.Errorf("/v1/chat/completions: %+v, want the request's temperature and the model's top_k", o)
	}

	// /api/show lists the defaults as ollama's parameters text, after the served num_ctx.
	show := decode[server.OllamaShowResponse](t, post(t, url+"/api/show", `{"model": "fake"}`).body)
	want := "num_ctx                        64\nseed                           9\nstop                           \"lazy\"\ntemperature                    0.25\ntop_k                          7"
	if show.Parameters != want {
		t.Errorf("/api/show parameters:\n got %q\nwant %q", show.Parameters, want)
	}

	bad := &fake.Backend{Options: `{"temperature": "hot"}`}
	_, url = startServer(t, server.Config{}, bad)
	r = post(t, url+"/api/generate", `{"model": "fake", "prompt": "hi", "stream": false}`)
	if r.status != 500 || !strings.Contains(string(r.body), "params layer") {
		t.Errorf("a bad model default: %d %s, want 500 naming the params layer", r.status, r.body)
	}
	// A request that gives the option itself does not trip over the model's bad default.
	if r := post(t, url+"/api/generate", `{"model": "fake", "prompt": "hi", "stream": false, "options": {"temperature": 1}}`); r.status != 200 {
		t.Errorf("a request overriding the bad default: %d %s, want 200", r.status, r.body)
	}
}
