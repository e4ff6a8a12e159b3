package server_test

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

func l2(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func near(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i])-float64(b[i])) > tol {
			return false
		}
	}
	return true
}

type embedResp struct {
	Embeddings      [][]float32 `json:"embeddings"`
	PromptEvalCount int         `json:"prompt_eval_count"`
}

func embedOK(t *testing.T, url, body string) embedResp {
	t.Helper()
	r := post(t, url+"/api/embed", body)
	if r.status != 200 {
		t.Fatalf("/api/embed %s: %d %s", body, r.status, r.body)
	}
	return decode[embedResp](t, r.body)
}

// TestOllamaEmbed: /api/embed gives unit vectors of the model's width, a batch's vectors are
// exactly its inputs' sent alone, dimensions keeps a renormalized prefix, an over-long input is
// cut to the context's first tokens (or refused with "truncate": false), an empty input only
// loads; /api/embeddings gives the same direction, not normalized.
func TestOllamaEmbed(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		a := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":"Once upon a time"}`, bc.model))
		if len(a.Embeddings) != 1 || len(a.Embeddings[0]) < 4 || math.Abs(l2(a.Embeddings[0])-1) > 1e-5 || a.PromptEvalCount < 1 {
			t.Fatalf("one input: %d vectors, norm %v, %d tokens", len(a.Embeddings), l2(a.Embeddings[0]), a.PromptEvalCount)
		}
		if bc.words != nil && len(a.Embeddings[0]) != fake.EmbeddingDims {
			t.Errorf("fake embedding of %d values, want %d", len(a.Embeddings[0]), fake.EmbeddingDims)
		}
		b := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":"there was a cat"}`, bc.model))
		both := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":["Once upon a time","there was a cat"]}`, bc.model))
		if len(both.Embeddings) != 2 || !slices.Equal(both.Embeddings[0], a.Embeddings[0]) || !slices.Equal(both.Embeddings[1], b.Embeddings[0]) {
			t.Errorf("batch differs from its inputs alone")
		}
		if both.PromptEvalCount != a.PromptEvalCount+b.PromptEvalCount {
			t.Errorf("batch counts %d tokens, inputs alone %d + %d", both.PromptEvalCount, a.PromptEvalCount, b.PromptEvalCount)
		}
		if slices.Equal(a.Embeddings[0], b.Embeddings[0]) {
			t.Errorf("two texts have the same embedding")
		}

		d := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":"Once upon a time","dimensions":3}`, bc.model))
		want := slices.Clone(a.Embeddings[0][:3])
		for i := range want {
			want[i] /= float32(l2(a.Embeddings[0][:3]))
		}
		if len(d.Embeddings[0]) != 3 || !near(d.Embeddings[0], want, 1e-6) {
			t.Errorf("dimensions 3: %v, want the renormalized prefix %v", d.Embeddings[0], want)
		}

		long := strings.Repeat("once upon a time ", 400) // more tokens than either backend's context
		cut := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":%q}`, bc.model, long))
		if len(cut.Embeddings) != 1 || math.Abs(l2(cut.Embeddings[0])-1) > 1e-5 {
			t.Fatalf("truncated input: %+v", cut)
		}
		if bc.words != nil {
			// The fake's context is 64 tokens: BOS and the first 63 words.
			head := strings.Join(strings.Fields(long)[:63], " ")
			if cut.PromptEvalCount != 64 || !slices.Equal(cut.Embeddings[0], embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":%q}`, bc.model, head)).Embeddings[0]) {
				t.Errorf("truncation kept %d tokens, or not the first ones", cut.PromptEvalCount)
			}
		}
		// options.num_ctx narrows the context inputs are cut to.
		if n := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":%q,"options":{"num_ctx":16}}`, bc.model, long)); n.PromptEvalCount != 16 {
			t.Errorf("num_ctx 16 kept %d tokens", n.PromptEvalCount)
		}
		r := post(t, url+"/api/embed", fmt.Sprintf(`{"model":%q,"input":%q,"truncate":false}`, bc.model, long))
		if r.status != 400 || !strings.Contains(string(r.body), "context") {
			t.Errorf("over-long input with truncate false: %d %s", r.status, r.body)
		}

		if e := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":""}`, bc.model)); e.Embeddings == nil || len(e.Embeddings) != 0 {
			t.Errorf(`empty input: %+v, want "embeddings": []`, e)
		}
		for _, bad := range []string{`[""]`, `5`, `["a",3]`} {
			r := post(t, url+"/api/embed", fmt.Sprintf(`{"model":%q,"input":%s}`, bc.model, bad))
			if r.status != 400 || !strings.Contains(string(r.body), "input") {
				t.Errorf("input %s: %d %s, want 400 naming input", bad, r.status, r.body)
			}
		}
		if r := post(t, url+"/api/embed", `{"model":"no-such","input":"x"}`); r.status != 404 {
			t.Errorf("unknown model: %d %s", r.status, r.body)
		}

		// The older endpoint: one vector, the model's own (not normalized), same direction.
		r = post(t, url+"/api/embeddings", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time"}`, bc.model))
		old := decode[struct{ Embedding []float64 }](t, r.body)
		raw := make([]float32, len(old.Embedding))
		for i, v := range old.Embedding {
			raw[i] = float32(v)
		}
		if r.status != 200 || len(raw) != len(a.Embeddings[0]) || math.Abs(l2(raw)-1) < 1e-3 {
			t.Fatalf("/api/embeddings: %d, %d values of norm %v (want not normalized)", r.status, len(raw), l2(raw))
		}
		unit := slices.Clone(raw)
		for i := range unit {
			unit[i] = float32(float64(unit[i]) / l2(raw))
		}
		if !near(unit, a.Embeddings[0], 1e-6) {
			t.Errorf("/api/embeddings direction %v, /api/embed %v", unit, a.Embeddings[0])
		}
		if bc.words != nil {
			// The fake's mean of its token vectors: BOS (1) and "Once upon a time" (ids 6 6 3 6).
			var mean [fake.EmbeddingDims]float64
			for _, id := range []int{1, 6, 6, 3, 6} {
				for j, v := range fake.TokenVector(id) {
					mean[j] += float64(v) / 5
				}
			}
			for j := range mean {
				if math.Abs(old.Embedding[j]-mean[j]) > 1e-6 {
					t.Fatalf("/api/embeddings %v, want the token mean %v", old.Embedding, mean)
				}
			}
		}
	})
}

