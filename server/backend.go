package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/sample/grammar"
)

// Backend loads models by name. The server knows models only through it: package server/backend
// implements it with the real engine, server/fake with a fake for tests. Implementations must be safe for
// concurrent use.
type Backend interface {
	// Models lists the configured models. The list may change between calls (it is read on
	// every /api/tags, /v1/models and lookup).
	Models() []ModelInfo
	// Load makes the named model ready. It may be slow; the server calls it with at most one
	// load of a given name in flight, keeps the result while in use and closes it after its
	// keep-alive. It returns an error wrapping ErrModelNotFound for a name Models does not list.
	Load(ctx context.Context, name string) (Model, error)
}

// Model is one loaded model. The server serialises nothing on its behalf except through its
// scheduler: with a Parallel above 1, Generate is called concurrently, up to that many at once,
// and must cope (server/backend decodes them together in one batch).
type Model interface {
	Info() ModelInfo
	// ContextLength is the most positions (prompt + generated) one generation may use.
	ContextLength() int
	// Tokenize maps text to token ids, recognising the model's special tokens and adding the
	// BOS token when the model wants one. The count is what prompt_eval_count reports.
	Tokenize(text string) ([]int, error)
	// RenderChat applies the model's chat template to msgs.
	RenderChat(msgs []ChatMessage, opts ChatOptions) (string, error)
	// Generate decodes after req.Prompt, calling emit once per generated token, in order, with
	// the text that token adds (possibly empty for a partial UTF-8 sequence or text held back
	// for a stop string), and possibly once more with ID -1 for held-back text. It must stop at
	// the end of sequence or a stop string (DoneReason "stop"), after req.MaxTokens tokens
	// (DoneReason "length"), when ctx is cancelled (returning ctx.Err()) or when emit returns an
	// error (returning that error unchanged). It checks ctx at least once per token or speculation
	// round. The GenResult holds the counters so far even when an error is returned.
	Generate(ctx context.Context, req GenRequest, emit func(Token) error) (GenResult, error)
	// Close frees the model. The server calls it once, when no generation is running.
	Close() error
}

// StepObserver is implemented by a Model that decodes its running generations together: the
// server gives it, once loaded, a function to call after every decode step with the step's width
// (the generations it ran), which feeds the dflash_batch_width metrics. The function is cheap
// and safe for concurrent use.
type StepObserver interface {
	ObserveSteps(f func(width int))
}

// ModelInfo describes a configured model for listings (/api/tags, /api/show, /v1/models).
type ModelInfo struct {
	Name          string    // the name requests use, e.g. "qwen3:0.6b"
	Family        string    // e.g. "qwen3", "llama"
	ParameterSize string    // e.g. "0.6B"
	Quantization  string    // e.g. "BF16", "Q8_0"
	Format        string    // e.g. "safetensors"
	Size          int64     // bytes of weights on disk
	Digest        string    // optional content digest
	Draft         string    // name of the DFlash draft used for speculation, "" for none
	ContextLength int       // 0 if unknown until loaded
	ModifiedAt    time.Time // zero if unknown
	Template      string    // chat template source, shown by /api/show
	// Error, when set, says why the model is unavailable: it failed its startup checks and was
	// kept in the listing (dflash serve --skip-broken). Requests for it are refused with it.
	Error string

	// ModelContext is the context the model itself supports (0 if unknown); ContextLength is
	// less when the server caps it (dflash serve --ctx).
	ModelContext int
	// Options are the model's default request options, a JSON object by ollama's option names
	// (an ollama manifest's params layer; "" for none): the ollama endpoints apply them under a
	// request's own options. Text, not a map, so a ModelInfo stays comparable.
	Options string
	// System is the model's default system message (an ollama manifest's system layer), shown by
	// /api/show; the model's RenderChat applies it.
	System string
	// Parallel is how many generations the model runs at once, decoded together (0: the
	// server's Config.Parallel).
	Parallel int
}

// ChatMessage is one turn of a conversation. Role is "system", "user", "assistant" or "tool".
type ChatMessage struct {
	Role    string
	Content string
	// Thinking is an assistant turn's reasoning, given to the template apart from Content (as
	// reasoning_content, which Qwen3's template writes back into a <think> block).
	Thinking string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolName and ToolCallID say, on a "tool" turn, which tool and which call the content is
	// the result of ("" when the client did not say).
	ToolName   string
	ToolCallID string
}

// ToolCall is a call of one of the request's tools, as a message carries it to the template.
type ToolCall struct {
	ID   string // "" when the client gave none
	Name string
	// Arguments is JSON text, normally an object.
	Arguments string
}

