package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/server/reply"
)

// OllamaMetrics are the counters ollama puts on a final message. Durations are nanoseconds.
type OllamaMetrics struct {
	TotalDuration      int64      `json:"total_duration,omitempty"`
	LoadDuration       int64      `json:"load_duration,omitempty"`
	PromptEvalCount    int        `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64      `json:"prompt_eval_duration,omitempty"`
	EvalCount          int        `json:"eval_count,omitempty"`
	EvalDuration       int64      `json:"eval_duration,omitempty"`
	Speculation        *SpecStats `json:"speculation,omitempty"` // dflash's own field
}

// OllamaGenerateResponse is one line of /api/generate's answer.
type OllamaGenerateResponse struct {
	Model      string `json:"model"`
	CreatedAt  string `json:"created_at"`
	Response   string `json:"response"`
	Thinking   string `json:"thinking,omitempty"`
	Done       bool   `json:"done"`
	DoneReason string `json:"done_reason,omitempty"`
	// Context is, on the final object, the token ids of the prompt as the model saw it
	// (template applied) and of every token generated, as ollama sends it.
	Context []int `json:"context,omitempty"`
	// Logprobs are the log probabilities of the tokens this line adds (on the final line of a
	// stream: of those whose text never showed; without streaming: of all), when asked.
	Logprobs []OllamaLogprob `json:"logprobs,omitempty"`
	OllamaMetrics
}

// OllamaChatResponse is one line of /api/chat's answer.
type OllamaChatResponse struct {
	Model      string        `json:"model"`
	CreatedAt  string        `json:"created_at"`
	Message    OllamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason,omitempty"`
	// Logprobs as in OllamaGenerateResponse.
	Logprobs []OllamaLogprob `json:"logprobs,omitempty"`
	OllamaMetrics
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func ollamaMetrics(o *outcome) OllamaMetrics {
	return OllamaMetrics{
		TotalDuration:      int64(o.Total),
		LoadDuration:       int64(o.LoadDuration),
		PromptEvalCount:    o.Res.PromptTokens,
		PromptEvalDuration: int64(o.Res.PromptDuration),
		EvalCount:          o.Res.EvalTokens,
		EvalDuration:       int64(o.Res.EvalDuration),
		Speculation:        o.Res.Speculation,
	}
}

func writeOllamaError(w http.ResponseWriter, re *RequestError) {
	writeJSON(w, re.Status, map[string]string{"error": re.Msg})
}

// ndjson writes newline-delimited JSON, sending the header with the first line so that errors
// found before any output can still choose the status.
type ndjson struct {
	w       http.ResponseWriter
	started bool
	enc     *json.Encoder
}

func (n *ndjson) line(v any) error {
	if !n.started {
		n.started = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
		n.enc = json.NewEncoder(n.w)
	}
	if err := n.enc.Encode(v); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return http.NewResponseController(n.w).Flush()
}

// ollamaRun executes j and writes the parts and the final line built by the callbacks: streamed,
// one line per part (thinking pieces come first, as the model writes them; a tool call is a line
// of its own), else one object gathering them.
func (s *Server) ollamaRun(w http.ResponseWriter, r *http.Request, j *job,
	pieceMsg func(p reply.Part, calls int, lps []OllamaLogprob) any, finalMsg func(g *gathered, lps []OllamaLogprob, o *outcome) any) {
	nd := &ndjson{w: w}
	var g gathered
	calls := 0
	piece := func(p reply.Part, lps []tokenLogprob) error {
		if !j.Stream {
			g.add(p)
			return nil
		}
		line := pieceMsg(p, calls, ollamaLogprobs(lps))
		if p.Kind == reply.ToolCall {
			calls++
		}
		return nd.line(line)
	}
	o, err := s.execute(r, j, piece)
	if err != nil {
		re := s.prepareError(w, r, err)
		if nd.started {
			// Mid-stream: the status is sent, so the error travels as a line, as ollama does.
			_ = nd.line(map[string]string{"error": re.Msg})
			return
		}
		writeOllamaError(w, re)
		return
	}
	if !j.Stream {
		writeJSON(w, http.StatusOK, finalMsg(&g, ollamaLogprobs(o.Logprobs), o))
		return
	}
	_ = nd.line(finalMsg(&gathered{}, ollamaLogprobs(o.TailLogprobs), o))
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOllamaGenerate, writeOllamaError)
	if !ok {
		return
	}
	s.ollamaRun(w, r, j,
		func(p reply.Part, _ int, lps []OllamaLogprob) any {
			resp := OllamaGenerateResponse{Model: j.Model, CreatedAt: now(), Logprobs: lps}
			if p.Kind == reply.Thinking {
				resp.Thinking = p.Text
			} else {
				resp.Response = p.Text // generate offers no tools: no calls here
			}
			return resp
		},
		func(g *gathered, lps []OllamaLogprob, o *outcome) any {
			return OllamaGenerateResponse{Model: j.Model, CreatedAt: now(), Response: g.content.String(),
				Thinking: g.thinking.String(), Done: true,
				DoneReason: o.DoneReason, Context: o.Context, Logprobs: lps, OllamaMetrics: ollamaMetrics(o)}
		})
}

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOllamaChat, writeOllamaError)
	if !ok {
		return
	}
	s.ollamaRun(w, r, j,
		func(p reply.Part, calls int, lps []OllamaLogprob) any {
			msg := OllamaMessage{Role: "assistant"}
			switch p.Kind {
			case reply.Content:
				msg.Content = p.Text
			case reply.Thinking:
				msg.Thinking = p.Text
			case reply.ToolCall:
				msg.ToolCalls = []OllamaToolCall{ollamaCall(p.Call, calls)}
			}
			return OllamaChatResponse{Model: j.Model, CreatedAt: now(), Message: msg, Logprobs: lps}
		},
		func(g *gathered, lps []OllamaLogprob, o *outcome) any {
			msg := OllamaMessage{Role: "assistant", Content: g.content.String(), Thinking: g.thinking.String()}
			for i, c := range g.calls {
				msg.ToolCalls = append(msg.ToolCalls, ollamaCall(c, i))
			}
			return OllamaChatResponse{Model: j.Model, CreatedAt: now(), Message: msg, Done: true,
				DoneReason: o.DoneReason, Logprobs: lps, OllamaMetrics: ollamaMetrics(o)}
		})
}

