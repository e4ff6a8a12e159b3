package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/dflash/dflash/server/reply"
)

// OpenAIError is the body of every OpenAI-API error.
type OpenAIError struct {
	Error OpenAIErrorBody `json:"error"`
}

// OpenAIErrorBody is OpenAI's error object; Param and Code are null when empty.
type OpenAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func openAIErrorBody(re *RequestError) OpenAIError {
	typ := "invalid_request_error"
	switch {
	case re.Status == http.StatusServiceUnavailable:
		typ = "server_error"
	case re.Status >= 500:
		typ = "server_error"
	case re.Status == http.StatusNotFound && re.Param == "":
		typ = "not_found_error"
	}
	b := OpenAIErrorBody{Message: re.Msg, Type: typ}
	if re.Param != "" {
		p := re.Param
		b.Param = &p
	}
	if re.Code != "" {
		c := re.Code
		b.Code = &c
	}
	return OpenAIError{Error: b}
}

func writeOpenAIError(w http.ResponseWriter, re *RequestError) {
	writeJSON(w, re.Status, openAIErrorBody(re))
}

// OpenAIUsage is the usage object.
type OpenAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// OpenAIChatMessage is a response message or stream delta.
type OpenAIChatMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// ReasoningContent is the thinking split from the answer, as DeepSeek's and vLLM's APIs
	// send it.
	ReasoningContent *string          `json:"reasoning_content,omitempty"`
	ToolCalls        []OpenAIToolCall `json:"tool_calls,omitempty"`
}

// OpenAIChatChoice is one choice of a chat completion or chunk.
type OpenAIChatChoice struct {
	Index        int                 `json:"index"`
	Message      *OpenAIChatMessage  `json:"message,omitempty"`
	Delta        *OpenAIChatMessage  `json:"delta,omitempty"`
	Logprobs     *OpenAIChatLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// OpenAICompletionChoice is one choice of a text completion or chunk.
type OpenAICompletionChoice struct {
	Index        int                       `json:"index"`
	Text         string                    `json:"text"`
	Logprobs     *OpenAICompletionLogprobs `json:"logprobs"`
	FinishReason *string                   `json:"finish_reason"`
}

// OpenAIResponse is a chat completion, text completion or chunk of either. Usage is a
// pointer so that chunks can carry "usage": null when include_usage asks for it.
type OpenAIResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           any          `json:"choices"`
	Usage             *OpenAIUsage `json:"usage,omitempty"`
	Speculation       *SpecStats   `json:"speculation,omitempty"` // dflash's own field
}

