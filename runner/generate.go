package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/runner/stop"
	"github.com/dflash/dflash/sample"
)

// DefaultPrefillChunk is how many prompt rows one prefill forward processes.
const DefaultPrefillChunk = 512

// Sequence is a target, its cache and the tokens whose rows the cache holds. A caller keeps it
// between requests: a new prompt that shares a prefix with those tokens reuses their rows.
//
// Invariant: tokens[i] is the token of cache row i, and len(tokens) == cache.Offset(). The last
// emitted token of a request is never in the cache (it would be the next round's current token).
type Sequence struct {
	target   model.Target
	cache    cache.Cache
	capacity int
	tokens   []int
	// checkpoints, on a cache that cannot rewind (cache.Checkpointer), are its states at
	// prefill chunk boundaries (every policy.Every rows) and at the ends of recent prompts'
	// prefills, so a new prompt that diverges from the rows held resumes from the longest one
	// within its shared prefix. Invariants: sorted by offset, all distinct, every one at an
	// offset <= len(tokens) whose rows below it have not changed since it was saved, at most
	// policy.Max of them.
	checkpoints []*cache.Checkpoint
	policy      CheckpointPolicy
}

// CheckpointPolicy says where a sequence whose cache cannot rewind (a hybrid target's recurrent
// state) saves state checkpoints for prompt-prefix reuse, and how many it keeps. Each checkpoint
// is one whole recurrent state (cache.Hybrid.StateBytes: about 19 MiB for Qwen3.5-0.8B, 50 MiB
// for 4B and 9B), allocated on its first save and reused after, so Max bounds the memory.
//
// A prompt's prefill is cut at every multiple of Every (absolute positions) and a checkpoint
// saved at each cut and at the end of the prompt (its last token excluded: that one is the first
// round's current token). When a save would exceed Max, one older checkpoint is evicted: the one
// whose removal leaves the smallest gap between its neighbours (offset 0 before the first), ties
// going to the later one; the newest is never evicted. The kept ones thus spread over the rows
// held, spacing widening as the rows grow, with the first (a shared system prompt or document)
// and the newest (a regenerated answer) kept.
type CheckpointPolicy struct {
	Every int // rows between prefill checkpoints; <= 0 saves only at prompt ends
	Max   int // checkpoints kept at most; <= 0 keeps none (a diverging prompt starts over)
}

// DefaultCheckpoints is the policy a new sequence starts with: a checkpoint every prefill chunk
// and at most four, 200 MiB per sequence for Qwen3.5-4B.
var DefaultCheckpoints = CheckpointPolicy{Every: DefaultPrefillChunk, Max: 4}

// NewSequence allocates a target cache for capacity positions.
func NewSequence(t model.Target, capacity int) *Sequence {
	return &Sequence{target: t, cache: t.NewCache(capacity), capacity: capacity, policy: DefaultCheckpoints}
}

// SetCheckpoints replaces the checkpoint policy, dropping the checkpoints past the new Max
// (those evicted as the policy would have).
func (s *Sequence) SetCheckpoints(p CheckpointPolicy) {
	s.policy = p
	for len(s.checkpoints) > max(p.Max, 0) {
		s.evict()
	}
}

// Checkpoints lists the offsets of the checkpoints held, ascending.
func (s *Sequence) Checkpoints() []int {
	offs := make([]int, len(s.checkpoints))
	for i, cp := range s.checkpoints {
		offs[i] = cp.Offset()
	}
	return offs
}

// CheckpointBytes is the memory the sequence's checkpoints hold.
func (s *Sequence) CheckpointBytes() int64 {
	var n int64
	for _, cp := range s.checkpoints {
		n += cp.Bytes()
	}
	return n
}

// Tokens are the tokens whose rows the cache holds; the slice must not be modified.
func (s *Sequence) Tokens() []int { return s.tokens }

// Cache is the target cache.
func (s *Sequence) Cache() cache.Cache { return s.cache }

// Capacity is the number of positions the cache holds.
func (s *Sequence) Capacity() int { return s.capacity }

