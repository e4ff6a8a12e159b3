package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

type schemaCase struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

func loadCases(t testing.TB) []schemaCase {
	b, err := os.ReadFile("testdata/schemas.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs []schemaCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// validator compiles schema with an independent JSON-schema implementation.
func validator(t testing.TB, schema []byte) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t testing.TB, s *jsonschema.Schema, out string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output %q is not JSON: %v", out, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("output %q does not validate: %v", out, err)
	}
}

// walk writes a random text the grammar accepts: each byte drawn from those allowed, stopping
// at a complete state with probability 1/4 (always once nothing else may follow); after 60
// bytes it finishes with Grammar.Finish.
func walk(g *Grammar, r *rand.Rand) (string, bool) {
	st := g.Start()
	var out []byte
	for {
		var allowed []byte
		for b := range 256 {
			if _, ok := g.Advance(st, []byte{byte(b)}); ok {
				allowed = append(allowed, byte(b))
			}
		}
		if g.Complete(st) && (len(allowed) == 0 || r.IntN(4) == 0) {
			return string(out), true
		}
		if len(allowed) == 0 {
			return string(out), false // a dead end: must never happen
		}
		if len(out) > 60 {
			rest := g.Finish(st)
			st, ok := g.Advance(st, rest)
			return string(append(out, rest...)), ok && g.Complete(st)
		}
		b := allowed[r.IntN(len(allowed))]
		st, _ = g.Advance(st, []byte{b})
		out = append(out, b)
	}
}

// Every text a random walk through a schema's grammar writes parses and validates under an
// independent validator, and no walk meets a dead end (a state with no byte allowed that is not
// complete): the property that lets a masked sampler always finish.
func TestRandomWalksValidate(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			g, err := CompileSchema(c.Schema)
			if err != nil {
				t.Fatal(err)
			}
			v := validator(t, c.Schema)
			r := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				out, ok := walk(g, r)
				if !ok {
					t.Fatalf("walk stuck after %q", out)
				}
				validate(t, v, out)
			}
		})
	}
}

func TestAnyJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range []*Grammar{AnyJSON(), AnyObject()} {
		for range 200 {
			out, ok := walk(g, r)
			if !ok || !json.Valid([]byte(out)) {
				t.Fatalf("walk %q (ok %v) is not JSON", out, ok)
			}
		}
	}
	if out, _ := walk(AnyObject(), r); !strings.HasPrefix(out, "{") {
		t.Errorf("json_object wrote %q", out)
	}
}

// Fixed texts: accepted and refused exactly as the schema says, within the grammar's subset.
func TestAccepts(t *testing.T) {
	for _, c := range []struct {
		schema, text string
		ok           bool
	}{
		{`{"type":"integer","minimum":3,"maximum":12}`, `12`, true},
		{`{"type":"integer","minimum":3,"maximum":12}`, `13`, false},
		{`{"type":"integer","minimum":3,"maximum":12}`, `2`, false},
		{`{"type":"integer","exclusiveMaximum":0}`, `-0`, false},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.3333`, true},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.5`, true},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.51`, false},
		{`{"type":"number"}`, `01`, false},
		{`{"type":"number"}`, `-0`, false},
		{`{"type":"number"}`, `-0.0`, false},
		{`{"type":"number"}`, `-0.01`, true},
		{`{"type":"number"}`, `-0.0000000001`, true},
		{`{"type":"number"}`, `-0.0000000000`, false},
		{`{"type":"number","minimum":0}`, `-0.01`, false},
		{`{"type":"number"}`, `1e5`, false},
		{`{"type":"string","maxLength":2}`, `"é\u00e9"`, true},
		{`{"type":"string","maxLength":2}`, `"abc"`, false},
		{`{"type":"string"}`, `"\ud800"`, false},
		{`{"type":"string","pattern":"^a[0-9]+$"}`, `"a12"`, true},
		{`{"type":"string","pattern":"^a[0-9]+$"}`, `"a"`, false},
		{`{"type":"string","pattern":"b"}`, `"abc"`, true},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`, `{"a": 1}`, true},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`, `{"a":1,"a":2}`, false},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`, `{"b":1}`, false},
		{`{"type":"object","properties":{"a":{"type":"integer"}}}`, `{"ab":"x","a":1}`, true},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`, `{}`, false},
		{`{"type":"object"}`, `{"a":1,  "b":2}`, false},
		{`{"type":"array","maxItems":1}`, `[1,2]`, false},
		{`{"type":"array","minItems":1}`, `[]`, false},
		{`{"enum":[1,"x",null]}`, `"x"`, true},
	} {
		g, err := CompileSchema([]byte(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		st, ok := g.Advance(g.Start(), []byte(c.text))
		if got := ok && g.Complete(st); got != c.ok {
			t.Errorf("%s on %s: %v, want %v", c.schema, c.text, got, c.ok)
		}
	}
}

func TestSchemaErrors(t *testing.T) {
	for _, c := range []struct{ schema, path string }{
		{`{"type":"integer","multipleOf":2}`, "multipleOf"},
		{`{"properties":{"a":{"not":{}}}}`, "properties.a.not"},
		{`{"type":"strin"}`, "type"},
		{`{"$ref":"http://x/y"}`, "$ref"},
		{`{"type":"string","pattern":"(?=x)"}`, "pattern"},
		{`{"type":"object","required":["x"],"additionalProperties":false}`, "required"},
		{`{"type":"integer","minimum":5,"maximum":4}`, ""},
		{`{"oneOf":[{"type":"string"},{"type":"string"}]}`, "oneOf"},
		{`{"type":`, ""},
	} {
		_, err := CompileSchema([]byte(c.schema))
		var se *SchemaError
		if !errors.As(err, &se) || se.Path != c.path {
			t.Errorf("%s: error %v, want one at %q", c.schema, err, c.path)
		}
	}
}

// A reference cycle that consumes no byte (anyOf whose branch is the schema itself) compiles to
// its other branches instead of recursing forever.
func TestLeftRecursion(t *testing.T) {
	g, err := CompileSchema([]byte(`{"anyOf":[{"$ref":"#"},{"type":"array","items":{"$ref":"#"},"maxItems":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := g.Advance(g.Start(), []byte(`[[],[[]]]`))
	if !ok || !g.Complete(st) {
		t.Errorf("nested arrays refused")
	}
	if _, err := CompileSchema([]byte(`{"$ref":"#"}`)); err == nil {
		t.Error("a schema that is only itself compiled")
	}
}

// Compiling any input and following a few bytes never panics.
func FuzzCompileSchema(f *testing.F) {
	for _, c := range loadCases(f) {
		f.Add([]byte(c.Schema), []byte(`{"a":[1,"x"]}`))
	}
	f.Add([]byte(`{"type":"string","pattern":"(a|b{2,3})*[^x-z]\\d$"}`), []byte(`"abb1"`))
	f.Fuzz(func(t *testing.T, schema, text []byte) {
		g, err := CompileSchema(schema)
		if err != nil {
			return
		}
		st := g.Start()
		for _, b := range text {
			next, ok := g.Advance(st, []byte{b})
			if !ok {
				break
			}
			st = next
		}
		g.Finish(st)
	})
}
