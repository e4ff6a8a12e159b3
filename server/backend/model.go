package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample/grammar"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// PlainTemplate describes the chat fallback for models with neither a chat template nor ChatML
// tokens (engine.PlainTemplate).
const PlainTemplate = engine.PlainTemplate

// Model is a loaded model. Up to parallel generations run at once, decoded together by one
// runner.Batcher (one target forward per step over the rows of all of them); a generation beyond
// that waits for a sequence (the server's scheduler normally keeps it from asking). An embedding
// runs alone, since its forwards use the target's one workspace outside the Batcher's steps: it
// waits for the running generations to end, and generations that come after it wait for it. All
// of that is one FIFO semaphore of parallel units (run): a generation takes one, an embedding
// (and Close) all of them, and a waiter whose context ends gives up at once.
//
// Each running generation has a sequence of its own (take): an idle one whose rows its prompt
// mostly continues (so a conversation reuses its rows whatever ran in between), else a new one
// while fewer than parallel exist, else the idle one sharing the longest prefix. A sequence and its drafting session are made on first need, so memory
// grows with the generations actually run at once, up to parallel caches.
//
// Invariant: between generations a sequence's drafting session holds context rows for exactly
// the sequence's cached tokens (runner.Generate settles the session before it returns), so the
// next request's Restore keeps the same prefix in both. The Model opened the sessions, so the
// Model closes them: when a failed generation's sequence is dropped, and on Close. The depth
// policy is the draft's (its controller learns across every request the model serves).
type Model struct {
	info     server.ModelInfo
	e        *engine.Engine
	tmpl     engine.Template // the model's, ChatML or the plain fallback (engine.Description)
	ctxLen   int
	draft    *engine.Draft // nil: plain decoding
	parallel int
	batcher  *runner.Batcher
	pool     runner.Pooling // how embeddings pool (engine.Description.Pooling)
	learned  learned        // where the draft's controller keeps its costs (zero: nowhere)

	// checkpoints says the target's cache cannot rewind (a hybrid target): prefix reuse goes
	// through state checkpoints, which a chat's history end is worth one of. Set at open.
	checkpoints bool

	// run has parallel units: each running generation holds one, an embedding or Close all.
	run *weighted

	mu     sync.Mutex
	idle   []*slot // sequences no generation uses, most recently used last
	made   int     // sequences alive (idle or running)
	last   runner.Stats
	closed bool
	onStep func(width int)

	vocabOnce sync.Once
	vocab     *grammar.Vocab // the grammar's view of the tokenizer, built on first use
}

// slot is one sequence with its drafting session (nil without a draft).
type slot struct {
	seq     *runner.Sequence
	session runner.Session
}

// open loads a described model and its draft; info is its listing (see info), whose Parallel
// (at least 1) is how many generations it decodes together.
func open(d *engine.Description, info server.ModelInfo, ctxCap int, depthCache string) (*Model, error) {
	e, err := d.Load(transformer.KeepDType)
	if err != nil {
		return nil, err
	}
	m := &Model{e: e, info: info, tmpl: d.Template, ctxLen: contextLength(d, ctxCap), parallel: max(info.Parallel, 1), pool: d.Pooling}
	m.run = newWeighted(m.parallel)
	if len(d.Drafts) > 0 {
		dr, err := e.OpenDraft(d.Drafts[0])
		if err != nil {
			return nil, fmt.Errorf("draft: %w", err)
		}
		m.draft = dr
		m.learned = openLearned(depthCache, d, dr)
	}
	m.checkpoints = !cache.CanRewind(e.Target.NewCache(1))
	m.batcher = runner.NewBatcher(e.Target)
	m.batcher.OnStep = m.step
	return m, nil
}

// ObserveSteps implements server.StepObserver: f is called after every decode step with the
// number of generations it ran.
func (m *Model) ObserveSteps(f func(width int)) {
	m.mu.Lock()
	m.onStep = f
	m.mu.Unlock()
}