// OllamaDetails is the "details" object of /api/tags, /api/show and /api/ps.
type OllamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
	Draft             string   `json:"draft,omitempty"` // dflash: the speculation draft
}

// OllamaModel is one entry of /api/tags.
type OllamaModel struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt time.Time     `json:"modified_at"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    OllamaDetails `json:"details"`
	// Error says why the model is unavailable (dflash's field; see ModelInfo.Error).
	Error string `json:"error,omitempty"`
}

// unavailableMsg is what clients are told of a model listed as unavailable: its error without
// the server's paths.
func unavailableMsg(mi ModelInfo) string { return redactPaths(mi.Error) }

func details(mi ModelInfo) OllamaDetails {
	d := OllamaDetails{Format: mi.Format, Family: mi.Family, ParameterSize: mi.ParameterSize,
		QuantizationLevel: mi.Quantization, Draft: mi.Draft}
	if mi.Family != "" {
		d.Families = []string{mi.Family}
	}
	return d
}

func (s *Server) handleTags(w http.ResponseWriter, r *http.Request) {
	s.scanStores()
	models := []OllamaModel{}
	for _, mi := range s.b.Models() {
		models = append(models, OllamaModel{Name: mi.Name, Model: mi.Name, ModifiedAt: mi.ModifiedAt,
			Size: mi.Size, Digest: mi.Digest, Details: details(mi), Error: unavailableMsg(mi)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// OllamaShowResponse is the answer of /api/show.
type OllamaShowResponse struct {
	Modelfile    string         `json:"modelfile"`
	Parameters   string         `json:"parameters"`
	Template     string         `json:"template"`
	System       string         `json:"system,omitempty"`
	Details      OllamaDetails  `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   time.Time      `json:"modified_at"`
	Error        string         `json:"error,omitempty"` // dflash: why the model is unavailable
}

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(r)
	var req struct {
		Model   string `json:"model"`
		Name    string `json:"name"` // older clients
		Verbose bool   `json:"verbose"`
	}
	if rerr == nil {
		rerr = decodeJSON(body, &req)
	}
	if rerr == nil && req.Model == "" && req.Name == "" {
		rerr = badField("model", "model is required")
	}
	if rerr != nil {
		info(r).err = rerr.Msg
		writeOllamaError(w, rerr)
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	info(r).model = name
	mi, ok := lookup(s.b, name)
	if !ok {
		re := &RequestError{Status: http.StatusNotFound, Msg: fmt.Sprintf("model %q not found", name)}
		info(r).err = re.Msg
		writeOllamaError(w, re)
		return
	}
	mInfo := map[string]any{"general.architecture": mi.Family, "general.name": mi.Name}
	// As ollama shows them: model_info holds what the model supports, and the parameters its
	// num_ctx, the context generations get (less when --ctx caps it).
	var params string
	if mi.ContextLength > 0 {
		if mi.Family != "" {
			mInfo[mi.Family+".context_length"] = max(mi.ModelContext, mi.ContextLength)
		}
		params = fmt.Sprintf("%-30s %d", "num_ctx", mi.ContextLength)
	}
	if mi.Draft != "" {
		mInfo["dflash.draft"] = mi.Draft
	}
	params += defaultParams(mi.Options, params != "")
	writeJSON(w, http.StatusOK, OllamaShowResponse{
		Modelfile:    fmt.Sprintf("# dflash serves %s from its configured weights; there is no Modelfile.\n", mi.Name),
		Parameters:   params,
		Template:     mi.Template,
		System:       mi.System,
		Details:      details(mi),
		ModelInfo:    mInfo,
		Capabilities: capabilityList(mi),
		ModifiedAt:   mi.ModifiedAt,
		Error:        unavailableMsg(mi),
	})
}

