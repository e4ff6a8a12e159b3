package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/sample/grammar"
)

// RequestError is a client error: Status is the HTTP status, Param the request field at fault
// ("" when none applies). Both APIs render it in their own error shape.
type RequestError struct {
	Status int
	Param  string
	Msg    string
	Code   string // OpenAI error code, e.g. "model_not_found"; "" for null
}

func (e *RequestError) Error() string { return e.Msg }

func badField(param, format string, args ...any) *RequestError {
	msg := fmt.Sprintf(format, args...)
	if param != "" {
		msg = fmt.Sprintf("invalid %q: %s", param, msg)
	}
	return &RequestError{Status: http.StatusBadRequest, Param: param, Msg: msg}
}

func unsupported(param, what string) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Param: param,
		Msg: fmt.Sprintf("%q is not supported: %s", param, what)}
}

// decodeJSON unmarshals a whole request body into v, describing failures by byte offset or
// field name.
func decodeJSON(body []byte, v any) *RequestError {
	if len(bytes.TrimSpace(body)) == 0 {
		return &RequestError{Status: http.StatusBadRequest, Msg: "missing request body"}
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &RequestError{Status: http.StatusBadRequest,
			Msg: fmt.Sprintf("malformed JSON at byte offset %d: %v", syn.Offset, err)}
	case errors.As(err, &typ):
		field := typeErrorField(v, typ)
		if field == "" {
			return &RequestError{Status: http.StatusBadRequest,
				Msg: fmt.Sprintf("request body must be a JSON object, got %s", typ.Value)}
		}
		return &RequestError{Status: http.StatusBadRequest, Param: field,
			Msg: fmt.Sprintf("invalid %q: expected %s, got JSON %s (byte offset %d)", field, jsonKind(typ.Type), typ.Value, typ.Offset)}
	default:
		return &RequestError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("malformed JSON: %v", err)}
	}
}