func (m *Model) step(width int) {
	m.mu.Lock()
	f := m.onStep
	m.mu.Unlock()
	if f != nil {
		f(width)
	}
}

// take returns the sequence for a generation of prompt: among the idle ones whose shared prefix
// with the prompt is at least half the tokens they hold (a conversation going on keeps its
// prompt's rows even when its answer is tokenized differently the next turn) or half the prompt
// (a prompt asked again), the one sharing the longest prefix,
// the most recently used among equals; else a new one while fewer than parallel exist; else the
// idle one sharing the longest prefix. So a new conversation does not take over another's rows
// while there is room for its own.
func (m *Model) take(prompt []int) *slot {
	m.mu.Lock()
	defer m.mu.Unlock()
	best, shared := -1, 0
	for i, s := range m.idle {
		n := sharedPrefix(s.seq.Tokens(), prompt)
		if n > 0 && (2*n >= len(s.seq.Tokens()) || 2*n >= len(prompt)) && n >= shared {
			best, shared = i, n
		}
	}
	if best < 0 && m.made >= m.parallel {
		for i, s := range m.idle {
			if n := sharedPrefix(s.seq.Tokens(), prompt); best < 0 || n > shared {
				best, shared = i, n
			}
		}
	}
	if best >= 0 {
		s := m.idle[best]
		m.idle = append(m.idle[:best], m.idle[best+1:]...)
		return s
	}
	m.made++
	s := &slot{seq: runner.NewSequence(m.e.Target, m.ctxLen)}
	if m.draft != nil {
		s.session = m.draft.Drafter.Open(m.ctxLen)
	}
	return s
}

// put returns s to the idle sequences, or drops it (closing its session) when broken: after a
// failure that may have left the sequence and the session out of step, reusing nothing is the
// safe choice. An error closing a broken session only means there is nothing left worth keeping.
//
// Closing settles the session, which may run a draft forward: it runs under the Batcher's lock,
// so never beside a step of another generation (the draft's workspace is shared by every
// session), and outside mu, since a step holds that lock while it reports to step, which takes
// mu.
func (m *Model) put(s *slot, broken bool) {
	m.mu.Lock()
	drop := broken || m.closed
	if drop {
		m.made--
	} else {
		m.idle = append(m.idle, s)
	}
	b := m.batcher
	m.mu.Unlock()
	if !drop || s.session == nil {
		return
	}
	if b == nil { // closed: no generation runs
		_ = s.session.Close()
		return
	}
	b.Locked(func() { _ = s.session.Close() })
}

func sharedPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Info implements server.Model.
func (m *Model) Info() server.ModelInfo { return m.info }

// ContextLength implements server.Model.
func (m *Model) ContextLength() int { return m.ctxLen }

// Tokenize implements server.Model: BOS is added when the tokenizer asks for it.
func (m *Model) Tokenize(text string) ([]int, error) { return m.e.EncodePrompt(text) }

// MinPromptTokens is a lower bound on len(Tokenize(text)) that does not tokenize (see
// tokenizer.MinTokens); the server refuses by it first.
func (m *Model) MinPromptTokens(text string) int {
	if m.e.Tok == nil {
		return 0
	}
	n := tokenizer.MinTokens(m.e.Tok, text)
	if m.e.Tok.AddBOS() && m.e.Tok.BOS() >= 0 {
		n++
	}
	return n
}

// RenderChat implements server.Model with the model's template, ChatML, or PlainTemplate.
// Tools reach the template as dicts in the request's key order (json.RawMessage keeps it), and
// Think as enable_thinking.
func (m *Model) RenderChat(msgs []server.ChatMessage, opts server.ChatOptions) (string, error) {
	o := chat.Options{AddGenerationPrompt: opts.AddGenerationPrompt, EnableThinking: opts.Think}
	if len(opts.Tools) > 0 {
		o.Tools = make([]any, len(opts.Tools))
		for i, t := range opts.Tools {
			o.Tools[i] = t
		}
	}
	return m.tmpl.Render(chatMessages(msgs), o)
}

