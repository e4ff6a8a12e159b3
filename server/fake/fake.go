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
	// Length > 0 makes a generation Length tokens long, cycling through Words, instead of
	// len(Words): a long stream can fill a socket buffer that one pass of Words cannot.
	Length int
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

// Tokenize gives one token per whitespace-separated word (ids are word lengths), plus a BOS.
func (m *Model) Tokenize(text string) ([]int, error) {
	m.b.tokenizes.Add(1)
	for n := int64(len(text)); ; {
		if old := m.b.longest.Load(); n <= old || m.b.longest.CompareAndSwap(old, n) {
			break
		}
	}
	ids := []int{1}
	for _, w := range strings.Fields(text) {
		ids = append(ids, len(w)+2)
	}
	return ids, nil
}

// RenderChat renders "<|role|>content\n" per message and "<|assistant|>" to prompt an answer.
func (m *Model) RenderChat(msgs []server.ChatMessage, opts server.ChatOptions) (string, error) {
	var b strings.Builder
	for _, msg := range msgs {
		fmt.Fprintf(&b, "<|%s|> %s\n", msg.Role, msg.Content)
	}
	if opts.AddGenerationPrompt {
		b.WriteString("<|assistant|>")
	}
	return b.String(), nil
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
	n := len(Words)
	if m.b.Length > 0 {
		n = m.b.Length
	}
	for i := range n {
		w := Words[i%len(Words)]
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
		if err = emit(server.Token{ID: 100 + i%len(Words), Text: text}); err != nil {
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

// Close implements server.Model.
func (m *Model) Close() error {
	if m.closed.Swap(true) {
		return errors.New("fake: model closed twice")
	}
	m.b.closes.Add(1)
	m.b.active.Add(-1)
	return nil
}