// chunkWithNullUsage marshals a chunk with "usage": null, as OpenAI does when include_usage
// is set.
type chunkWithNullUsage struct {
	OpenAIResponse
	Usage *OpenAIUsage `json:"usage"`
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func usage(o *outcome) *OpenAIUsage {
	return &OpenAIUsage{PromptTokens: o.Res.PromptTokens, CompletionTokens: o.Res.EvalTokens,
		TotalTokens: o.Res.PromptTokens + o.Res.EvalTokens}
}

// sse writes server-sent events, sending the header with the first event.
type sse struct {
	w       http.ResponseWriter
	started bool
}

func (s *sse) event(v any) error {
	var data []byte
	if b, ok := v.([]byte); ok {
		data = b
	} else {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		s.w.WriteHeader(http.StatusOK)
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return http.NewResponseController(s.w).Flush()
}

// openAIRun executes j with OpenAI framing. chunks builds the streamed chunks of a reply part
// and the log probabilities of the tokens that released it (first marks the first part, calls
// counts the tool calls before it), which j.wrap frames; final builds the last chunk (stream:
// with the log probabilities of tokens whose text never showed) or the whole response from the
// gathered parts (with all of them). Without logprobs asked lps is always nil.
func (s *Server) openAIRun(w http.ResponseWriter, r *http.Request, j *openAIJob, base OpenAIResponse,
	chunks func(p reply.Part, lps []tokenLogprob, first bool, calls int) []OpenAIResponse, final func(g *gathered, lps []tokenLogprob, o *outcome) OpenAIResponse) {
	ev := &sse{w: w}
	var g gathered
	first := true
	calls := 0
	piece := func(p reply.Part, lps []tokenLogprob) error {
		if !j.Stream {
			g.add(p)
			return nil
		}
		cs := chunks(p, lps, first, calls)
		first = false
		if p.Kind == reply.ToolCall {
			calls++
		}
		for _, c := range cs {
			if err := ev.event(j.wrap(c)); err != nil {
				return err
			}
		}
		return nil
	}
	o, err := s.execute(r, j.job, piece)
	if err != nil {
		re := s.prepareError(w, r, err)
		if ev.started {
			_ = ev.event(openAIErrorBody(re))
			return
		}
		writeOpenAIError(w, re)
		return
	}
	lps := o.Logprobs
	if j.Stream {
		lps = o.TailLogprobs
	}
	resp := final(&g, lps, o)
	if !j.Stream {
		resp.Usage = usage(o)
		resp.Speculation = o.Res.Speculation
		writeJSON(w, http.StatusOK, resp)
		return
	}
	if first {
		// Nothing was generated: still open the stream as OpenAI does, with the role.
		if err := ev.event(j.wrap(chunks(reply.Part{Kind: reply.Content}, nil, true, 0)[0])); err != nil {
			return
		}
	}
	if j.IncludeUsage {
		if ev.event(chunkWithNullUsage{OpenAIResponse: resp}) != nil {
			return
		}
		last := base
		last.Choices = []struct{}{}
		last.Usage = usage(o)
		last.Speculation = o.Res.Speculation
		if ev.event(last) != nil {
			return
		}
	} else {
		resp.Speculation = o.Res.Speculation
		if ev.event(resp) != nil {
			return
		}
	}
	_ = ev.event([]byte("[DONE]"))
}

// finishReason is "tool_calls" when the reply made calls, else "length" or "stop".
func finishReason(o *outcome) *string {
	fr := o.DoneReason
	switch {
	case o.Calls > 0:
		fr = "tool_calls"
	case fr != "length":
		fr = "stop"
	}
	return &fr
}

// openAIBase is the response every chunk of j copies: a fresh id with idPrefix, the object name,
// the creation time and the model.
func openAIBase(j *openAIJob, idPrefix, object string) OpenAIResponse {
	return OpenAIResponse{ID: newID(idPrefix), Object: object, Created: time.Now().Unix(),
		Model: j.Model, SystemFingerprint: "fp_dflash"}
}

// wrap frames a streamed chunk of j: with include_usage every chunk before the usage one carries
// "usage": null, as OpenAI's do.
func (j *openAIJob) wrap(resp OpenAIResponse) any {
	if j.IncludeUsage {
		return chunkWithNullUsage{OpenAIResponse: resp}
	}
	return resp
}

// chatLogprobs is a chat choice's logprobs object for lps: null unless the request asked.
func (j *openAIJob) chatLogprobs(lps []tokenLogprob) *OpenAIChatLogprobs {
	if !j.Opts.Logprobs {
		return nil
	}
	return openAIChatLogprobs(lps)
}

// completionLogprobs is a text completion choice's logprobs object for lps: null unless asked.
func (j *openAIJob) completionLogprobs(lps []tokenLogprob) *OpenAICompletionLogprobs {
	if !j.Opts.Logprobs {
		return nil
	}
	return openAICompletionLogprobs(lps)
}

// chunkChatLogprobs is chatLogprobs for a streamed chunk: null when the chunk carries no token
// (the opening chunk of a reply that generated nothing, the last one when every token's text
// showed), as OpenAI sends them; only a whole answer lists no tokens as an empty object.
func (j *openAIJob) chunkChatLogprobs(lps []tokenLogprob) *OpenAIChatLogprobs {
	if len(lps) == 0 {
		return nil
	}
	return j.chatLogprobs(lps)
}

// chunkCompletionLogprobs is completionLogprobs for a streamed chunk: null likewise.
func (j *openAIJob) chunkCompletionLogprobs(lps []tokenLogprob) *OpenAICompletionLogprobs {
	if len(lps) == 0 {
		return nil
	}
	return j.completionLogprobs(lps)
}

func (s *Server) handleOpenAIChat(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOpenAIChat, writeOpenAIError)
	if !ok {
		return
	}
	base := openAIBase(j, "chatcmpl-", "chat.completion.chunk")
	s.openAIRun(w, r, j, base,
		func(p reply.Part, lps []tokenLogprob, first bool, calls int) []OpenAIResponse {
			delta := func(d *OpenAIChatMessage, l *OpenAIChatLogprobs) OpenAIResponse {
				c := base
				c.Choices = []OpenAIChatChoice{{Delta: d, Logprobs: l}}
				return c
			}
			d := &OpenAIChatMessage{}
			if first {
				d.Role = "assistant"
			}
			l := j.chunkChatLogprobs(lps)
			switch p.Kind {
			case reply.Content:
				d.Content = &p.Text
			case reply.Thinking:
				d.ReasoningContent = &p.Text
			case reply.ToolCall:
				// As OpenAI streams a call: a first fragment with the index, id, type and name
				// and empty arguments, then the arguments (here in one fragment, since a call is
				// only known to be one once it is whole).
				d.ToolCalls = []OpenAIToolCall{{Index: &calls, ID: callID(), Type: "function",
					Function: OpenAIToolFunction{Name: p.Call.Name}}}
				args := &OpenAIChatMessage{ToolCalls: []OpenAIToolCall{{Index: &calls,
					Function: OpenAIToolFunction{Arguments: string(p.Call.Arguments)}}}}
				return []OpenAIResponse{delta(d, l), delta(args, nil)}
			}
			return []OpenAIResponse{delta(d, l)}
		},
		func(g *gathered, lps []tokenLogprob, o *outcome) OpenAIResponse {
			resp := base
			if !j.Stream {
				resp.Object = "chat.completion"
				msg := &OpenAIChatMessage{Role: "assistant"}
				if content := g.content.String(); content != "" || len(g.calls) == 0 {
					msg.Content = &content
				}
				if thinking := g.thinking.String(); thinking != "" {
					msg.ReasoningContent = &thinking
				}
				for _, c := range g.calls {
					msg.ToolCalls = append(msg.ToolCalls, OpenAIToolCall{ID: callID(), Type: "function",
						Function: OpenAIToolFunction{Name: c.Name, Arguments: string(c.Arguments)}})
				}
				resp.Choices = []OpenAIChatChoice{{Message: msg, Logprobs: j.chatLogprobs(lps), FinishReason: finishReason(o)}}
				return resp
			}
			resp.Choices = []OpenAIChatChoice{{Delta: &OpenAIChatMessage{}, Logprobs: j.chunkChatLogprobs(lps), FinishReason: finishReason(o)}}
			return resp
		})
}

func (s *Server) handleOpenAICompletion(w http.ResponseWriter, r *http.Request) {
	j, ok := parseBody(w, r, parseOpenAICompletion, writeOpenAIError)
	if !ok {
		return
	}
	base := openAIBase(j, "cmpl-", "text_completion")
	s.openAIRun(w, r, j, base,
		func(p reply.Part, lps []tokenLogprob, _ bool, _ int) []OpenAIResponse {
			c := base
			c.Choices = []OpenAICompletionChoice{{Text: p.Text, Logprobs: j.chunkCompletionLogprobs(lps)}} // a raw prompt: text parts only
			return []OpenAIResponse{c}
		},
		func(g *gathered, lps []tokenLogprob, o *outcome) OpenAIResponse {
			resp := base
			full := g.content.String()
			l := j.completionLogprobs(lps)
			if j.Stream {
				full, l = "", j.chunkCompletionLogprobs(lps)
			}
			resp.Choices = []OpenAICompletionChoice{{Text: full, Logprobs: l, FinishReason: finishReason(o)}}
			return resp
		})
}

// OpenAIModel is an entry of /v1/models.
type OpenAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Error   string `json:"error,omitempty"` // dflash: why the model is unavailable
}

func openAIModel(mi ModelInfo) OpenAIModel {
	var created int64
	if !mi.ModifiedAt.IsZero() {
		created = mi.ModifiedAt.Unix()
	}
	return OpenAIModel{ID: mi.Name, Object: "model", Created: created, OwnedBy: "dflash", Error: unavailableMsg(mi)}
}

func (s *Server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) {
	s.scanStores()
	data := []OpenAIModel{}
	for _, mi := range s.b.Models() {
		data = append(data, openAIModel(mi))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleOpenAIModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	info(r).model = name
	mi, ok := lookup(s.b, name)
	if !ok {
		re := &RequestError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
			Msg: fmt.Sprintf("The model %q does not exist", name)}
		info(r).err = re.Msg
		writeOpenAIError(w, re)
		return
	}
	writeJSON(w, http.StatusOK, openAIModel(mi))
}