// TestOpenAIEmbeddings: /v1/embeddings takes a string, strings, token ids or lists of them;
// vectors are unit length and equal /api/embed's for the same text; base64 is the little-endian
// float32 bytes of the float answer; usage counts the tokens; bad input is a 400 naming it.
func TestOpenAIEmbeddings(t *testing.T) {
	eachBackend(t, func(t *testing.T, bc backendCase, url string) {
		type resp struct {
			Object string `json:"object"`
			Data   []struct {
				Object    string    `json:"object"`
				Embedding []float32 `json:"embedding"`
				Index     int       `json:"index"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				TotalTokens  int `json:"total_tokens"`
			} `json:"usage"`
		}
		ok := func(input string) resp {
			t.Helper()
			r := post(t, url+"/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":%s}`, bc.model, input))
			if r.status != 200 {
				t.Fatalf("input %s: %d %s", input, r.status, r.body)
			}
			return decode[resp](t, r.body)
		}
		one := ok(`"Once upon a time"`)
		ref := embedOK(t, url, fmt.Sprintf(`{"model":%q,"input":"Once upon a time"}`, bc.model))
		if one.Object != "list" || len(one.Data) != 1 || one.Data[0].Object != "embedding" || !slices.Equal(one.Data[0].Embedding, ref.Embeddings[0]) {
			t.Fatalf("one string: %+v, want /api/embed's vector", one)
		}
		if one.Usage.PromptTokens != ref.PromptEvalCount || one.Usage.TotalTokens != one.Usage.PromptTokens {
			t.Errorf("usage %+v, want %d tokens", one.Usage, ref.PromptEvalCount)
		}
		many := ok(`["Once upon a time","there was a cat"]`)
		if len(many.Data) != 2 || many.Data[1].Index != 1 || !slices.Equal(many.Data[0].Embedding, one.Data[0].Embedding) {
			t.Errorf("two strings: %+v", many)
		}
		ids := ok(`[1, 5, 6]`)
		lists := ok(`[[1, 5, 6], [1, 4]]`)
		if len(ids.Data) != 1 || len(lists.Data) != 2 || !slices.Equal(ids.Data[0].Embedding, lists.Data[0].Embedding) || ids.Usage.PromptTokens != 3 || lists.Usage.PromptTokens != 5 {
			t.Errorf("token ids: %+v / %+v", ids, lists)
		}
		if math.Abs(l2(ids.Data[0].Embedding)-1) > 1e-5 {
			t.Errorf("token-id embedding norm %v", l2(ids.Data[0].Embedding))
		}

		short := ok(`"Once upon a time","dimensions":3`)
		if v := short.Data[0].Embedding; len(v) != 3 || math.Abs(l2(v)-1) > 1e-5 {
			t.Errorf("dimensions 3: %v", v)
		}
		r := post(t, url+"/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":"Once upon a time","encoding_format":"base64"}`, bc.model))
		b64 := decode[struct {
			Data []struct{ Embedding string } `json:"data"`
		}](t, r.body)
		raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
		if err != nil || len(raw) != 4*len(one.Data[0].Embedding) {
			t.Fatalf("base64: %v, %d bytes", err, len(raw))
		}
		for i, v := range one.Data[0].Embedding {
			if math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])) != v {
				t.Fatalf("base64 value %d differs from the float answer", i)
			}
		}

		long := strings.Repeat("once upon a time ", 400)
		for _, c := range []struct{ body, param string }{
			{fmt.Sprintf(`{"model":%q,"input":""}`, bc.model), "input"},
			{fmt.Sprintf(`{"model":%q,"input":[]}`, bc.model), "input"},
			{fmt.Sprintf(`{"model":%q,"input":[[1],[]]}`, bc.model), "input[1]"},
			{fmt.Sprintf(`{"model":%q}`, bc.model), "input"},
			{fmt.Sprintf(`{"model":%q,"input":[1, 99999999]}`, bc.model), "input"},
			{fmt.Sprintf(`{"model":%q,"input":"x","encoding_format":"hex"}`, bc.model), "encoding_format"},
			{fmt.Sprintf(`{"model":%q,"input":"x","dimensions":0}`, bc.model), "dimensions"},
			{fmt.Sprintf(`{"model":%q,"input":%q}`, bc.model, long), "input[0]"},
		} {
			r := post(t, url+"/v1/embeddings", c.body)
			if r.status != 400 || !strings.Contains(string(r.body), fmt.Sprintf(`"param":%q`, c.param)) {
				t.Errorf("%.80s: %d %s, want 400 with param %s", c.body, r.status, r.body, c.param)
			}
		}
	})
}

// TestEmbedSuffix: a model whose tokenizer ends embedded texts with a special token (the fake
// told so) gets it after every input, counted in the usage, kept last through truncation, and not
// doubled on token ids that end with it already.
func TestEmbedSuffix(t *testing.T) {
	const eot = 999
	_, url := startServer(t, server.Config{}, &fake.Backend{EmbedSuffix: []int{eot}})
	mean := func(ids ...int) []float32 {
		v := make([]float32, fake.EmbeddingDims)
		for _, id := range ids {
			for j, x := range fake.TokenVector(id) {
				v[j] += x / float32(len(ids))
			}
		}
		n := float32(l2(v))
		for j := range v {
			v[j] /= n
		}
		return v
	}
	// "Once upon" is BOS (1), 6, 6 and then the suffix.
	e := embedOK(t, url, `{"model":"fake:latest","input":"Once upon"}`)
	if e.PromptEvalCount != 4 || !near(e.Embeddings[0], mean(1, 6, 6, eot), 1e-6) {
		t.Errorf("with the suffix: %d tokens, %v; want 4 and the mean of 1 6 6 %d", e.PromptEvalCount, e.Embeddings[0], eot)
	}
	r := post(t, url+"/v1/embeddings", fmt.Sprintf(`{"model":"fake:latest","input":[[1,6,6,%d]]}`, eot))
	if u := decode[struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}](t, r.body); r.status != 200 || u.Usage.PromptTokens != 4 {
		t.Errorf("token ids ending with the suffix: %d %s, want 4 tokens (not doubled)", r.status, r.body)
	}
	// 100 words: the context of 64 keeps BOS, 62 words and the suffix.
	long := strings.Repeat("ab ", 100)
	ids := []int{1}
	for range 62 {
		ids = append(ids, 4)
	}
	e = embedOK(t, url, fmt.Sprintf(`{"model":"fake:latest","input":%q}`, long))
	if e.PromptEvalCount != 64 || !near(e.Embeddings[0], mean(append(ids, eot)...), 1e-6) {
		t.Errorf("truncated with the suffix: %d tokens, %v", e.PromptEvalCount, e.Embeddings[0])
	}
}