// present reports whether a raw JSON value was given and is not null.
func present(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

// genOptions is what both APIs reduce their sampling and length controls to. Sample is parsed
// straight into the sampler's options, every API default and convention already applied (a
// request without a seed gets a random one here), so the backend passes it on as is.
type genOptions struct {
	Sample sample.Options
	// Seeded says the client gave the seed: the same request must then give the same output,
	// which with a draft means coupled sampling (Config.Coupling, by default) or a fixed draft
	// depth (runner.Depth.Seeded).
	Seeded     bool
	NumPredict int // tokens to generate; < 0 means until the context is full
	NumCtx     int // 0: the model's context length
	Stop       []string
	// Logprobs asks for the generated tokens' log probabilities, with TopLogprobs alternatives.
	Logprobs    bool
	TopLogprobs int
}

// ollamaDefaults are ollama's documented option defaults.
func ollamaDefaults() genOptions {
	return genOptions{
		Sample:     sample.Options{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0, RepeatPenalty: 1.1, PenaltyWindow: 64, Seed: rand.Uint64()},
		NumPredict: -1,
	}
}

// openAIDefaults are OpenAI's documented defaults; extras it lacks (top_k, min_p, repeat
// penalty) are off.
func openAIDefaults() genOptions {
	return genOptions{Sample: sample.Options{Temperature: 1, TopP: 1, RepeatPenalty: 1, PenaltyWindow: 64, Seed: rand.Uint64()}, NumPredict: -1}
}

// --- ollama ---

// OllamaGenerateRequest is the body of POST /api/generate.
type OllamaGenerateRequest struct {
	Model     string                     `json:"model"`
	Prompt    string                     `json:"prompt"`
	Suffix    string                     `json:"suffix"`
	System    string                     `json:"system"`
	Template  string                     `json:"template"`
	Context   []int                      `json:"context"`
	Stream    *bool                      `json:"stream"`
	Raw       bool                       `json:"raw"`
	Format    json.RawMessage            `json:"format"`
	Images    []string                   `json:"images"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
	Options   map[string]json.RawMessage `json:"options"`
	Think     json.RawMessage            `json:"think"`
	Truncate  *bool                      `json:"truncate"`
	// Logprobs and TopLogprobs (0..20) ask for the generated tokens' log probabilities.
	Logprobs    bool `json:"logprobs"`
	TopLogprobs *int `json:"top_logprobs"`
}

// OllamaMessage is one message of POST /api/chat, and of its answer.
type OllamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	Images    []string         `json:"images,omitempty"`
	ToolCalls []OllamaToolCall `json:"tool_calls,omitempty"`
	// ToolName and ToolCallID say, on a "tool" message, what it is the result of.
	ToolName   string `json:"tool_name,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// OllamaChatRequest is the body of POST /api/chat.
type OllamaChatRequest struct {
	Model     string                     `json:"model"`
	Messages  []OllamaMessage            `json:"messages"`
	Tools     json.RawMessage            `json:"tools"`
	Format    json.RawMessage            `json:"format"`
	Options   map[string]json.RawMessage `json:"options"`
	Stream    *bool                      `json:"stream"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
	Template  string                     `json:"template"`
	Think     json.RawMessage            `json:"think"`
	Truncate  *bool                      `json:"truncate"`
	// Logprobs and TopLogprobs as in OllamaGenerateRequest.
	Logprobs    bool `json:"logprobs"`
	TopLogprobs *int `json:"top_logprobs"`
}

// job is a validated generation request, API-neutral.
type job struct {
	Model     string
	Stream    bool
	KeepAlive *time.Duration
	Opts      genOptions
	// Exactly one of Prompt (used as is: raw generate, OpenAI completions) or Messages
	// (rendered with the model's chat template) is set; neither means load (or unload) only.
	Prompt   string
	Messages []ChatMessage
	Raw      bool
	// Truncate makes a prompt longer than the context keep its tail (ollama's APIs, unless the
	// request says "truncate": false); otherwise such a prompt is refused (OpenAI's).
	Truncate bool
	Notes    []string // things accepted but ignored, for the log

	// Tools are the tool schemas offered to the model (after tool_choice: none drops them, a
	// named choice keeps only its tool); ToolChoice is choiceAuto unless the OpenAI request
	// said otherwise, ToolChoiceName the named function.
	Tools          []json.RawMessage
	ToolChoice     string
	ToolChoiceName string
	// Format is the grammar the output must follow (ollama's format, OpenAI's response_format),
	// nil for free text.
	Format *grammar.Grammar
	// Think is the request's thinking switch (nil: not given, the template's default), and
	// ThinkParam the field that gave it, for errors.
	Think      *bool
	ThinkParam string
	// ollamaOpts are the request's options object when it came through an ollama endpoint
	// (nil otherwise, or without one), kept so the model's default options can be put under
	// them once the model is known (withModelDefaults).
	ollamaOpts map[string]json.RawMessage
	ollama     bool
	// openAIGiven names (by ollama's option names) the options an OpenAI request set itself;
	// the model's defaults fill the others.
	openAIGiven map[string]bool
}

// withModelDefaults re-reads an ollama request's options over the model's defaults: each option
// the request gives wins, each it leaves out takes the model's value, then the API's. A default
// the model's params layer got wrong is reported as the model's, not the client's, fault.
func (j *job) withModelDefaults(model, defaults string) *RequestError {
	if defaults == "" || !j.ollama && j.openAIGiven == nil {
		return nil
	}
	merged := map[string]json.RawMessage{}
	if err := json.Unmarshal([]byte(defaults), &merged); err != nil {
		return &RequestError{Status: http.StatusInternalServerError, Msg: fmt.Sprintf("model %s default options (params layer): %v", model, err)}
	}
	if !j.ollama {
		return j.openAIDefaults(model, merged)
	}
	for k, v := range j.ollamaOpts {
		if present(v) {
			merged[k] = v
		}
	}
	o, err := parseOllamaOptions(merged)
	if err != nil {
		if _, own := j.ollamaOpts[strings.TrimPrefix(err.Param, "options.")]; !own {
			err.Status, err.Msg = http.StatusInternalServerError, fmt.Sprintf("model %s default options (params layer): %s", model, err.Msg)
		}
		return err
	}
	// Seeded means the client chose the seed; a seed from the model's defaults reproduces too.
	// Log probabilities are asked outside the options object, so they stay as parsed.
	o.Logprobs, o.TopLogprobs = j.Opts.Logprobs, j.Opts.TopLogprobs
	j.Opts = o
	return nil
}

func (j *job) empty() bool { return j.Prompt == "" && len(j.Messages) == 0 }

// parseOllamaGenerate decodes and validates a /api/generate body.
func parseOllamaGenerate(body []byte) (*job, *RequestError) {
	var r OllamaGenerateRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &job{Model: r.Model, Stream: r.Stream == nil || *r.Stream, Raw: r.Raw, Truncate: r.Truncate == nil || *r.Truncate}
	if err := commonOllama(j, r.Model, r.Format, r.Think, r.KeepAlive, r.Options, r.Template); err != nil {
		return nil, err
	}
	if err := setLogprobs(&j.Opts, r.Logprobs, r.TopLogprobs, "top_logprobs"); err != nil {
		return nil, err
	}
	switch {
	case len(r.Images) > 0:
		return nil, unsupported("images", "dflash serves text-only models")
	case r.Suffix != "":
		return nil, unsupported("suffix", "fill-in-the-middle is not implemented")
	case len(r.Context) > 0:
		return nil, unsupported("context", "send the conversation with /api/chat instead")
	}
	switch {
	case r.Raw:
		j.Prompt = r.Prompt
	case r.Prompt != "":
		if r.System != "" {
			j.Messages = append(j.Messages, ChatMessage{Role: "system", Content: r.System})
		}
		j.Messages = append(j.Messages, ChatMessage{Role: "user", Content: r.Prompt})
	}
	return j, nil
}

// parseOllamaChat decodes and validates a /api/chat body.
func parseOllamaChat(body []byte) (*job, *RequestError) {
	var r OllamaChatRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	j := &job{Model: r.Model, Stream: r.Stream == nil || *r.Stream, Truncate: r.Truncate == nil || *r.Truncate}
	if err := commonOllama(j, r.Model, r.Format, r.Think, r.KeepAlive, r.Options, r.Template); err != nil {
		return nil, err
	}
	if err := setLogprobs(&j.Opts, r.Logprobs, r.TopLogprobs, "top_logprobs"); err != nil {
		return nil, err
	}
	tools, err := parseTools(r.Tools)
	if err != nil {
		return nil, err
	}
	j.Tools, j.ToolChoice = tools, choiceAuto
	if err := formatWithTools(j, "format"); err != nil {
		return nil, err
	}
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		if err := checkRole(p+".role", m.Role); err != nil {
			return nil, err
		}
		if len(m.Images) > 0 {
			return nil, unsupported(p+".images", "dflash serves text-only models")
		}
		calls, err := ollamaCalls(p+".tool_calls", m.ToolCalls)
		if err != nil {
			return nil, err
		}
		j.Messages = append(j.Messages, ChatMessage{Role: m.Role, Content: m.Content, Thinking: m.Thinking,
			ToolCalls: calls, ToolName: m.ToolName, ToolCallID: m.ToolCallID})
	}
	return j, nil
}

// setLogprobs records a request for log probabilities with top alternatives (0..20, named param
// in errors). top without on is accepted and ignored, as ollama and OpenAI's own docs say it only
// applies when logprobs is asked.
func setLogprobs(o *genOptions, on bool, top *int, param string) *RequestError {
	if top != nil && (*top < 0 || *top > sample.MaxTopLogprobs) {
		return badField(param, "%d is outside [0, %d]", *top, sample.MaxTopLogprobs)
	}
	o.Logprobs = on
	if on && top != nil {
		o.TopLogprobs = *top
	}
	return nil
}

func checkRole(param, role string) *RequestError {
	switch role {
	case "system", "user", "assistant", "tool":
		return nil
	case "":
		return badField(param, "missing role")
	}
	return badField(param, "unknown role %q (want system, user, assistant or tool)", role)
}

func commonOllama(j *job, model string, format, think, keep json.RawMessage, opts map[string]json.RawMessage, template string) *RequestError {
	if model == "" {
		return badField("model", "model is required")
	}
	g, ferr := parseOllamaFormat(format)
	if ferr != nil {
		return ferr
	}
	j.Format = g
	t, err := parseThink("think", think)
	if err != nil {
		return err
	}
	j.Think, j.ThinkParam = t, "think"
	if template != "" {
		j.Notes = append(j.Notes, "template ignored: the model's own chat template is used")
	}
	if present(keep) {
		d, err := parseKeepAlive(keep)
		if err != nil {
			return badField("keep_alive", "%v", err)
		}
		j.KeepAlive = &d
	}
	o, oerr := parseOllamaOptions(opts)
	if oerr != nil {
		return oerr
	}
	j.Opts, j.ollamaOpts, j.ollama = o, opts, true
	return nil
}

// openAIDefaults puts the model's defaults under an OpenAI request's options: each default
// whose option the request did not set replaces the OpenAI API's default.
func (j *job) openAIDefaults(model string, defaults map[string]json.RawMessage) *RequestError {
	d, err := parseOllamaOptions(defaults)
	if err != nil {
		err.Status, err.Msg = http.StatusInternalServerError, fmt.Sprintf("model %s default options (params layer): %s", model, err.Msg)
		return err
	}
	o, ds := &j.Opts, d.Sample
	for k := range defaults {
		if j.openAIGiven[k] {
			continue
		}
		switch k {
		case "temperature":
			o.Sample.Temperature = ds.Temperature
		case "top_k":
			o.Sample.TopK = ds.TopK
		case "top_p":
			o.Sample.TopP = ds.TopP
		case "min_p":
			o.Sample.MinP = ds.MinP
		case "repeat_penalty":
			o.Sample.RepeatPenalty = ds.RepeatPenalty
		case "presence_penalty":
			o.Sample.PresencePenalty = ds.PresencePenalty
		case "frequency_penalty":
			o.Sample.FrequencyPenalty = ds.FrequencyPenalty
		case "repeat_last_n":
			o.Sample.PenaltyWindow = ds.PenaltyWindow
			if ds.PenaltyWindow == 0 {
				// A window of no tokens turns every penalty off (parseOllamaOptions).
				o.Sample.RepeatPenalty, o.Sample.PresencePenalty, o.Sample.FrequencyPenalty = 1, 0, 0
			}
		case "seed":
			o.Sample.Seed, o.Seeded = ds.Seed, true
		case "stop":
			o.Stop = d.Stop
		case "num_ctx":
			o.NumCtx = d.NumCtx
		case "num_predict":
			o.NumPredict = d.NumPredict
		}
	}
	return nil
}

// parseKeepAlive reads ollama's keep_alive: a number of seconds or a Go duration string;
// negative means forever (returned as -1), 0 means unload after the request.
func parseKeepAlive(raw json.RawMessage) (time.Duration, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err == nil {
		return secondsToDuration(f)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("want a duration string like \"5m\" or a number of seconds")
	}
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return secondsToDuration(f)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration string like \"5m\" or a number of seconds: %v", err)
	}
	if d < 0 {
		return -1, nil
	}
	return d, nil
}

func secondsToDuration(f float64) (time.Duration, error) {
	switch {
	case math.IsNaN(f):
		return 0, fmt.Errorf("not a number")
	case f < 0:
		return -1, nil
	case f*float64(time.Second) >= math.MaxInt64:
		return -1, nil // longer than Go can count: forever
	}
	return time.Duration(f * float64(time.Second)), nil
}

// parseOllamaOptions reads the options object. Known options are type- and range-checked;
// unknown ones (hardware knobs like num_gpu, or samplers dflash lacks like mirostat) are
// ignored, as ollama ignores options a runner does not use.
func parseOllamaOptions(opts map[string]json.RawMessage) (genOptions, *RequestError) {
	o := ollamaDefaults()
	num := func(key string, dst *float32, lo, hi float64) *RequestError {
		raw, ok := opts[key]
		if !ok || !present(raw) {
			return nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return badField("options."+key, "expected a number, got %s", clip(raw))
		}
		if v < lo || v > hi || math.IsNaN(v) {
			return badField("options."+key, "%v is outside [%v, %v]", v, lo, hi)
		}
		*dst = float32(v)
		return nil
	}
	integer := func(key string, dst *int, lo, hi int) *RequestError {
		raw, ok := opts[key]
		if !ok || !present(raw) {
			return nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil || v != math.Trunc(v) {
			return badField("options."+key, "expected an integer, got %s", clip(raw))
		}
		if v < float64(lo) || v > float64(hi) {
			return badField("options."+key, "%v is outside [%d, %d]", v, lo, hi)
		}
		*dst = int(v)
		return nil
	}
	const big = 1 << 30
	s := &o.Sample
	window := s.PenaltyWindow
	for _, err := range []*RequestError{
		num("temperature", &s.Temperature, 0, 100),
		integer("top_k", &s.TopK, 0, big),
		num("top_p", &s.TopP, 0, 1),
		num("min_p", &s.MinP, 0, 1),
		num("repeat_penalty", &s.RepeatPenalty, 0, 100),
		integer("repeat_last_n", &window, -1, big),
		num("presence_penalty", &s.PresencePenalty, -100, 100),
		num("frequency_penalty", &s.FrequencyPenalty, -100, 100),
		integer("num_predict", &o.NumPredict, -2, big),
		integer("num_ctx", &o.NumCtx, 0, big),
	} {
		if err != nil {
			return o, err
		}
	}
	if raw, ok := opts["seed"]; ok && present(raw) {
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil || v != math.Trunc(v) || math.Abs(v) > 1<<62 {
			return o, badField("options.seed", "expected an integer, got %s", clip(raw))
		}
		s.Seed, o.Seeded = uint64(int64(v)), true
	}
	// ollama's repeat_last_n 0 is a window of no tokens (every penalty off), where the
	// sampler's 0 means its default window; -1, the whole context, is the sampler's -1 too.
	s.PenaltyWindow = window
	if window == 0 {
		s.RepeatPenalty, s.PresencePenalty, s.FrequencyPenalty = 1, 0, 0
	}
	if raw, ok := opts["stop"]; ok && present(raw) {
		stop, err := parseStop("options.stop", raw, 0)
		if err != nil {
			return o, err
		}
		o.Stop = stop
	}
	return o, nil
}

// parseStop accepts a string or a list of strings; max > 0 bounds the list length.
func parseStop(param string, raw json.RawMessage, max int) ([]string, *RequestError) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badField(param, "expected a string or a list of strings, got %s", clip(raw))
	}
	if max > 0 && len(list) > max {
		return nil, badField(param, "at most %d stop sequences are allowed, got %d", max, len(list))
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func clip(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// --- OpenAI ---

// OpenAIStreamOptions is stream_options.
type OpenAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// OpenAIMessage is one message of /v1/chat/completions.
type OpenAIMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name,omitempty"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// ToolCallID is, on a "tool" message, the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ReasoningContent is an assistant message's thinking (the reasoning_content field of
	// DeepSeek's and vLLM's APIs), given back to the template.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// openAICommon holds the fields both OpenAI endpoints share.
type openAICommon struct {
	Model            string               `json:"model"`
	Stream           bool                 `json:"stream"`
	StreamOptions    *OpenAIStreamOptions `json:"stream_options"`
	MaxTokens        *int                 `json:"max_tokens"`
	Temperature      *float64             `json:"temperature"`
	TopP             *float64             `json:"top_p"`
	Seed             *int64               `json:"seed"`
	Stop             json.RawMessage      `json:"stop"`
	N                *int                 `json:"n"`
	PresencePenalty  *float64             `json:"presence_penalty"`
	FrequencyPenalty *float64             `json:"frequency_penalty"`
	LogitBias        map[string]float64   `json:"logit_bias"`
	User             string               `json:"user"`
	// Extensions many local servers accept.
	TopK          *int     `json:"top_k"`
	MinP          *float64 `json:"min_p"`
	RepeatPenalty *float64 `json:"repeat_penalty"`
}

// OpenAIChatRequest is the body of POST /v1/chat/completions.
type OpenAIChatRequest struct {
	openAICommon
	Messages            []OpenAIMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	Functions           json.RawMessage `json:"functions"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	ReasoningEffort     *string         `json:"reasoning_effort"`
	// Think is ollama's switch, accepted here too as an extension (reasoning_effort wins).
	Think json.RawMessage `json:"think"`
}

// OpenAICompletionRequest is the body of POST /v1/completions.
type OpenAICompletionRequest struct {
	openAICommon
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// openAIJob extends job with what the OpenAI encoders need.
type openAIJob struct {
	*job
	IncludeUsage bool
}

func (c *openAICommon) toJob(maxTokens *int, maxParam string) (*openAIJob, *RequestError) {
	if c.Model == "" {
		return nil, badField("model", "model is required")
	}
	if c.N != nil && *c.N != 1 {
		return nil, unsupported("n", "only n=1 is supported")
	}
	if len(c.LogitBias) > 0 {
		return nil, unsupported("logit_bias", "token biases are not implemented")
	}
	o := openAIDefaults()
	s := &o.Sample
	if c.Temperature != nil {
		if *c.Temperature < 0 || *c.Temperature > 2 {
			return nil, badField("temperature", "%v is outside [0, 2]", *c.Temperature)
		}
		s.Temperature = float32(*c.Temperature)
	}
	if c.TopP != nil {
		if *c.TopP < 0 || *c.TopP > 1 {
			return nil, badField("top_p", "%v is outside [0, 1]", *c.TopP)
		}
		s.TopP = float32(*c.TopP)
	}
	for _, p := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"presence_penalty", c.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", c.FrequencyPenalty, &s.FrequencyPenalty}} {
		if p.v != nil {
			if *p.v < -2 || *p.v > 2 {
				return nil, badField(p.name, "%v is outside [-2, 2]", *p.v)
			}
			*p.dst = float32(*p.v)
		}
	}
	if c.TopK != nil {
		if *c.TopK < 0 {
			return nil, badField("top_k", "%d is negative", *c.TopK)
		}
		s.TopK = *c.TopK
	}
	if c.MinP != nil {
		if *c.MinP < 0 || *c.MinP > 1 {
			return nil, badField("min_p", "%v is outside [0, 1]", *c.MinP)
		}
		s.MinP = float32(*c.MinP)
	}
	if c.RepeatPenalty != nil {
		if *c.RepeatPenalty < 0 || *c.RepeatPenalty > 100 {
			return nil, badField("repeat_penalty", "%v is outside [0, 100]", *c.RepeatPenalty)
		}
		s.RepeatPenalty = float32(*c.RepeatPenalty)
	}
	if c.Seed != nil {
		s.Seed, o.Seeded = uint64(*c.Seed), true
	}
	if maxTokens != nil {
		if *maxTokens <= 0 {
			return nil, badField(maxParam, "%d must be at least 1", *maxTokens)
		}
		o.NumPredict = *maxTokens
	}
	if present(c.Stop) {
		stop, err := parseStop("stop", c.Stop, 4)
		if err != nil {
			return nil, err
		}
		o.Stop = stop
	}
	if c.StreamOptions != nil && !c.Stream {
		return nil, badField("stream_options", "only allowed when stream is true")
	}
	given := map[string]bool{"temperature": c.Temperature != nil, "top_p": c.TopP != nil, "presence_penalty": c.PresencePenalty != nil,
		"frequency_penalty": c.FrequencyPenalty != nil, "top_k": c.TopK != nil, "min_p": c.MinP != nil,
		"repeat_penalty": c.RepeatPenalty != nil, "seed": c.Seed != nil, "num_predict": maxTokens != nil, "stop": present(c.Stop)}
	j := &openAIJob{job: &job{Model: c.Model, Stream: c.Stream, Opts: o, openAIGiven: given}}
	j.IncludeUsage = c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	return j, nil
}

// parseOpenAIChat decodes and validates a /v1/chat/completions body.
func parseOpenAIChat(body []byte) (*openAIJob, *RequestError) {
	var r OpenAIChatRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	max, maxParam := r.MaxTokens, "max_tokens"
	if r.MaxCompletionTokens != nil {
		max, maxParam = r.MaxCompletionTokens, "max_completion_tokens"
	}
	j, err := r.toJob(max, maxParam)
	if err != nil {
		return nil, err
	}
	if r.TopLogprobs != nil && (r.Logprobs == nil || !*r.Logprobs) {
		// OpenAI refuses it so: top_logprobs needs logprobs.
		return nil, badField("top_logprobs", "needs \"logprobs\": true")
	}
	if err := setLogprobs(&j.Opts, r.Logprobs != nil && *r.Logprobs, r.TopLogprobs, "top_logprobs"); err != nil {
		return nil, err
	}
	switch {
	case present(r.Functions) && !bytes.Equal(bytes.TrimSpace(r.Functions), []byte("[]")):
		return nil, unsupported("functions", "function calling is not implemented")
	}
	g, ferr := parseResponseFormat(r.ResponseFormat)
	if ferr != nil {
		return nil, ferr
	}
	j.Format = g
	if err := openAIToolsAndThinking(j.job, &r); err != nil {
		return nil, err
	}
	if err := formatWithTools(j.job, "response_format"); err != nil {
		return nil, err
	}
	if len(r.Messages) == 0 {
		return nil, badField("messages", "at least one message is required")
	}
	callNames := map[string]string{} // call id -> function name, for the tool results after it
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		if err := checkRole(p+".role", role); err != nil {
			return nil, err
		}
		calls, err := openAICalls(p+".tool_calls", m.ToolCalls)
		if err != nil {
			return nil, err
		}
		text, err := openAIContent(p+".content", m.Content)
		if err != nil {
			return nil, err
		}
		msg := ChatMessage{Role: role, Content: text, Thinking: m.ReasoningContent, ToolCalls: calls, ToolCallID: m.ToolCallID}
		for _, c := range calls {
			if c.ID != "" {
				callNames[c.ID] = c.Name
			}
		}
		if role == "tool" {
			// OpenAI's tool messages name only the call; templates that show the tool's name
			// (ollama's tool_name) get it from the call.
			msg.ToolName = callNames[m.ToolCallID]
			if m.Name != "" {
				msg.ToolName = m.Name
			}
		}
		j.Messages = append(j.Messages, msg)
	}
	return j, nil
}

// openAIContent accepts a string, null, or a list of {"type":"text","text":...} parts.
func openAIContent(param string, raw json.RawMessage) (string, *RequestError) {
	if !present(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badField(param, "expected a string or a list of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("content part type %q (only \"text\")", p.Type))
		}
		if p.Text == nil {
			return "", badField(fmt.Sprintf("%s[%d].text", param, i), "missing text")
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// parseOpenAICompletion decodes and validates a /v1/completions body.
func parseOpenAICompletion(body []byte) (*openAIJob, *RequestError) {
	var r OpenAICompletionRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	max := r.MaxTokens
	if max == nil {
		def := 16 // OpenAI's documented default for this endpoint
		max = &def
	}
	j, err := r.toJob(max, "max_tokens")
	if err != nil {
		return nil, err
	}
	// logprobs N asks for the chosen token's and N alternatives' log probabilities (null or
	// absent: none).
	if err := setLogprobs(&j.Opts, r.Logprobs != nil, r.Logprobs, "logprobs"); err != nil {
		return nil, err
	}
	switch {
	case r.Echo:
		return nil, unsupported("echo", "echoing the prompt is not implemented")
	case r.BestOf != nil && *r.BestOf != 1:
		return nil, unsupported("best_of", "only best_of=1 is supported")
	case r.Suffix != nil && *r.Suffix != "":
		return nil, unsupported("suffix", "fill-in-the-middle is not implemented")
	}
	if !present(r.Prompt) {
		return nil, badField("prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err != nil {
		var list []string
		if err := json.Unmarshal(r.Prompt, &list); err != nil {
			return nil, badField("prompt", "expected a string or a list of one string")
		}
		if len(list) != 1 {
			return nil, unsupported("prompt", "only one prompt per request")
		}
		s = list[0]
	}
	if s == "" {
		return nil, badField("prompt", "prompt must not be empty")
	}
	j.Prompt, j.Raw = s, true
	return j, nil
}