// chatMessages maps the server's messages onto the template's. A tool result's tool name is
// the message's name, as transformers' templates read it.
func chatMessages(msgs []server.ChatMessage) []chat.Message {
	cm := make([]chat.Message, len(msgs))
	for i, msg := range msgs {
		c := chat.Message{Role: msg.Role, Content: msg.Content, ReasoningContent: msg.Thinking,
			Name: msg.ToolName, ToolCallID: msg.ToolCallID}
		for _, tc := range msg.ToolCalls {
			c.ToolCalls = append(c.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		cm[i] = c
	}
	return cm
}

// Generate implements server.Model. The text of each token comes from a tokenizer.Stream that
// first sees the prompt's last token (so a SentencePiece space after BOS is treated as in
// running text); the runner applies the end-of-sequence ids and the request's stop strings, and
// text it held back (an incomplete character, a possible start of a stop string) is emitted as
// a final piece with ID -1. It runs on the model's Batcher with the other running generations.
func (m *Model) Generate(ctx context.Context, req server.GenRequest, emit func(server.Token) error) (server.GenResult, error) {
	if err := m.run.acquire(ctx, 1); err != nil {
		return server.GenResult{}, err
	}
	defer m.run.release(1)
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return server.GenResult{}, errors.New("backend: generate on a closed model")
	}
	if len(req.Prompt) == 0 {
		return server.GenResult{}, errors.New("backend: empty prompt")
	}
	cons, err := m.constraint(req)
	if err != nil {
		return server.GenResult{}, err
	}
	stream := tokenizer.NewStream(m.e.Tok)
	stream.Add(req.Prompt[len(req.Prompt)-1])
	stream.Flush()
	rr := runner.Request{
		Prompt: req.Prompt, Options: req.Options, Seeded: req.Seeded, MaxTokens: req.MaxTokens,
		Stop: m.e.Stop, StopStrings: req.Stop, Text: stream, Checkpoint: req.Checkpoint,
		Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs, Constraint: cons,
	}
	s := m.take(req.Prompt)
	if s.session != nil {
		rr.Session, rr.Depth = s.session, m.draft.Drafter.Depth()
	}
	var emitErr error
	st, err := m.batcher.Generate(ctx, s.seq, rr, func(t runner.Token) error {
		tok := server.Token{ID: t.ID, Text: t.Text}
		if req.Logprobs && t.ID >= 0 {
			tok.Logprob = m.logprob(t)
		}
		emitErr = emit(tok)
		return emitErr
	})
	// The runner failed (not a cancellation, not the server stopping us through emit): the
	// caches may be out of step, so the sequence is not reused.
	m.put(s, err != nil && ctx.Err() == nil && (emitErr == nil || !errors.Is(err, emitErr)))
	m.mu.Lock()
	m.last = st
	m.learned.saveEvery(saveInterval)
	m.mu.Unlock()
	return result(st, len(req.Prompt), s.session != nil), err
}

// logprob is t's log probabilities with each token's own bytes as its text (TokenBytes: a
// special token shows its name, a byte token its one byte), as ollama decodes a single id.
func (m *Model) logprob(t runner.Token) *server.Logprob {
	text := func(id int) string {
		if m.e.Tok == nil {
			return ""
		}
		return string(m.e.Tok.TokenBytes(id))
	}
	lp := &server.Logprob{TokenLogprob: server.TokenLogprob{Token: text(t.ID), Logprob: t.Logprob}}
	for _, a := range t.Top {
		lp.Top = append(lp.Top, server.TokenLogprob{Token: text(a.ID), Logprob: a.Logprob})
	}
	return lp
}

// result maps the runner's statistics. prompt_eval_count is the prompt's whole length, reused
// rows included, as ollama reports it for a cached prefix; PromptDuration covers only the rows
// actually processed.
func result(st runner.Stats, prompt int, drafted bool) server.GenResult {
	r := server.GenResult{
		PromptTokens:   prompt,
		ReusedTokens:   st.Reused,
		PromptDuration: st.PromptTime,
		EvalTokens:     st.DecodeTokens,
		EvalDuration:   st.DecodeTime,
		DoneReason:     "stop",
	}
	if st.Reason == runner.StopLength || st.Reason == runner.StopCapacity {
		r.DoneReason = "length"
	}
	if drafted {
		r.Speculation = &server.SpecStats{Tau: st.Tau(), Drafted: st.Drafted, Accepted: st.Accepted, Rounds: st.Rounds}
	}
	return r
}

// Embed implements server.Embedder: runner.Embed with the model's pooling, on a cache of its own
// (the sequences' rows, kept for the next generations' prefixes, are untouched). It runs alone
// (see Model): its forwards use the target's one workspace outside the Batcher's steps.
func (m *Model) Embed(ctx context.Context, tokens []int) ([]float32, error) {
	if err := m.run.acquire(ctx, m.parallel); err != nil {
		return nil, err
	}
	defer m.run.release(m.parallel)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Close holds run too, so the engine read here stays the model's until the embedding ends.
	m.mu.Lock()
	e := m.e
	m.mu.Unlock()
	if e == nil {
		return nil, errors.New("backend: embed on a closed model")
	}
	vocab := e.Target.Config().Vocab
	for i, t := range tokens {
		if t < 0 || t >= vocab {
			return nil, &server.RequestError{Status: http.StatusBadRequest, Param: "input",
				Msg: fmt.Sprintf("token %d of the input is %d, outside the vocabulary of %d", i, t, vocab)}
		}
	}
	return runner.Embed(ctx, e.Target, tokens, m.pool, 0)
}

// EmbedSuffix implements server.Embedder: the tokenizer's post-processor suffix (tokenizer.BPE's
// Suffix), which sentence-transformers' tokenizer call appends to every text.
func (m *Model) EmbedSuffix() []int {
	m.mu.Lock()
	e := m.e
	m.mu.Unlock()
	if e == nil { // closed
		return nil
	}
	if s, ok := e.Tok.(interface{ Suffix() []int }); ok {
		return s.Suffix()
	}
	return nil
}

// Learned is what the draft's adaptive controller has measured (zero without one), as the model
// would save it. Tests and diagnostics only, like LastStats.
func (m *Model) Learned() runner.Learned {
	if m.draft == nil || m.draft.Drafter.Depth().Controller() == nil {
		return runner.Learned{}
	}
	return m.draft.Drafter.Depth().Controller().Learned()
}

// WantsHistoryCheckpoint implements server.HistoryCheckpointer: a target whose cache cannot
// rewind (a hybrid one) resumes a chat's next turn from the checkpoint at its history's end.
func (m *Model) WantsHistoryCheckpoint() bool { return m.checkpoints }

// LastStats are the runner's statistics of the latest generation to end (Reused shows prefix
// reuse). Tests and diagnostics only.
func (m *Model) LastStats() runner.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Close implements server.Model: it waits for running generations and embeddings (the server
// closes a model only when none runs), closes every drafting session and drops the engine,
// caches and draft for the GC to free.
func (m *Model) Close() error {
	_ = m.run.acquire(context.Background(), m.parallel) // cannot fail: the context never ends
	defer m.run.release(m.parallel)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("backend: model closed twice")
	}
	m.closed = true
	m.learned.save()
	for _, s := range m.idle {
		if s.session != nil {
			_ = s.session.Close()
		}
	}
	m.idle, m.made = nil, 0
	m.e, m.draft, m.batcher, m.tmpl = nil, nil, nil, engine.Template{}
	// The weights live outside the Go heap (kernel's huge-page mappings), so dropping them does
	// not make a collection due: collect now so an unloaded model's memory goes back to the OS.
	kernel.FreeUnused()
	return nil
}
