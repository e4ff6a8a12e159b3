package grammar

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/tokenizer"
)

// toyVocab has every single byte, some multi-byte JSON pieces (tokens that cross from a key
// into a value, or end a string and an object at once), text words, duplicates, and two
// specials: an empty token (never allowed) and the stop id.
func toyVocab() ([][]byte, []int) {
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{`{"`, `":`, `": `, `",`, `"}`, `}]`, `name`, `age`, `"name`, `true`, `false`, `null`,
		`12`, `-1`, `0.`, `ab`, `abc`, ` "`, `, "`, `é`, "\xc3", `\n`, `\u00`, `red`, `"red"`, `ab`, `[{"x`, `}}`, `"a`} {
		toks = append(toks, []byte(s))
	}
	toks = append(toks, nil, []byte("<|end|>"))
	return toks, []int{len(toks) - 1}
}

// A mask allows exactly the tokens whose bytes the grammar accepts (stops exactly when the
// state is complete), checked by brute force along random walks of every table schema.
func TestMaskMatchesBruteForce(t *testing.T) {
	toks, stops := toyVocab()
	v := NewVocab(toks, stops)
	r := rand.New(rand.NewPCG(5, 6))
	for _, sc := range loadCases(t) {
		g, err := CompileSchema(sc.Schema)
		if err != nil {
			t.Fatal(err)
		}
		c := NewConstraint(g, v)
		for range 10 {
			text, _ := walk(g, r)
			st := g.Start()
			for i := 0; i <= len(text); i++ {
				m := c.Allowed(st, 0)
				for id, b := range toks {
					_, ok := g.Advance(st, b)
					want := ok && len(b) > 0
					if id == stops[0] {
						want = g.Complete(st)
					}
					if m.Allows(id) != want {
						t.Fatalf("%s after %q: token %d %q allowed %v, want %v", sc.Name, text[:i], id, b, m.Allows(id), want)
					}
				}
				if i < len(text) {
					st, _ = g.Advance(st, []byte{text[i]})
				}
			}
		}
	}
}

func qwen3Vocab(tb testing.TB) *Vocab {
	dir := filepath.Join("..", "..", "..", "shared", "data", "tokenizers", "qwen3")
	if _, err := os.Stat(dir); err != nil {
		tb.Skip("no Qwen3 tokenizer in ../shared/data/tokenizers/qwen3")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	toks := make([][]byte, tok.Vocab())
	for id := range toks {
		if sp, ok := tok.(interface{ IsAdded(int) bool }); ok && sp.IsAdded(id) {
			continue
		}
		toks[id] = tok.TokenBytes(id)
	}
	return NewVocab(toks, tok.EOS())
}

// BenchmarkMaskQwen3 is the cost of one mask on Qwen3's 151,936 tokens, uncached, in the
// states that cost most (inside a string, where most of the vocabulary may follow) and least
// (between members).
func BenchmarkMaskQwen3(b *testing.B) {
	v := qwen3Vocab(b)
	g, err := CompileSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"nick":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"]}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, prefix := range []string{`{"name":"Jo`, `{"name":"Jo",`, `{"nick":"Jo`, `{"name":"Jo","age":1`, ``} {
		st, ok := g.Advance(g.Start(), []byte(prefix))
		if !ok {
			b.Fatal(prefix)
		}
		b.Run(fmt.Sprintf("%q", prefix), func(b *testing.B) {
			c := NewConstraint(g, v)
			var n int
			for b.Loop() {
				n = c.mask(st).Count
			}
			b.ReportMetric(float64(n), "allowed")
		})
	}
}

// BenchmarkMaskQwen3Slow covers the states that walk most of the trie with the matcher: a
// string under a pattern (no precomputed plain set), property names that may be additional
// ones, and states with two alternatives alive.
func BenchmarkMaskQwen3Slow(b *testing.B) {
	v := qwen3Vocab(b)
	for _, c := range []struct{ name, schema, prefix string }{
		{"pattern", `{"type":"string","pattern":"^[a-z ]+$"}`, `"ab`},
		{"additional name", `{"type":"object"}`, `{"ab`},
		{"two objects", `{"anyOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"string"}}}]}`, `{"`},
		{"two strings", `{"anyOf":[{"type":"string"},{"type":"string","maxLength":5}]}`, `"a`},
	} {
		g, err := CompileSchema([]byte(c.schema))
		if err != nil {
			b.Fatal(err)
		}
		st, ok := g.Advance(g.Start(), []byte(c.prefix))
		if !ok {
			b.Fatal(c.prefix)
		}
		b.Run(c.name, func(b *testing.B) {
			cc := NewConstraint(g, v)
			var n int
			for b.Loop() {
				n = cc.mask(st).Count
			}
			b.ReportMetric(float64(n), "allowed")
		})
	}
}