// Request is one generation.
type Request struct {
	Prompt    []int // at least one token
	Options   sample.Options
	MaxTokens int   // tokens to emit at most; <= 0 means until a stop token or a full cache
	Stop      []int // tokens that end generation and are not emitted (usually the target's EOS ids)
	// StopStrings end generation at the first occurrence of any of them in the output's text;
	// neither the string nor anything after it is shown. They need Text.
	StopStrings []string
	// Text, when set, turns emitted tokens into the text each Token shows (a tokenizer.Stream,
	// primed by the caller with whatever precedes the output).
	Text Detokenizer
	// Logprobs asks for each emitted token's log probability under the target (Token.Logprob)
	// and its TopLogprobs most likely alternatives (Token.Top, at most sample.MaxTopLogprobs):
	// sample.Logprobs of the logits row that decided the token. With a drafter that row is the
	// verification forward's, which a row's independence from the forward's other rows makes
	// bitwise the row plain decoding computes: the values do not depend on speculation.
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, restricts the output to what it allows (a grammar: structured
	// output). Every row that decides a token is masked first (disallowed logits -Inf), so plain
	// decoding samples the target renormalised over the allowed tokens, and verification keeps a
	// draft only as that masked target would (see verifier): the output, speculative or not, is
	// distributed as the constrained target and greedy output is the constrained argmax. Logprobs
	// stay the model's own (the raw rows). Generation ends where the constraint is complete and
	// allows no token (a stop token ends it otherwise, as always).
	Constraint Constraint

	// Session, when set, makes decoding speculative; nil decodes plainly. The caller opened it
	// (Drafter.Open) and closes it: Generate restores it to the prompt's shared prefix at the
	// start and settles it at the end, so between requests it is level with the sequence.
	Session Session
	// Depth picks each round's draft length, usually the session's drafter's Depth(). The zero
	// Depth is adaptive with a fresh controller for this request.
	Depth Depth
	// Seeded says the caller chose Options.Seed to reproduce the output: the same request then
	// gives the same tokens every time, with a drafter too, because an adaptive Depth is replaced
	// by a fixed one (Depth.Seeded explains why that is needed). A coupled request
	// (Options.Coupled) reproduces at any depth, so its Depth is kept as given.
	Seeded bool

	// Trace, when set, is called once per decode round, after the round's tokens were emitted
	// (TraceWriter.Round writes it as a JSON line). The Round's slices are valid only during the
	// call.
	Trace func(Round)

	// Checkpoint, when inside the prompt's prefill (after the rows reused, before its last
	// token), asks a sequence that keeps checkpoints (CheckpointPolicy) to save one after that
	// many prompt rows as well. A chat caller gives the rows of the conversation before the
	// generation prompt: the next turn surely shares them, while a template may render this
	// turn's reply otherwise than the generation prompt began it (without its think block, say),
	// so the checkpoint at this prompt's end would lie past where the next prompt diverges.
	Checkpoint int

	PrefillChunk int              // rows per prefill forward (default DefaultPrefillChunk)
	Clock        func() time.Time // nil: time.Now; tests inject a fake clock
}

// Constraint restricts what a request may emit, state by state (sample/grammar's Constraint is
// one). States are values: Advance returns a new state and leaves its argument usable, so the
// verifier can follow drafts tentatively. Allowed's budget is how many tokens may still be
// emitted, the one it masks included (0: no limit), so that a constraint can steer the output
// to completion before MaxTokens cuts it; plain and speculative decoding pass the same budget
// for the same token. The mask is the caller's to read, not modify; a Constraint shared by
// generations batched together must be safe for concurrent use.
type Constraint interface {
	Start() any
	Allowed(state any, budget int) *sample.Mask
	Advance(state any, token int) (any, bool)
	Complete(state any) bool
}

// Token is one piece of the output: a generated token and the text it shows (empty without
// Request.Text). Text that was held back (the detokenizer's incomplete character, the tail that
// might have begun a stop string) is shown, when the output ends without a stop string, by a last
// piece with ID -1.
type Token struct {
	ID   int
	Text string
	// Logprob and Top are set when Request.Logprobs asks (Top only with TopLogprobs > 0); a
	// held-back piece (ID -1) has neither. Top is the caller's to keep.
	Logprob float64
	Top     []sample.Alt
}

// Detokenizer turns ids into text as they come; tokenizer.Stream is one.
type Detokenizer interface {
	Add(id int) string
	Flush() string
}

// Generate decodes req on seq, calling emit with every generated token in order. All of a
// request's stops are applied here, through one stop.Matcher: a stop token ends the output where
// it stands, even among accepted drafts; a stop string ends it in the emitted text, holding back
// what might begin one. An error from emit, or ctx being canceled (checked once per round),
// stops generation early; the error is returned with the statistics so far. Whatever happens,
// seq stays consistent (its tokens are its cache rows) and the session is settled (never closed:
// its opener closes it).
func Generate(ctx context.Context, seq *Sequence, req Request, emit func(Token) error) (st Stats, err error) {
	return generate(ctx, seq, req, emit, nil)
}

// generate is Generate, its target forwards run through l's Batcher steps when l is not nil.
func generate(ctx context.Context, seq *Sequence, req Request, emit func(Token) error, l *lane) (st Stats, err error) {
	st.Requests = 1
	if len(req.Prompt) == 0 {
		return st, errors.New("generate: empty prompt")
	}
	if len(req.Prompt) > seq.capacity {
		return st, fmt.Errorf("generate: prompt of %d tokens exceeds the context of %d", len(req.Prompt), seq.capacity)
	}
	if err := req.Options.Validate(); err != nil {
		return st, fmt.Errorf("generate: %w", err)
	}
	stops := stop.New(req.Stop, req.StopStrings)
	if stops.HasStrings() && req.Text == nil {
		return st, errors.New("generate: stop strings need Request.Text to see the output's text")
	}
	vocab := seq.target.Config().Vocab
	for i, t := range req.Prompt {
		if t < 0 || t >= vocab {
			return st, fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary of %d", i, t, vocab)
		}
	}
	g := &generation{seq: seq, req: req, emit: emit, now: req.Clock, st: &st, vocab: vocab, stops: stops, lane: l}
	if g.now == nil {
		g.now = time.Now
	}
	g.depth = req.Depth.orFresh()
	if req.Seeded && !req.Options.Race() {
		// Coupled output does not depend on the depth schedule, so a seeded coupled request
		// keeps its adaptive depth and still reproduces.
		g.depth = g.depth.Seeded()
	}
	g.v.s = NewSampler(req.Options, vocab)
	if d := req.Session; d != nil {
		g.taps = d.Taps()
		defer func() {
			if serr := d.Settle(); serr != nil && err == nil {
				err = fmt.Errorf("generate: settle drafting session: %w", serr)
			}
		}()
	}
	if err := g.prefill(ctx); err != nil {
		return st, err
	}
	if err = g.decode(ctx); err != nil || req.Text == nil || stops.Stopped() {
		return st, err
	}
	// The output ended without a stop string: show what was held back.
	show, _ := stops.Text(req.Text.Flush())
	if show += stops.Flush(); show != "" && emit != nil {
		if err := g.emitToken(Token{ID: -1, Text: show}); err != nil {
			st.Reason = StopCanceled
			return st, err
		}
	}
	return st, nil
}

// generation is one request in flight.
type generation struct {
	seq   *Sequence
	req   Request
	emit  func(Token) error
	stops *stop.Matcher
	now   func() time.Time
	st    *Stats
	depth Depth
	vocab int
	taps  []int
	v     verifier
	lane  *lane // the generation's place in a Batcher, nil alone

	// res is the last target forward's result, valid until the next forward on the target: a
	// batched generation's until it next enters an emit (the other lanes may step meanwhile).
	res     model.Result
	tapRows [][]float32
	// context is the time the round spent in the drafter's Committed (which may write draft
	// context): every kept row costs that write whatever the depth, so it is kept out of the
	// round times the depth controller compares (see decode).
	context time.Duration
	all     []int // prompt and emitted tokens: the history penalties see
	cstate  any   // the constraint's state after the emitted tokens
	block   []int
	traceQ  []float32
	// logprobs are the round's emitted tokens with their logprobs, when the request asks.
	logprobs []Token
}

// prefill keeps the longest prefix the cache (and the drafter) already hold, minus at least one
// token so that the prompt's last token is left to be the first round's current token, and
// processes the rest in chunks.
func (g *generation) prefill(ctx context.Context) error {
	seq, prompt := g.seq, g.req.Prompt
	keep := 0
	for keep < len(seq.tokens) && keep < len(prompt)-1 && seq.tokens[keep] == prompt[keep] {
		keep++
	}
	// A cache that cannot rewind (a recurrent state, cache.Hybrid) reuses all its rows when they
	// are a prefix of the new prompt (no rewind needed), else resumes from its longest checkpoint
	// within the shared prefix, else starts over (Rewind(0)); the drafter must hold exactly as
	// many rows, or both start over.
	rewinds := cache.CanRewind(seq.cache)
	var resume *cache.Checkpoint
	if !rewinds && keep != len(seq.tokens) {
		keep, resume = 0, nil
		for _, cp := range seq.checkpoints {
			if o := cp.Offset(); o > keep && o <= len(seq.tokens) && o <= len(prompt)-1 && slices.Equal(seq.tokens[:o], prompt[:o]) {
				keep, resume = o, cp
			}
		}
	}
	if d := g.req.Session; d != nil {
		held, err := d.Restore(keep)
		if err != nil {
			return fmt.Errorf("generate: restore drafting session to %d rows: %w", keep, err)
		}
		if held > keep || held < 0 {
			return fmt.Errorf("generate: drafting session restored %d rows of %d", held, keep)
		}
		if !rewinds && held != keep {
			if held, err = d.Restore(0); err != nil || held != 0 {
				return fmt.Errorf("generate: restore drafting session to 0 rows: %d held, %v", held, err)
			}
			resume = nil
		}
		keep = held
	}
	if resume != nil && keep == resume.Offset() {
		if err := seq.cache.(cache.Checkpointer).RestoreCheckpoint(resume); err != nil {
			return fmt.Errorf("generate: resume from the checkpoint at %d: %w", keep, err)
		}
	} else if err := seq.cache.Rewind(keep); err != nil {
		return fmt.Errorf("generate: reuse %d prompt rows: %w", keep, err)
	}
	seq.checkpoints = slices.DeleteFunc(seq.checkpoints, func(cp *cache.Checkpoint) bool { return cp.Offset() > keep })
	seq.tokens = seq.tokens[:keep]
	g.st.Reused = keep

	start := g.now()
	chunk := g.req.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	keeps := seq.keepsCheckpoints()
	every := 0
	if keeps {
		every = max(seq.policy.Every, 0)
	}
	rest := prompt[keep : len(prompt)-1]
	if k, ok := seq.cache.(cache.RowSnapshots); ok && !cache.CanRewind(seq.cache) && len(rest) > 0 {
		// Prefill keeps every row it forwards: a cache that records row snapshots for verify
		// rounds need not record these.
		k.SetKeepAll(true)
		defer k.SetKeepAll(false)
	}
	for len(rest) > 0 {
		if err := ctx.Err(); err != nil {
			g.st.Reason = StopCanceled
			return err
		}
		n := min(chunk, len(rest))
		off := seq.cache.Offset()
		// Cut the chunk at the next multiple of every and at the asked checkpoint, where
		// checkpoints are saved.
		if every > 0 {
			n = min(n, every-off%every)
		}
		if at := g.req.Checkpoint; keeps && at > off {
			n = min(n, at-off)
		}
		if g.lane != nil && g.lane.b.Width() > 1 {
			n = min(n, BatchPrefillChunk) // running streams keep flowing between the chunks
		}
		if err := g.forward(rest[:n], model.LogitsNone, n); err != nil {
			return fmt.Errorf("generate: prefill at %d: %w", seq.cache.Offset(), err)
		}
		g.st.PromptTokens += n
		rest = rest[n:]
		if off = seq.cache.Offset(); keeps && (every > 0 && off%every == 0 || off == g.req.Checkpoint) {
			seq.checkpoint()
		}
	}
	g.st.PromptTime = g.now().Sub(start)
	g.all = append(g.all[:0], prompt...)
	seq.checkpoint()
	return nil
}

// keepsCheckpoints reports whether the sequence saves checkpoints: its cache cannot rewind but
// is a cache.Checkpointer, and the policy keeps some.
func (s *Sequence) keepsCheckpoints() bool {
	_, ok := s.cache.(cache.Checkpointer)
	return ok && !cache.CanRewind(s.cache) && s.policy.Max > 0
}

// checkpoint saves the state at the cache's offset, when the cache cannot rewind but keeps
// checkpoints and none is saved there yet, evicting one as CheckpointPolicy says when the
// sequence holds Max already (its memory is reused for the new one).
func (s *Sequence) checkpoint() {
	off := s.cache.Offset()
	if !s.keepsCheckpoints() || off == 0 {
		return
	}
	c := s.cache.(cache.Checkpointer)
	if n := len(s.checkpoints); n > 0 && s.checkpoints[n-1].Offset() >= off {
		// Saves go in ascending order along the rows held (the prefill drops every checkpoint
		// past the rows it keeps), so one at or past off must be at off itself.
		return
	}
	var cp *cache.Checkpoint
	if len(s.checkpoints) >= s.policy.Max {
		cp = s.evict()
	}
	if cp == nil {
		cp = new(cache.Checkpoint)
	}
	c.SaveCheckpoint(cp)
	s.checkpoints = append(s.checkpoints, cp)
}

// evict removes the checkpoint CheckpointPolicy says goes first and returns it.
func (s *Sequence) evict() *cache.Checkpoint {
	cps := s.checkpoints
	if len(cps) == 0 {
		return nil
	}
	// The newest (last) is never evicted while another is left.
	victim, gap := len(cps)-1, -1
	for i := 0; i < len(cps)-1; i++ {
		prev := 0
		if i > 0 {
			prev = cps[i-1].Offset()
		}
		if g := cps[i+1].Offset() - prev; gap < 0 || g <= gap {
			victim, gap = i, g
		}
	}
	cp := cps[victim]
	s.checkpoints = slices.Delete(cps, victim, victim+1)
	return cp
}

// forward runs the target over tokens at the cache's offset, keeps the first kept rows (rewinding
// the rest away) and reports them to the drafter.
func (g *generation) forward(tokens []int, rows model.LogitRows, kept int) error {
	if err := g.run(tokens, rows); err != nil {
		return err
	}
	return g.keep(tokens, kept)
}

// run is one target forward over tokens; its result stays in g.res.
func (g *generation) run(tokens []int, rows model.LogitRows) error {
	r := model.Request{Tokens: tokens, Logits: rows, Taps: g.taps}
	var res model.Result
	var err error
	if g.lane != nil {
		res, err = g.lane.forward(r)
	} else {
		res, err = g.seq.target.Forward(g.seq.cache, r)
	}
	if err != nil {
		return err
	}
	if len(res.Taps) != len(g.taps) {
		return fmt.Errorf("target returned %d taps, %d asked", len(res.Taps), len(g.taps))
	}
	want := g.vocab
	if rows == model.LogitsAll {
		want *= len(tokens)
	}
	if rows != model.LogitsNone && len(res.Logits) < want {
		return fmt.Errorf("target returned %d logits, %d expected", len(res.Logits), want)
	}
	g.res = res
	return nil
}

// keep rewinds the rows of the last forward over tokens beyond kept and commits the kept ones.
func (g *generation) keep(tokens []int, kept int) error {
	seq := g.seq
	position := seq.cache.Offset() - len(tokens)
	if position != len(seq.tokens) {
		return fmt.Errorf("target cache at %d after %d rows, expected %d", seq.cache.Offset(), len(tokens), len(seq.tokens)+len(tokens))
	}
	if kept < len(tokens) {
		if err := dropRows(seq.cache, position, kept); err != nil {
			return err
		}
	}
	seq.tokens = append(seq.tokens, tokens[:kept]...)
	if d := g.req.Session; d != nil {
		taps := g.tapRows[:0]
		for _, t := range g.res.Taps {
			hidden := len(t) / len(tokens)
			taps = append(taps, t[:kept*hidden])
		}
		g.tapRows = taps
		t := g.now()
		err := d.Committed(tokens[:kept], taps, position)
		g.context += g.now().Sub(t)
		if err != nil {
			return fmt.Errorf("drafter: %w", err)
		}
	}
	return nil
}

// snapshots makes sure a verify of rows rows on a cache that cannot rewind records the state
// after each row (cache.RowSnapshots), so that keep can go back to the last accepted one. The
// slots are allocated once per sequence, sized for the session's deepest round (Limit()+1);
// prefill forwards record nothing (RowSnapshots.SetKeepAll), as every row of them is kept.
func (g *generation) snapshots(rows int) error {
	c := g.seq.cache
	if cache.CanRewind(c) {
		return nil
	}
	rs, ok := c.(cache.RowSnapshots)
	if !ok {
		return fmt.Errorf("target cache %T can neither rewind nor snapshot rows: it cannot verify drafts", c)
	}
	if rs.SnapshotRows() < rows {
		rs.EnableSnapshots(max(rows, g.req.Session.Limit()+1))
	}
	return nil
}

// dropRows cuts the cache back to the first kept rows of a forward that began at position:
// Rewind where the cache can, RestoreRow(kept-1) of the recorded forward where it cannot. Either
// way the cache is then bitwise what forwarding those kept rows alone leaves.
func dropRows(c cache.Cache, position, kept int) error {
	if cache.CanRewind(c) {
		if err := c.Rewind(position + kept); err != nil {
			return fmt.Errorf("rewind to %d: %w", position+kept, err)
		}
		return nil
	}
	rs, ok := c.(cache.RowSnapshots)
	if !ok {
		return fmt.Errorf("keep %d rows at %d: cache %T can neither rewind nor restore a row", kept, position, c)
	}
	if kept < 1 {
		return fmt.Errorf("keep %d rows at %d: a cache that cannot rewind keeps at least one row of a forward", kept, position)
	}
	if err := rs.RestoreRow(kept - 1); err != nil {
		return fmt.Errorf("restore row %d at %d: %w", kept-1, position, err)
	}
	return nil
}

// decode runs rounds until a stop token, MaxTokens, a full cache, cancellation or an error. A
// round processes [current, d_1..d_n] in one target forward (n = 0 is plain decoding), emits the
// accepted drafts and one token from the target, and keeps the rows [current, accepted drafts]:
// the last emitted token becomes the next round's current token and is not in the cache yet.
func (g *generation) decode(ctx context.Context) error {
	seq, st, d := g.seq, g.st, g.req.Session
	current := g.req.Prompt[len(g.req.Prompt)-1]
	start := g.now()
	defer func() { st.DecodeTime = g.now().Sub(start) }()
	cons := g.req.Constraint
	if cons != nil {
		g.cstate = cons.Start()
	}
	for {
		if err := ctx.Err(); err != nil {
			st.Reason = StopCanceled
			return err
		}
		if cons != nil && cons.Allowed(g.cstate, g.budget(0)).Count == 0 {
			if cons.Complete(g.cstate) {
				st.Reason = StopToken // the output is whole and nothing may follow
				return nil
			}
			return fmt.Errorf("generate: the constraint allows no token at %d", seq.cache.Offset())
		}
		if g.req.MaxTokens > 0 && st.DecodeTokens >= g.req.MaxTokens {
			st.Reason = StopLength
			return nil
		}
		room := seq.capacity - seq.cache.Offset()
		if room < 1 {
			st.Reason = StopCapacity
			return nil
		}
		// A round emits up to n+1 tokens into n+1 new rows; it never drafts past what may be
		// emitted or stored.
		limit := room - 1
		if g.req.MaxTokens > 0 {
			limit = min(limit, g.req.MaxTokens-st.DecodeTokens-1)
		}
		n, learn := 0, false
		if d != nil {
			n, learn = g.chooseDepth(min(limit, d.Limit()))
		}

		g.context = 0
		position := seq.cache.Offset()
		t0 := g.now()
		var drafts []int
		var q []sample.Distribution
		if n > 0 {
			// One draft forward per drafting round: Propose writes the context rows pending
			// since the last proposal (the last round's kept rows, or a plain stretch's) with its
			// block (DFLASH.md section 3). Their write is part of the round's time: in steady
			// state every drafting round pays for its predecessor's kept rows.
			var err error
			if cons != nil {
				// The proposals follow the committed output's state, as row 0 of the
				// verification does.
				if g.v.s.drafts == nil {
					g.v.s.drafts = &draftMask{c: cons}
				}
				dm := g.v.s.drafts
				dm.state, dm.budget, dm.slot = g.cstate, g.budget(0), 0
			}
			drafts, q, err = d.Propose(current, n, g.all, g.v.s)
			if err != nil {
				return fmt.Errorf("generate: propose at %d: %w", seq.cache.Offset(), err)
			}
			if len(drafts) > n || len(q) != len(drafts) {
				return fmt.Errorf("generate: drafter returned %d drafts and %d proposals for %d asked", len(drafts), len(q), n)
			}
			for _, t := range drafts {
				if t < 0 || t >= g.vocab {
					return fmt.Errorf("generate: drafter proposed token %d outside the vocabulary of %d", t, g.vocab)
				}
			}
		}
		t1 := g.now()
		g.block = append(append(g.block[:0], current), drafts...)
		if len(drafts) > 0 {
			if err := g.snapshots(len(g.block)); err != nil {
				return fmt.Errorf("generate: verify at %d: %w", seq.cache.Offset(), err)
			}
		}
		rows := model.LogitsLast
		if len(drafts) > 0 {
			rows = model.LogitsAll
		}
		if err := g.run(g.block, rows); err != nil {
			return fmt.Errorf("generate: verify at %d: %w", seq.cache.Offset(), err)
		}
		t2 := g.now()
		out, accepted := g.v.decide(g.res.Logits, g.vocab, drafts, q, g.all, cons, g.cstate, g.budget(0))

		// A stop token ends the output where it stands, even among accepted drafts; the rows
		// after it are dropped with the rejected ones. The stop token's own row is never kept
		// (it is the round's last token, like any other): on a recurrent cache the state keeps
		// the rows up to the token before it, restored from that row's snapshot, so an accepted
		// EOS never folds into the state.
		end := slices.IndexFunc(out, g.stops.Token)
		kept := len(out)
		if end >= 0 {
			kept = end + 1
		}
		if err := g.keep(g.block, kept); err != nil {
			return fmt.Errorf("generate: keep %d rows at %d: %w", kept, seq.cache.Offset(), err)
		}
		emitted := out[:kept]
		if end >= 0 {
			emitted = out[:end]
		}
		current = out[kept-1]
		t3 := g.now()
		var round Round
		if g.req.Trace != nil {
			round = g.round(position, n, drafts, q, accepted, t1.Sub(t0), t2.Sub(t1))
		}
		st.round(len(drafts), accepted)
		st.DraftTime += t1.Sub(t0)
		st.VerifyTime += t2.Sub(t1)
		st.OtherTime += t3.Sub(t2)
		if learn {
			g.observeDepth(len(drafts), accepted, t3.Sub(t0)-g.context)
		}
		if g.req.Logprobs {
			// Row i of the forward decided emitted[i]: the accepted drafts' rows, then the row of
			// the correction or bonus token (a plain step's only row). All of them are read
			// before the first emit: g.res aliases the target's workspace, which a batched
			// lane's slow emit lets the other lanes' steps overwrite (lane.emit).
			g.logprobs = g.logprobs[:0]
			for i, t := range emitted {
				lp, top := sample.Logprobs(g.res.Logits[i*g.vocab:(i+1)*g.vocab], t, g.req.TopLogprobs, nil)
				g.logprobs = append(g.logprobs, Token{ID: t, Logprob: lp, Top: top})
			}
		}
		for i, t := range emitted {
			if cons != nil {
				var ok bool
				if g.cstate, ok = cons.Advance(g.cstate, t); !ok {
					return fmt.Errorf("generate: token %d emitted at %d is not allowed by the constraint", t, position+i)
				}
			}
			g.all = append(g.all, t)
			st.DecodeTokens++
			piece := Token{ID: t}
			if g.req.Logprobs {
				piece = g.logprobs[i]
			}
			hit := false
			if g.req.Text != nil {
				piece.Text, hit = g.stops.Text(g.req.Text.Add(t))
			}
			if g.emit != nil {
				if err := g.emitToken(piece); err != nil {
					g.trace(round, emitted[:i+1])
					st.Reason = StopCanceled
					return err
				}
			}
			if hit {
				g.trace(round, emitted[:i+1])
				// The rows of the round's later tokens stay in the cache: they are the sequence's
				// tokens all the same, and a next request that shares them reuses them.
				st.Reason = StopString
				return nil
			}
		}
		g.trace(round, emitted)
		if end >= 0 {
			st.Reason = StopToken
			return nil
		}
	}
}

// budget is how many tokens may still be emitted once i more are (0: no limit).
func (g *generation) budget(i int) int {
	if g.req.MaxTokens <= 0 {
		return 0
	}
	return max(g.req.MaxTokens-g.st.DecodeTokens-i, 1)
}

// chooseDepth is the next round's depth, at most limit, and whether its outcome trains the
// policy: alone, the policy's choice; batched, the Batcher's (Batcher.depth).
func (g *generation) chooseDepth(limit int) (int, bool) {
	if g.lane != nil {
		return g.lane.b.depth(g.depth, limit)
	}
	return g.depth.choose(limit), true
}

func (g *generation) observeDepth(n, accepted int, took time.Duration) {
	if g.lane != nil {
		g.lane.b.observe(g.depth, n, accepted, took)
		return
	}
	g.depth.observe(n, accepted, took)
}

// emitToken hands piece to the request's emit (through the lane, batched: see lane.emit).
func (g *generation) emitToken(piece Token) error {
	if g.lane != nil {
		return g.lane.emit(g.emit, piece)
	}
	return g.emit(piece)
}

// round is the trace of a round at position that asked for n drafts.
func (g *generation) round(position, n int, drafts []int, q []sample.Distribution, accepted int, draft, verify time.Duration) Round {
	r := Round{Position: position, Depth: n, Proposed: drafts, Accepted: accepted, DraftNS: draft.Nanoseconds(), VerifyNS: verify.Nanoseconds()}
	if !g.v.s.Greedy && len(drafts) > 0 {
		g.traceQ = g.traceQ[:0]
		for i, d := range drafts {
			g.traceQ = append(g.traceQ, q[i].Prob(d))
		}
		r.Q = g.traceQ
	}
	return r
}

// trace reports round with the tokens it emitted, when the request asked for a trace.
func (g *generation) trace(r Round, emitted []int) {
	if g.req.Trace == nil {
		return
	}
	// Empty lists, not null, so a line always has the same shape.
	r.Emitted = emitted
	if r.Emitted == nil {
		r.Emitted = []int{}
	}
	if r.Proposed == nil {
		r.Proposed = []int{}
	}
	g.req.Trace(r)
}
