// Package fake is a deterministic server.Backend for tests and for the JS compatibility
// script: it "generates" a fixed word sequence token by token with a controllable delay. It
// owns no model logic and must never be used to serve real requests.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dflash/dflash/runner/stop"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/server"
)

// Words is the text every generation produces, one token per entry, before it stops (unless
// MaxTokens or a stop sequence ends it first). Tests compare against it.
var Words = []string{"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}

// Text is the whole answer of an unconstrained generation: strings.Join(Words, "").
var Text = strings.Join(Words, "")

// A model whose name contains "tools" lists ToolsTemplate as its chat template, so the server
// offers it tools and thinking (its template renders "tools" and has the <tool_call>, <think>
// and </think> tags); RenderChat writes what the server passed, and then its answer follows a
// script (see Generate): with thinking on, ThinkingPieces first; when tools are offered and no
// tool result is in the conversation yet, CallPieces (a call of ToolName with ToolArguments);
// otherwise Words.
const ToolsTemplate = "{% if tools %}<tools>{{ tools | tojson }}</tools> <tool_call>{% endif %}" +
	"{% for m in messages %}{{ m.content }}{% endfor %}<think></think>"

// ToolName and ToolArguments are the call the fake's script makes.
const (
	ToolName      = "get_weather"
	ToolArguments = `{"city":"Paris"}`
)

// Thinking is the thinking of the script, ThinkingPieces its tokens as the model writes them.
const Thinking = "Thinking about it."

var (
	ThinkingPieces = []string{"<think>", "\n", "Thinking", " about", " it", ".", "\n", "</", "think>", "\n\n"}
	// CallPieces cut the call inside its tags and its JSON, as tokens do.
	CallPieces = []string{"<tool", "_call>", "\n", `{"name": "get_`, `weather", "arguments": {"ci`, `ty": "Paris"}}`, "\n", "</tool_call>"}
)

// Marker words RenderChat writes and Tokenize gives ids of their own, so Generate can see from
// the prompt what the request asked for.
const (
	markTools  = "<|tools|>"
	markThink  = "<|think|>"
	markResult = "<|tool|>" // a tool result's role header
)

var markIDs = map[string]int{markTools: 1001, markThink: 1002, markResult: 1003}

// Backend is a fake backend. Set fields before first use.
type Backend struct {
	// Names lists the configured models; default {"fake:latest", "fake-draft:latest"}.
	Names []string
	// ContextLength of every model; default 64 tokens.
	ContextLength int
	// ModelContext is what the models say they support (0: nothing said); above ContextLength
	// it plays a model capped by the server's --ctx.
	ModelContext int
	// TokenDelay is slept (cancellably) before each generated token.
	TokenDelay time.Duration
	// LoadDelay is slept (cancellably) in Load.
	LoadDelay time.Duration
	// FailLoad names models whose Load fails.
	FailLoad map[string]bool
	// Unavailable maps model names to the error they are listed with (ModelInfo.Error), as a
	// backend lists a model that failed its startup checks; Load refuses them with it.
	Unavailable map[string]string
	// FailAfter > 0 makes Generate fail after emitting that many tokens (a mid-stream error).
	FailAfter int
	// EmbedSuffix is what the models' EmbedSuffix reports (nil: none), as a tokenizer that ends
	// every embedded text with an end-of-text token.
	EmbedSuffix []int
	// Length > 0 makes a generation Length tokens long, cycling through Words, instead of
	// len(Words): a long stream can fill a socket buffer that one pass of Words cannot.
	Length int
	// Pieces, when set, are every generation's tokens instead of Words or the script: a test
	// chooses exactly what the "model" writes and where the token boundaries fall.
	Pieces []string
	// Options are every model's default request options (ModelInfo.Options: a JSON object by
	// ollama's option names, as an ollama params layer gives them).
	Options string

	loads     atomic.Int64
	cancelled atomic.Int64
	closes    atomic.Int64
	active    atomic.Int64 // loaded and not yet closed
	tokenizes atomic.Int64
	longest   atomic.Int64 // bytes of the longest text tokenized
	last      atomic.Pointer[[]int]
	rendered  atomic.Pointer[string]
	lastOpts  atomic.Pointer[sample.Options]
}

func (b *Backend) names() []string {
	if len(b.Names) == 0 {
		return []string{"fake:latest", "fake-draft:latest"}
	}
	return b.Names
}

func (b *Backend) ctxLen() int {
	if b.ContextLength <= 0 {
		return 64
	}
	return b.ContextLength
}

// Models implements server.Backend.
func (b *Backend) Models() []server.ModelInfo {
	var out []server.ModelInfo
	for _, n := range b.names() {
		out = append(out, b.info(n))
	}
	return out
}

func (b *Backend) info(name string) server.ModelInfo {
	mi := server.ModelInfo{Name: name, Family: "fake", ParameterSize: "1K", Quantization: "F32",
		Format: "fake", Size: 4096, Digest: Digest(name), ContextLength: b.ctxLen(), ModelContext: b.ModelContext,
		ModifiedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Template: "{{ .Prompt }}"}
	if strings.Contains(name, "tools") {
		mi.Template = ToolsTemplate
	}
	if strings.Contains(name, "draft") {
		mi.Draft = name + "-dflash"
	}
	mi.Error = b.Unavailable[name]
	mi.Options = b.Options
	return mi
}

// Digest is a fake model's digest: 64 hex digits as ollama sends them (the sha256 of the name),
// so a client that slices the ID column out of it, as `ollama list` does ([:12]), works on the
// fake exactly as on a real model.
func Digest(name string) string {
	sum := sha256.Sum256([]byte("fake:" + name))
	return hex.EncodeToString(sum[:])
}

// Loads, Closes and Active count Load calls, Close calls and models currently loaded.
func (b *Backend) Loads() int64  { return b.loads.Load() }
func (b *Backend) Closes() int64 { return b.closes.Load() }
func (b *Backend) Active() int64 { return b.active.Load() }

// Tokenizes counts Tokenize calls, so tests can see a prompt refused without tokenizing.
func (b *Backend) Tokenizes() int64 { return b.tokenizes.Load() }

// LongestTokenized is the length in bytes of the longest text Tokenize was given.
func (b *Backend) LongestTokenized() int { return int(b.longest.Load()) }

// LastOptions are the sampling options of the latest Generate, as the server passed them (false
// before the first).
func (b *Backend) LastOptions() (sample.Options, bool) {
	if o := b.lastOpts.Load(); o != nil {
		return *o, true
	}
	return sample.Options{}, false
}

// LastPrompt is the prompt of the latest Generate (nil before the first).
func (b *Backend) LastPrompt() []int {
	if p := b.last.Load(); p != nil {
		return *p
	}
	return nil
}

// LastRendered is the text of the latest RenderChat ("" before the first).
func (b *Backend) LastRendered() string {
	if p := b.rendered.Load(); p != nil {
		return *p
	}
	return ""
}

// Cancelled counts generations that ended because their context was cancelled.
func (b *Backend) Cancelled() int64 { return b.cancelled.Load() }

// Load implements server.Backend.
func (b *Backend) Load(ctx context.Context, name string) (server.Model, error) {
	found := false
	for _, n := range b.names() {
		found = found || n == name
	}
	if !found {
		return nil, fmt.Errorf("fake: %q: %w", name, server.ErrModelNotFound)
	}
	if err := sleep(ctx, b.LoadDelay); err != nil {
		return nil, err
	}
	if msg := b.Unavailable[name]; msg != "" {
		return nil, errors.New(msg)
	}
	if b.FailLoad[name] {
		return nil, errors.New("fake: load failure requested")
	}
	b.loads.Add(1)
	b.active.Add(1)
	return &Model{b: b, info: b.info(name)}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Model is a loaded fake model.
type Model struct {
	b      *Backend
	info   server.ModelInfo
	closed atomic.Bool
}

// Info implements server.Model.
func (m *Model) Info() server.ModelInfo { return m.info }

// ContextLength implements server.Model.
func (m *Model) ContextLength() int { return m.b.ctxLen() }

// MinPromptTokens bounds Tokenize from below by half the words, plus BOS: loose on purpose, so
// that prompts just over the context still reach Tokenize and its exact refusal.
func (m *Model) MinPromptTokens(text string) int {
	words := 0
	for i := 0; i < len(text); i++ {
		if !isSpace(text[i]) && (i == 0 || isSpace(text[i-1])) {
			words++
		}
	}
	return 1 + words/2
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// Tokenize gives one token per whitespace-separated word (ids are word lengths, but the marker
// words RenderChat writes have ids above 1000), plus a BOS.
func (m *Model) Tokenize(text string) ([]int, error) {
	m.b.tokenizes.Add(1)
	for n := int64(len(text)); ; {
		if old := m.b.longest.Load(); n <= old || m.b.longest.CompareAndSwap(old, n) {
			break
		}
	}
	ids := []int{1}
	for _, w := range strings.Fields(text) {
		if id, ok := markIDs[w]; ok {
			ids = append(ids, id)
			continue
		}
		ids = append(ids, len(w)+2)
	}
	return ids, nil
}

// RenderChat renders "<|role|> content\n" per message and "<|assistant|>" to prompt an answer.
// What a template would get besides is written too, each only when present: the tools ("<|tools|>
// JSON" first), a turn's thinking and calls ("thinking: T", "call: NAME ARGS" after its content),
// a result's tool name and call id, and "<|think|>" (think not false) or "<|no_think|>"
// (false) before the generation prompt when the model's template thinks.
func (m *Model) RenderChat(msgs []server.ChatMessage, opts server.ChatOptions) (string, error) {
	var b strings.Builder
	if len(opts.Tools) > 0 {
		b.WriteString(markTools)
		for _, t := range opts.Tools {
			fmt.Fprintf(&b, " %s", t)
		}
		b.WriteString("\n")
	}
	for _, msg := range msgs {
		fmt.Fprintf(&b, "<|%s|> %s\n", msg.Role, msg.Content)
		if msg.Thinking != "" {
			fmt.Fprintf(&b, "thinking: %s\n", msg.Thinking)
		}
		for _, c := range msg.ToolCalls {
			fmt.Fprintf(&b, "call: %s %s %s\n", c.ID, c.Name, c.Arguments)
		}
		if msg.ToolName != "" || msg.ToolCallID != "" {
			fmt.Fprintf(&b, "result of: %s %s\n", msg.ToolName, msg.ToolCallID)
		}
	}
	if m.info.Template == ToolsTemplate {
		if opts.Think == nil || *opts.Think {
			b.WriteString(markThink + "\n")
		} else {
			b.WriteString("<|no_think|>\n")
		}
	}
	if opts.AddGenerationPrompt {
		b.WriteString("<|assistant|>")
	}
	out := b.String()
	m.b.rendered.Store(&out)
	return out, nil
}

// script is what a generation after prompt writes (see ToolsTemplate).
func (m *Model) script(prompt []int) []string {
	if m.b.Pieces != nil {
		return m.b.Pieces
	}
	var out []string
	if slices.Contains(prompt, markIDs[markThink]) {
		out = append(out, ThinkingPieces...)
	}
	if slices.Contains(prompt, markIDs[markTools]) && !slices.Contains(prompt, markIDs[markResult]) {
		return append(out, CallPieces...)
	}
	return append(out, Words...)
}

// formatted is what a generation under a format writes: the thinking pieces when the prompt
// thinks, then the grammar's completion from its start (Grammar.Finish: required members only,
// shortest values), in pieces of up to 4 bytes as a tokenizer would split it.
func (m *Model) formatted(req server.GenRequest) []string {
	var out []string
	if req.Think != server.ThinkNone && slices.Contains(req.Prompt, markIDs[markThink]) {
		out = append(out, ThinkingPieces...)
	}
	text := req.Format.Finish(req.Format.Start())
	for len(text) > 0 {
		k := min(4, len(text))
		out = append(out, string(text[:k]))
		text = text[k:]
	}
	return out
}

// Generate emits Words in order (cycling when Length asks for more), stopping after MaxTokens,
// at a stop string (through the same stop.Matcher the real backend's runner uses) or at the end
// of the sequence.
func (m *Model) Generate(ctx context.Context, req server.GenRequest, emit func(server.Token) error) (res server.GenResult, err error) {
	if m.closed.Load() {
		return server.GenResult{}, errors.New("fake: generate on a closed model")
	}
	start := time.Now()
	prompt := append([]int(nil), req.Prompt...)
	m.b.last.Store(&prompt)
	opts := req.Options
	m.b.lastOpts.Store(&opts)
	res = server.GenResult{PromptTokens: len(req.Prompt), PromptDuration: time.Microsecond}
	if m.info.Draft != "" {
		res.Speculation = &server.SpecStats{}
	}
	defer func() {
		res.EvalDuration = time.Since(start)
		if s := res.Speculation; s != nil && s.Rounds > 0 {
			s.Tau = float64(res.EvalTokens) / float64(s.Rounds)
		}
	}()
	stops := stop.New(nil, req.Stop)
	defer func() {
		if err == nil && res.DoneReason != "" {
			if rest := stops.Flush(); rest != "" {
				err = emit(server.Token{ID: -1, Text: rest})
			}
		}
	}()
	words := m.script(req.Prompt)
	if req.Format != nil {
		words = m.formatted(req)
	}
	n := len(words)
	if m.b.Length > 0 {
		n = m.b.Length
	}
	for i := range n {
		w := words[i%len(words)]
		if i >= req.MaxTokens {
			res.DoneReason = "length"
			return res, nil
		}
		if m.b.FailAfter > 0 && i == m.b.FailAfter {
			return res, errors.New("fake: generation failure requested")
		}
		if err = sleep(ctx, m.b.TokenDelay); err != nil {
			m.b.cancelled.Add(1)
			return res, err
		}
		res.EvalTokens++
		if s := res.Speculation; s != nil {
			// Pretend every round proposes 3 and commits two tokens.
			if i%2 == 0 {
				s.Rounds++
				s.Drafted += 3
			}
			s.Accepted++
		}
		text, hit := stops.Text(w)
		tok := server.Token{ID: 100 + i%len(words), Text: text}
		if req.Logprobs {
			tok.Logprob = Logprob(i, req.TopLogprobs)
		}
		if err = emit(tok); err != nil {
			return res, err
		}
		if hit {
			res.DoneReason = "stop"
			return res, nil
		}
	}
	res.DoneReason = "stop"
	return res, nil
}

// Logprob is what the fake reports for the i-th generated token with top alternatives: the
// token Words[i%len(Words)] with log probability -(i%len(Words)+1)/8, and as alternatives the
// token itself (the fake is "greedy") then the Words after it, each 1 lower.
func Logprob(i, top int) *server.Logprob {
	k := i % len(Words)
	lp := &server.Logprob{TokenLogprob: server.TokenLogprob{Token: Words[k], Logprob: -float64(k+1) / 8}}
	for a := range top {
		lp.Top = append(lp.Top, server.TokenLogprob{Token: Words[(k+a)%len(Words)], Logprob: lp.Logprob - float64(a)})
	}
	return lp
}

// EmbeddingDims is the length of the fake's embeddings.
const EmbeddingDims = 8

// Embed implements server.Embedder with a mean over the tokens of a fixed vector per id (see
// TokenVector): like a real model's mean pooling, an input's vector does not depend on the
// others of its batch. Ids of 1000 and above are refused as outside its vocabulary.
func (m *Model) Embed(ctx context.Context, tokens []int) ([]float32, error) {
	if m.closed.Load() {
		return nil, errors.New("fake: embed on a closed model")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]float32, EmbeddingDims)
	for i, t := range tokens {
		if t < 0 || t >= 1000 {
			return nil, &server.RequestError{Status: 400, Param: "input", Msg: fmt.Sprintf("token %d of the input is %d, outside the fake's vocabulary of 1000", i, t)}
		}
		for j, v := range TokenVector(t) {
			out[j] += v / float32(len(tokens))
		}
	}
	return out, nil
}

// EmbedSuffix implements server.Embedder with Backend.EmbedSuffix.
func (m *Model) EmbedSuffix() []int { return m.b.EmbedSuffix }

// TokenVector is the fake's state for token id: small integers that differ across ids and dims.
func TokenVector(id int) []float32 {
	v := make([]float32, EmbeddingDims)
	for j := range v {
		v[j] = float32((id+1)*(j+3)%11) - 5
	}
	return v
}

// Close implements server.Model.
func (m *Model) Close() error {
	if m.closed.Swap(true) {
		return errors.New("fake: model closed twice")
	}
	m.b.closes.Add(1)
	m.b.active.Add(-1)
	return nil
}
