package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/sample/grammar"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonVocab is a toy vocabulary for a random model: every printable ASCII byte, a few
// multi-byte JSON pieces (which cross from a key into its value, or close a string and an
// object at once), a two-byte UTF-8 letter, and EOS last.
func jsonVocab() (toks [][]byte, eos int) {
	for b := 0x20; b < 0x7f; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, p := range []string{`{"`, `":`, `": `, `",`, `"}`, `]}`, `, "`, `true`, `false`, `null`, `12`, `name`, `"é"`, "\n", `}}`, `":"`, `-0.`, `[{"`, `ab`} {
		toks = append(toks, []byte(p))
	}
	toks = append(toks, nil) // EOS: no text
	return toks, len(toks) - 1
}

type schemaCase struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

func schemaTable(t *testing.T) []schemaCase {
	b, err := os.ReadFile("../sample/grammar/testdata/schemas.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs []schemaCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

func compileValidator(t *testing.T, schema []byte) *jsonschema.Schema {
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

func textOf(toks [][]byte, ids []int) string {
	var b []byte
	for _, id := range ids {
		b = append(b, toks[id]...)
	}
	return string(b)
}

func constrained(t *testing.T, target model.Target, req runner.Request) ([]int, runner.Stats) {
	t.Helper()
	var out []int
	st, err := runner.Generate(context.Background(), runner.NewSequence(target, 512), req,
		func(tok runner.Token) error { out = append(out, tok.ID); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if req.Session != nil {
		if err := req.Session.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out, st
}

// A random model writes junk; under a schema's grammar that junk parses and validates, for every
// schema of the table, greedy and sampled, within a small token budget (the grammar steers the
// last tokens to a completion). Greedy speculative decoding under the grammar emits exactly the
// plain constrained tokens, with drafts that mostly agree (the plain output, noisy) and drafts
// that mostly break the grammar (the unconstrained greedy output, noisy).
func TestConstrainedOutputValidates(t *testing.T) {
	toks, eos := jsonVocab()
	vocab := grammar.NewVocab(toks, []int{eos})
	target := tinyQwen3(t, len(toks), 42)
	prompt := []int{3, 1, 4, 1, 5}
	const budget = 120
	for _, sc := range schemaTable(t) {
		t.Run(sc.Name, func(t *testing.T) {
			g, err := grammar.CompileSchema(sc.Schema)
			if err != nil {
				t.Fatal(err)
			}
			v := compileValidator(t, sc.Schema)
			c := grammar.NewConstraint(g, vocab)
			check := func(what string, out []int, st runner.Stats) {
				t.Helper()
				text := textOf(toks, out)
				if st.Reason != runner.StopToken {
					t.Fatalf("%s: %q ended by %v, want the end of the value", what, text, st.Reason)
				}
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				if err != nil {
					t.Fatalf("%s: %q is not JSON: %v", what, text, err)
				}
				if err := v.Validate(inst); err != nil {
					t.Fatalf("%s: %q does not validate: %v", what, text, err)
				}
			}
			greedy, st := constrained(t, target, runner.Request{Prompt: prompt, MaxTokens: budget, Stop: []int{eos}, Constraint: c})
			check("greedy", greedy, st)
			for seed := range uint64(3) {
				out, st := constrained(t, target, runner.Request{Prompt: prompt, MaxTokens: budget, Stop: []int{eos}, Constraint: c,
					Options: sample.Options{Temperature: 1, Seed: seed}})
				check("T=1", out, st)
				if seed == 0 {
					t.Logf("greedy %s\nT=1    %s", textOf(toks, greedy), textOf(toks, out))
				}
			}
			// A random DFlash draft, whose proposals the grammar masks (so they are
			// grammatical, and drafted past where the output completes never).
			draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 5, kernel.F32)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []sample.Options{{}, {Temperature: 1, Seed: 0}} {
				want := greedy
				if o.Temperature > 0 {
					// Sampled: the same seed reproduces at a fixed depth; the output differs
					// from plain (the draws differ) but must validate the same.
					want = nil
				}
				got, st := constrained(t, target, runner.Request{Prompt: prompt, MaxTokens: budget, Stop: []int{eos}, Constraint: c,
					Options: o, Session: runner.NewBlockSession(draft, 512), Depth: runner.Fixed(4)})
				check("dflash draft", got, st)
				if want != nil && !slices.Equal(got, want) {
					t.Fatalf("speculative (dflash draft) %q\nwant plain %q", textOf(toks, got), textOf(toks, want))
				}
			}
			free, _ := constrained(t, target, runner.Request{Prompt: prompt, MaxTokens: budget, Stop: []int{eos}})
			for _, d := range []struct {
				name string
				seq  []int
			}{{"near", greedy}, {"unconstrained", free}} {
				o := &runner.OracleDrafter{Tokens: append(slices.Clone(prompt), d.seq...), Limit: 4, Noise: 0.2, Vocab: len(toks), Seed: 9}
				got, st := constrained(t, target, runner.Request{Prompt: prompt, MaxTokens: budget, Stop: []int{eos}, Constraint: c,
					Session: o.Open(512), Depth: o.Depth()})
				if !slices.Equal(got, greedy) {
					t.Fatalf("speculative (%s drafts) %q\nwant plain %q", d.name, textOf(toks, got), textOf(toks, greedy))
				}
				if st.Drafted == 0 {
					t.Fatalf("%s: nothing drafted", d.name)
				}
			}
		})
	}
}

// Constrained generations batched on one Batcher (one shared Constraint, concurrent mask
// lookups) emit what each emits alone.
func TestConstrainedBatchEqualsAlone(t *testing.T) {
	toks, eos := jsonVocab()
	vocab := grammar.NewVocab(toks, []int{eos})
	target := tinyQwen3(t, len(toks), 7)
	cs := schemaTable(t)
	g, err := grammar.CompileSchema(cs[0].Schema)
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, vocab)
	const n = 4
	want := make([][]int, n)
	for i := range n {
		want[i], _ = constrained(t, target, runner.Request{Prompt: []int{i + 1, 2}, MaxTokens: 80, Stop: []int{eos}, Constraint: c,
			Options: sample.Options{Temperature: 1, Seed: uint64(i)}})
	}
	b := runner.NewBatcher(target)
	got := make([][]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Generate(context.Background(), runner.NewSequence(target, 512),
				runner.Request{Prompt: []int{i + 1, 2}, MaxTokens: 80, Stop: []int{eos}, Constraint: c, Options: sample.Options{Temperature: 1, Seed: uint64(i)}},
				func(tok runner.Token) error { got[i] = append(got[i], tok.ID); return nil })
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("sequence %d batched %q, alone %q", i, textOf(toks, got[i]), textOf(toks, want[i]))
		}
	}
}
