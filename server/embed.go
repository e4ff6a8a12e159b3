package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"
)

// Embedder is a Model that embeds text: the pooled final hidden state of tokens (server/backend:
// runner.Embed with the model's pooling), not normalized (the server normalizes as each API
// says). A Model without it answers embedding requests with 400. Like Generate it may be called
// concurrently and must cope; it checks ctx between forwards. An error that is the input's fault
// is a *RequestError.
type Embedder interface {
	Embed(ctx context.Context, tokens []int) ([]float32, error)
	// EmbedSuffix is what the model's tokenizer appends to a text it embeds (tokenizer.BPE's
	// Suffix: Qwen3-Embedding's end-of-text, where its last-token pooling reads), nil for most.
	// The server appends it to every input (unless it ends so already) and keeps it through
	// truncation.
	EmbedSuffix() []int
}

// embedJob is a validated embedding request, API-neutral. Inputs are texts to tokenize, or token
// ids (OpenAI's array inputs) when IDs is set.
type embedJob struct {
	Model     string
	KeepAlive *time.Duration
	Texts     []string
	IDs       [][]int
	// Truncate cuts an input longer than the context to its first tokens (ollama's /api/embed
	// unless "truncate": false); otherwise it is refused (400).
	Truncate   bool
	NumCtx     int  // > 0: ollama's options.num_ctx, a context below the model's
	Dimensions int  // > 0: keep the first Dimensions values, renormalized
	Normalize  bool // scale to unit L2 norm (/api/embed, /v1/embeddings; not /api/embeddings)
	Param      string
}

func (j *embedJob) inputs() int { return len(j.Texts) + len(j.IDs) }

// embedOutcome is what an embedding request computed.
type embedOutcome struct {
	Model        string
	Embeddings   [][]float32
	PromptTokens int
	LoadDuration time.Duration
	Total        time.Duration
}

// embed runs j: a slot, a lease of the model, then each input tokenized, checked against the
// context, embedded and normalized in order. Inputs are independent (each on a cache of its own),
// so a batch's vectors are those of its inputs sent one by one.
func (s *Server) embed(r *http.Request, j *embedJob) (*embedOutcome, error) {
	start := time.Now()
	ri := info(r)
	ri.model = j.Model
	mi, rerr := servable(s.b, j.Model)
	if rerr != nil {
		return nil, rerr
	}
	ctx, l, end, err := s.leaseModel(r, mi, j.KeepAlive)
	if err != nil {
		return nil, err
	}
	defer end()
	out := &embedOutcome{Model: mi.Name, Embeddings: [][]float32{}, LoadDuration: l.LoadTook}
	if j.inputs() == 0 {
		out.Total = time.Since(start)
		return out, nil // nothing to embed: the request only loads the model, as ollama's does
	}
	m := l.Model
	em, ok := m.(Embedder)
	if !ok {
		return nil, &RequestError{Status: http.StatusBadRequest, Param: "model",
			Msg: fmt.Sprintf("model %q does not support embeddings", mi.Name)}
	}
	ctxLen, _ := contextOf(m.ContextLength(), m.Info().ModelContext, j.NumCtx)
	suffix := em.EmbedSuffix()
	for i := range j.inputs() {
		param := fmt.Sprintf("%s[%d]", j.Param, i)
		var ids []int
		if j.IDs != nil {
			ids = j.IDs[i]
		} else {
			text := j.Texts[i]
			if pb, ok := m.(promptBounder); ok && !j.Truncate {
				if n := pb.MinPromptTokens(text); n > ctxLen {
					return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
						Msg: fmt.Sprintf("input is at least %d tokens but the context is %d", n, ctxLen)}
				}
			}
			if ids, err = m.Tokenize(text); err != nil {
				return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf("tokenize %s: %v", param, err)}
			}
		}
		if len(suffix) > 0 && !slices.Equal(ids[max(0, len(ids)-len(suffix)):], suffix) {
			ids = append(ids[:len(ids):len(ids)], suffix...)
		}
		if len(ids) > ctxLen {
			if !j.Truncate || ctxLen <= len(suffix) {
				return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
					Msg: fmt.Sprintf("input is %d tokens but the context is %d", len(ids), ctxLen)}
			}
			// ollama keeps the input's first tokens: an embedding is of the text's start. The
			// suffix stays last, where the model reads it.
			s.log.Warn("truncating embedding input", "path", r.URL.Path, "model", mi.Name, "limit", ctxLen, "input", len(ids))
			keep := ctxLen - len(suffix)
			ids = append(ids[:keep:keep], suffix...)
		}
		v, err := em.Embed(ctx, ids)
		if err != nil {
			return nil, err
		}
		if j.Normalize {
			if err := normalize(v); err != nil {
				return nil, fmt.Errorf("embed %s: %w", param, err)
			}
		}
		if j.Dimensions > 0 && j.Dimensions < len(v) {
			v = v[:j.Dimensions]
			if j.Normalize {
				if err := normalize(v); err != nil {
					return nil, fmt.Errorf("embed %s: %w", param, err)
				}
			}
		}
		out.Embeddings = append(out.Embeddings, v)
		out.PromptTokens += len(ids)
	}
	ri.promptTokens = out.PromptTokens
	s.met.promptTokens.WithLabelValues(mi.Name).Add(float64(out.PromptTokens))
	out.Total = time.Since(start)
	return out, nil
}