// ChatOptions steer RenderChat.
type ChatOptions struct {
	// AddGenerationPrompt appends the assistant header so the model answers next.
	AddGenerationPrompt bool
	// Tools are the tool schemas the model may call, each a JSON object in the OpenAI shape
	// {"type":"function","function":{"name":...,"description":...,"parameters":{...}}}, as the
	// request gave it (key order kept); nil renders the template's form without tools.
	Tools []json.RawMessage
	// Think is the template's enable_thinking: nil leaves it undefined (the template's default),
	// false asks for the no-think form.
	Think *bool
}

// GenRequest is one generation.
type GenRequest struct {
	Prompt    []int // tokenized prompt, already checked to fit the context
	MaxTokens int   // > 0; the server clips it so prompt + generated fits the context
	// Options are the sampler's, filled by the server with every API default applied (a request
	// without a seed has a random one); a backend uses them as they are.
	Options sample.Options
	// Seeded says the client chose Options.Seed: the same request must give the same output every
	// time, which a backend that drafts ensures with a fixed draft depth (runner.Request.Seeded),
	// or, when Options.Coupled (the server's default for seeded requests), at any depth.
	Seeded bool
	// Stop strings end the generation at their first occurrence in the output's text
	// (DoneReason "stop"); neither the string nor anything after it is emitted, and text that
	// may begin one is held back until it cannot (package runner/stop does all of this). The
	// backend applies them together with its own end-of-sequence tokens.
	Stop []string
	// Logprobs asks for every generated token's Token.Logprob, with TopLogprobs (0..20) most
	// likely alternatives each.
	Logprobs    bool
	TopLogprobs int
	// Checkpoint, for a chat on a model that asked for it (HistoryCheckpointer), is how many
	// prompt tokens are the conversation before the generation prompt (0: unknown): where a
	// model whose cache cannot rewind saves a state checkpoint, since the next turn surely
	// shares those tokens while its template may render this reply otherwise than the
	// generation prompt began it.
	Checkpoint int
	// Format, when set, constrains the output to the grammar (structured output); Think says
	// whether the output may begin with a think block the grammar leaves free (ThinkNone when
	// the model does not think or the request turned it off).
	Format *grammar.Grammar
	Think  ThinkMode
}

// ThinkMode says where a generation stands toward a think block at its start.
type ThinkMode uint8

const (
	ThinkNone   ThinkMode = iota // no think block: constrained from the first token
	ThinkMay                     // the model may open one (its first token may be <think>)
	ThinkInside                  // the prompt opened one: the output starts inside it
)

// HistoryCheckpointer is a Model whose prefix reuse gains from GenRequest.Checkpoint (a
// hybrid target's, whose recurrent state resumes only from checkpoints). For it the server
// tokenizes a chat's history without the generation prompt as well.
type HistoryCheckpointer interface {
	WantsHistoryCheckpoint() bool
}

// Token is one generated token.
type Token struct {
	ID   int
	Text string
	// Logprob is set on every generated token (not on a held-back piece, ID -1) when
	// GenRequest.Logprobs asks.
	Logprob *Logprob
}

// Logprob is a generated token's log probability under the model and the most likely tokens at
// its position. dflash reports the model's own distribution: the log-softmax at temperature 1 of
// the raw logits, before penalties, temperature and the top-k/top-p/min-p filters, as ollama
// does; with speculation, the target's (never the draft's), from the verification forward.
type Logprob struct {
	TokenLogprob
	Top []TokenLogprob // most likely first; len is GenRequest.TopLogprobs
}

// TokenLogprob is one token's text (its bytes, which may be part of a UTF-8 character) and log
// probability.
type TokenLogprob struct {
	Token   string
	Logprob float64
}

// GenResult reports what a generation did. Durations are wall time.
type GenResult struct {
	PromptTokens   int           // prompt tokens evaluated (after any cache reuse)
	ReusedTokens   int           // prompt tokens whose cached rows were kept instead (prefix reuse)
	PromptDuration time.Duration // prefill time
	EvalTokens     int           // tokens generated
	EvalDuration   time.Duration // time from the end of prefill to the last token
	DoneReason     string        // "stop" or "length"
	Speculation    *SpecStats    // nil when no draft was used
}

// SpecStats summarise DFlash speculation over one generation.
type SpecStats struct {
	Tau      float64 `json:"tau"`      // mean tokens committed per verification round
	Drafted  int     `json:"drafted"`  // draft tokens proposed
	Accepted int     `json:"accepted"` // draft tokens accepted by the target
	Rounds   int     `json:"rounds"`   // verification rounds
}