// defaultParams lists a model's default options (ModelInfo.Options) as /api/show's parameters text
// does: one "name value" line each, sorted by name, strings quoted, a list one line per element.
// num_ctx is left out when served is set: the line before it already says the served context.
func defaultParams(options string, served bool) string {
	var opts map[string]any
	if options == "" || json.Unmarshal([]byte(options), &opts) != nil {
		return ""
	}
	var b strings.Builder
	line := func(k string, v any) {
		if b.Len() > 0 || served {
			b.WriteByte('\n')
		}
		if s, ok := v.(string); ok {
			v = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "%-30s %v", k, v)
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k == "num_ctx" && served {
			continue
		}
		if list, ok := opts[k].([]any); ok {
			for _, v := range list {
				line(k, v)
			}
			continue
		}
		line(k, opts[k])
	}
	return b.String()
}

// OllamaRunning is one entry of /api/ps.
type OllamaRunning struct {
	Name      string        `json:"name"`
	Model     string        `json:"model"`
	Size      int64         `json:"size"`
	Digest    string        `json:"digest"`
	Details   OllamaDetails `json:"details"`
	ExpiresAt time.Time     `json:"expires_at"`
	SizeVRAM  int64         `json:"size_vram"`
	// ContextLength is the positions one generation may use (`ollama ps` shows it).
	ContextLength int  `json:"context_length"`
	InUse         bool `json:"in_use"` // dflash: a generation holds it now
}

func (s *Server) handlePS(w http.ResponseWriter, r *http.Request) {
	models := []OllamaRunning{}
	for _, lm := range s.mgr.loaded() {
		exp := lm.Expires
		switch {
		case lm.Forever:
			// ollama shows a far-future expiry for models kept forever.
			exp = time.Now().AddDate(100, 0, 0)
		case exp.IsZero():
			exp = time.Now() // unloads as soon as its generation ends
		}
		models = append(models, OllamaRunning{Name: lm.Info.Name, Model: lm.Info.Name, Size: lm.Info.Size,
			Digest: lm.Info.Digest, Details: details(lm.Info), ExpiresAt: exp.UTC(),
			ContextLength: lm.Info.ContextLength, InUse: lm.InUse})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// OllamaVersion is the ollama release whose API dflash implements, and what /api/version
// reports as "version": clients gate features on it (and `ollama -v` compares it with its own),
// so it must be a release number they know, not dflash's. dflash answers that release's
// /api/generate, /api/chat (with tools and thinking), /api/tags, /api/show, /api/ps and
// /api/version in its JSON shapes, as its Go client package (github.com/ollama/ollama/api at this
// version) decodes them; what it does not implement (images, structured output, push/create) is
// refused with a 400 naming the field, or a 404 for the endpoint.
const OllamaVersion = "0.24.0"

// handleVersion reports OllamaVersion, and dflash's own version beside it.
func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": OllamaVersion, "dflash_version": s.cfg.Version})
}

// ollamaCall is a parsed call in ollama's shape, index its place among the reply's calls.
func ollamaCall(c *reply.Call, index int) OllamaToolCall {
	return OllamaToolCall{ID: callID(), Function: OllamaToolFunction{Index: index, Name: c.Name, Arguments: c.Arguments}}
}
