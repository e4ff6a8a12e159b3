package backend_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A random Qwen3 model with the real tokenizer and template (151,936 tokens, thinking) writes
// junk; under a schema the content validates, greedy and sampled, with thinking on (the block
// stays free, the answer after it is constrained) and off, within a short budget.
func TestQwen3StructuredOutputOverHTTP(t *testing.T) {
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
	const schema = `{"type":"object","properties":{"city":{"type":"string","maxLength":12},"temp":{"type":"number","minimum":-40,"maximum":50},"sunny":{"type":"boolean"}},"required":["city","temp","sunny"],"additionalProperties":false}`
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, think := range []string{"true", "false"} {
		for _, opts := range []string{`{"temperature":0,"num_predict":100}`, `{"temperature":1,"seed":7,"num_predict":100}`} {
			body := `{"model":"qwen","stream":false,"think":` + think + `,"format":` + schema + `,"options":` + opts +
				`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`
			resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			var r server.OllamaChatResponse
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			content := strings.TrimSpace(r.Message.Content)
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(content))
			if err != nil {
				t.Fatalf("think %s %s: content %q (thinking %q) is not JSON: %v", think, opts, content, r.Message.Thinking, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("think %s %s: %q does not validate: %v", think, opts, content, err)
			}
			t.Logf("think %s %s: thinking %q content %s", think, opts, r.Message.Thinking, content)
		}
	}
}
