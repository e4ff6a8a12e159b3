package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const personSchema = `{"type":"object","properties":{"name":{"type":"string","minLength":2},"age":{"type":"integer","minimum":18},"tags":{"type":"array","items":{"enum":["a","b"]},"minItems":1}},"required":["name","age","tags"],"additionalProperties":false}`

func validates(t *testing.T, schema, out string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("%q is not JSON: %v", out, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%q does not validate: %v", out, err)
	}
}

// Every API's structured output reaches the backend as a grammar: the fake writes the grammar's
// completion, so what comes back validates exactly when the format was parsed and passed on
// (without a format the fake writes its words, which are not JSON). Thinking stays apart.
func TestStructuredOutputThroughEveryAPI(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{Names: []string{"fake:latest", "fake-tools:latest"}})
	for _, c := range []struct {
		name, path, body, schema string
		content                  func(t *testing.T, b []byte) string
	}{
		{"generate schema", "/api/generate", `{"model":"fake","prompt":"x","stream":false,"format":` + personSchema + `}`, personSchema,
			func(t *testing.T, b []byte) string { return decode[map[string]any](t, b)["response"].(string) }},
		{"generate json", "/api/generate", `{"model":"fake","prompt":"x","stream":false,"format":"json"}`, `true`,
			func(t *testing.T, b []byte) string { return decode[map[string]any](t, b)["response"].(string) }},
		{"chat schema thinking", "/api/chat", `{"model":"fake-tools","messages":[{"role":"user","content":"x"}],"stream":false,"think":true,"format":` + personSchema + `}`, personSchema,
			func(t *testing.T, b []byte) string {
				m := decode[struct{ Message server.OllamaMessage }](t, b).Message
				if m.Thinking != fake.Thinking {
					t.Errorf("thinking %q, want %q", m.Thinking, fake.Thinking)
				}
				return m.Content
			}},
		{"openai json_schema", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":` + personSchema + `}}}`, personSchema,
			func(t *testing.T, b []byte) string {
				return openAIContent(t, b)
			}},
		{"openai json_object", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, `{"type":"object"}`,
			func(t *testing.T, b []byte) string {
				return openAIContent(t, b)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, url+c.path, c.body)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			validates(t, c.schema, strings.TrimSpace(c.content(t, r.body)))
		})
	}
	// Streamed: the chunks' text joins into the same valid value.
	r := post(t, url+"/api/generate", `{"model":"fake","prompt":"x","format":`+personSchema+`}`)
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		var chunk map[string]any
		if err := json.Unmarshal(sc.Bytes(), &chunk); err != nil {
			t.Fatal(err)
		}
		text.WriteString(chunk["response"].(string))
	}
	validates(t, personSchema, text.String())
}

func openAIContent(t *testing.T, b []byte) string {
	r := decode[struct {
		Choices []struct{ Message struct{ Content string } }
	}](t, b)
	if len(r.Choices) != 1 {
		t.Fatalf("%d choices", len(r.Choices))
	}
	return r.Choices[0].Message.Content
}