// normalize scales v to unit L2 norm (a zero vector stays zero), as ollama's /api/embed does.
func normalize(v []float32) error {
	var sum float64
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return errors.New("embedding contains NaN or Inf values")
		}
		sum += float64(x) * float64(x)
	}
	scale := 1 / max(math.Sqrt(sum), 1e-12)
	for i := range v {
		v[i] = float32(float64(v[i]) * scale)
	}
	return nil
}

// --- ollama ---

// OllamaEmbedRequest is the body of POST /api/embed.
type OllamaEmbedRequest struct {
	Model      string                     `json:"model"`
	Input      json.RawMessage            `json:"input"`
	Truncate   *bool                      `json:"truncate"`
	Dimensions int                        `json:"dimensions"`
	KeepAlive  json.RawMessage            `json:"keep_alive"`
	Options    map[string]json.RawMessage `json:"options"`
}

// OllamaEmbedResponse is the answer of /api/embed.
type OllamaEmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   int64       `json:"total_duration,omitempty"`
	LoadDuration    int64       `json:"load_duration,omitempty"`
	PromptEvalCount int         `json:"prompt_eval_count,omitempty"`
}

// OllamaEmbeddingsRequest is the body of the older POST /api/embeddings.
type OllamaEmbeddingsRequest struct {
	Model     string                     `json:"model"`
	Prompt    string                     `json:"prompt"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
	Options   map[string]json.RawMessage `json:"options"`
}

func keepAlive(raw json.RawMessage) (*time.Duration, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	d, err := parseKeepAlive(raw)
	if err != nil {
		return nil, badField("keep_alive", "%v", err)
	}
	return &d, nil
}

// parseOllamaEmbed decodes and validates a /api/embed body: input is a string or a list of
// strings ("" or [] only loads the model, as ollama's does; an empty string in a list is refused).
func parseOllamaEmbed(body []byte) (*embedJob, *RequestError) {
	var r OllamaEmbedRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, badField("model", "model is required")
	}
	if r.Dimensions < 0 {
		return nil, badField("dimensions", "%d is negative", r.Dimensions)
	}
	j := &embedJob{Model: r.Model, Truncate: r.Truncate == nil || *r.Truncate, Dimensions: r.Dimensions, Normalize: true, Param: "input"}
	var err *RequestError
	if j.KeepAlive, err = keepAlive(r.KeepAlive); err != nil {
		return nil, err
	}
	// Options are checked as for a generation; of them only num_ctx applies (the context an
	// input is truncated to), as in ollama.
	o, err := parseOllamaOptions(r.Options)
	if err != nil {
		return nil, err
	}
	j.NumCtx = o.NumCtx
	if !present(r.Input) {
		return j, nil
	}
	var one string
	if json.Unmarshal(r.Input, &one) == nil {
		if one != "" {
			j.Texts = []string{one}
		}
		return j, nil
	}
	if json.Unmarshal(r.Input, &j.Texts) != nil {
		return nil, badField("input", "expected a string or a list of strings, got %s", clip(r.Input))
	}
	for i, t := range j.Texts {
		if t == "" {
			return nil, badField(fmt.Sprintf("input[%d]", i), "empty string")
		}
	}
	return j, nil
}

func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOllamaEmbed, writeOllamaError)
	if !ok {
		return
	}
	o, err := s.embed(r, j)
	if err != nil {
		writeOllamaError(w, s.prepareError(w, r, err))
		return
	}
	writeJSON(w, http.StatusOK, OllamaEmbedResponse{Model: j.Model, Embeddings: o.Embeddings,
		TotalDuration: int64(o.Total), LoadDuration: int64(o.LoadDuration), PromptEvalCount: o.PromptTokens})
}

// handleOllamaEmbeddings answers the older /api/embeddings: one prompt, one vector as float64s,
// not normalized (ollama returns the model's vector as is here), truncated to the context as
// ollama's runner does; an empty prompt only loads the model and answers an empty embedding.
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, func(body []byte) (*embedJob, *RequestError) {
		var req OllamaEmbeddingsRequest
		if err := decodeJSON(body, &req); err != nil {
			return nil, err
		}
		if req.Model == "" {
			return nil, badField("model", "model is required")
		}
		j := &embedJob{Model: req.Model, Truncate: true, Param: "prompt"}
		var err *RequestError
		if j.KeepAlive, err = keepAlive(req.KeepAlive); err != nil {
			return nil, err
		}
		if req.Prompt != "" {
			j.Texts = []string{req.Prompt}
		}
		return j, nil
	}, writeOllamaError)
	if !ok {
		return
	}
	o, err := s.embed(r, j)
	if err != nil {
		writeOllamaError(w, s.prepareError(w, r, err))
		return
	}
	e := []float64{}
	if len(o.Embeddings) == 1 {
		for _, v := range o.Embeddings[0] {
			e = append(e, float64(v))
		}
	}
	writeJSON(w, http.StatusOK, map[string][]float64{"embedding": e})
}

// --- OpenAI ---

// OpenAIEmbeddingRequest is the body of POST /v1/embeddings.
type OpenAIEmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// OpenAIEmbedding is one entry of /v1/embeddings' data: Embedding is a list of floats, or with
// encoding_format "base64" a string of the little-endian float32 bytes.
type OpenAIEmbedding struct {
	Object    string `json:"object"`
	Embedding any    `json:"embedding"`
	Index     int    `json:"index"`
}

// OpenAIEmbeddingResponse is the answer of /v1/embeddings.
type OpenAIEmbeddingResponse struct {
	Object string            `json:"object"`
	Data   []OpenAIEmbedding `json:"data"`
	Model  string            `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// openAIEmbedJob is an embedJob and the encoding its answer uses.
type openAIEmbedJob struct {
	*embedJob
	base64 bool
}

// parseOpenAIEmbedding decodes and validates a /v1/embeddings body. input is a string, a list of
// strings, a list of token ids or a list of lists of token ids, none of them empty (OpenAI's
// rules); an input longer than the context is refused, as OpenAI refuses it.
func parseOpenAIEmbedding(body []byte) (*openAIEmbedJob, *RequestError) {
	var r OpenAIEmbeddingRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, badField("model", "model is required")
	}
	j := &openAIEmbedJob{embedJob: &embedJob{Model: r.Model, Normalize: true, Param: "input"}}
	switch r.EncodingFormat {
	case "", "float":
	case "base64":
		j.base64 = true
	default:
		return nil, badField("encoding_format", "%q is neither \"float\" nor \"base64\"", r.EncodingFormat)
	}
	if r.Dimensions != nil {
		if *r.Dimensions < 1 {
			return nil, badField("dimensions", "%d must be at least 1", *r.Dimensions)
		}
		j.Dimensions = *r.Dimensions
	}
	if !present(r.Input) {
		return nil, badField("input", "input is required")
	}
	// Each shape is tried into a fresh value: a failed Unmarshal may leave a partial one.
	var texts []string
	var lists [][]int
	in := bytes.TrimSpace(r.Input)
	var one string
	var many []string
	var ids []int
	var idLists [][]int
	switch {
	case json.Unmarshal(in, &one) == nil:
		if one == "" {
			return nil, badField("input", "empty string")
		}
		texts = []string{one}
	case json.Unmarshal(in, &many) == nil:
		texts = many
	case json.Unmarshal(in, &ids) == nil:
		lists = [][]int{ids}
	case json.Unmarshal(in, &idLists) == nil:
		lists = idLists
	default:
		return nil, badField("input", "expected a string, a list of strings, a list of token ids or a list of lists of them, got %s", clip(r.Input))
	}
	if len(texts) == 0 && len(lists) == 0 {
		return nil, badField("input", "must not be empty")
	}
	for i, t := range texts {
		if t == "" {
			return nil, badField(fmt.Sprintf("input[%d]", i), "empty string")
		}
	}
	for i, l := range lists {
		if len(l) == 0 {
			return nil, badField(fmt.Sprintf("input[%d]", i), "empty list of token ids")
		}
		for k, id := range l {
			if id < 0 {
				return nil, badField(fmt.Sprintf("input[%d][%d]", i, k), "token id %d is negative", id)
			}
		}
	}
	j.Texts, j.IDs = texts, lists
	return j, nil
}

func (s *Server) handleOpenAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOpenAIEmbedding, writeOpenAIError)
	if !ok {
		return
	}
	o, err := s.embed(r, j.embedJob)
	if err != nil {
		writeOpenAIError(w, s.prepareError(w, r, err))
		return
	}
	resp := OpenAIEmbeddingResponse{Object: "list", Data: []OpenAIEmbedding{}, Model: j.Model}
	for i, v := range o.Embeddings {
		var e any = v
		if j.base64 {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data = append(resp.Data, OpenAIEmbedding{Object: "embedding", Embedding: e, Index: i})
	}
	resp.Usage.PromptTokens, resp.Usage.TotalTokens = o.PromptTokens, o.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}
