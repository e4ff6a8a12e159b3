package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
)

// BatchPrefillChunk is how many prompt rows one prefill forward of a batched generation runs
// while other generations share its target: every step waits for its slowest member, so a long
// prefill forward would stall the running streams for all of it. A generation alone on its
// Batcher prefills in its request's chunks (DefaultPrefillChunk). Chunking changes no bit.
const BatchPrefillChunk = 32

// BatchRows is the verify rows per sequence and step that an adaptive depth policy aims at when
// several sequences are decoded together: width sequences each verify 1+BatchDepth(width) rows.
// Speculation pays because a forward of a few rows costs about what one row costs (the weights
// are read once); a batch of sequences already uses that, so a draft's rows are worth less the
// wider the batch, and past BatchRows/2 sequences a round drafts nothing.
const BatchRows = 8

// BatchDepth is the most tokens a round of a sequence batched with width-1 others drafts when
// its policy is adaptive: BatchRows/width - 1, at least 0 (plain decoding). Below it the
// controller's own choice stands (a draft it has learned to distrust stays unused). A fixed
// policy (and a seeded request's, Depth.Seeded) keeps its depth whatever the width; at width 1
// the adaptive controller chooses as it does alone.
func BatchDepth(width int) int { return max(0, BatchRows/max(width, 1)-1) }

// emitGrace is how long a generation's emit may take before the other generations' steps stop
// waiting for it: a client that does not read must not stall the streams batched with it. An
// emit that hands a token to a buffer takes microseconds, so steps normally wait for every
// sequence and stay as wide as the batch.
const emitGrace = 5 * time.Millisecond

// Batcher decodes the generations of several sequences of one target together: each step runs
// one target forward over the rows every running generation contributes (its current token, or
// the current token and its drafts, or a prefill chunk), then each generation accepts and
// samples from its own rows as Generate does alone, since the loop is Generate's own. A
// generation joins at the next step and leaves when it ends (a cancelled one at the step after
// its cancellation), freeing its place at once.
//
// A target that implements model.BatchTarget (the dense transformer, and model/qwen35's hybrid,
// whose batched forward carries each sequence's recurrent state and row snapshots) runs each
// step as one forward (ForwardBatch), whose rows' bits do not depend on their batch mates, so a
// generation's output is the same alone and batched. Any other target runs a step's sequences
// one forward each: they still take turns step by step, without the shared weight reads.
//
// Draft forwards (a drafting session's Propose, Committed, Settle) and target forwards are
// serialised by the Batcher: both models keep one workspace each, and the draft's one is shared
// by every session of its drafter.
type Batcher struct {
	target model.Target
	batch  model.BatchTarget // nil: one forward per sequence
	// OnStep, when set before the first Generate, is called after every step with its width
	// (the sequences it ran), for metrics. It must not call back into the Batcher.
	OnStep func(width int)
	// EmitGrace, when set before the first Generate, replaces emitGrace (tests that must know
	// every step's width set it long).
	EmitGrace time.Duration

	// run serialises every forward on the model pair (target steps, draft sessions).
	run sync.Mutex
	// ctl serialises a shared adaptive controller's Choose and Observe.
	ctl sync.Mutex

	mu       sync.Mutex
	lanes    []*lane // joined generations, in join order
	present  int     // joined lanes not away (see lane.away)
	waiting  int     // lanes with a forward submitted for the next step
	stepping bool
	paused   bool
	step     []*lane
	items    []model.BatchItem
}

// NewBatcher returns a Batcher for the generations of t's sequences.
func NewBatcher(t model.Target) *Batcher {
	b := &Batcher{target: t}
	b.batch, _ = t.(model.BatchTarget)
	return b
}

// Width is how many generations are running on b.
func (b *Batcher) Width() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lanes)
}

// lane is one generation's place in a Batcher. Invariant (under Batcher.mu): waiting lanes have
// req set and will get exactly one laneResult on done; a lane is away only while its generation
// is inside an emit that has outlasted emitGrace.
type lane struct {
	b       *Batcher
	seq     *Sequence
	req     model.Request
	waiting bool
	// emitting is set while the generation is in emit; away once that emit has taken longer
	// than emitGrace, when the steps stop counting the lane (present excludes it).
	emitting, away bool
	// emits counts the lane's emits: each emit's grace timer carries the count at its start, so
	// a timer that expired during an earlier emit but whose function got the lock only after a
	// later emit began (Stop cannot recall a function already started) changes nothing.
	emits uint64
	done  chan laneResult
	// logits and taps hold a copy of the lane's result when its step ran one forward per
	// sequence: the next sequence's forward reuses the target's workspace.
	logits []float32
	taps   [][]float32
}

type laneResult struct {
	res model.Result
	err error
}

// Generate is the package's Generate for seq, its target forwards run in b's steps with those
// of the other generations on b. seq must be a sequence of b's target that no other running
// generation uses. A drafting session in req is serialised with every forward on b (see
// Batcher), and its depth follows the batch's width (BatchDepth).
func (b *Batcher) Generate(ctx context.Context, seq *Sequence, req Request, emit func(Token) error) (Stats, error) {
	if seq.target != b.target {
		return Stats{Requests: 1}, errors.New("generate: the sequence is not of the batcher's target")
	}
	l, err := b.join(seq)
	if err != nil {
		return Stats{Requests: 1}, err
	}
	defer b.leave(l)
	if req.Session != nil {
		req.Session = &lockedSession{s: req.Session, mu: &b.run}
	}
	return generate(ctx, seq, req, emit, l)
}

func (b *Batcher) join(seq *Sequence) (*lane, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lanes {
		if l.seq == seq {
			return nil, errors.New("generate: the sequence is already generating on this batcher")
		}
	}
	l := &lane{b: b, seq: seq, done: make(chan laneResult, 1)}
	b.lanes = append(b.lanes, l)
	b.present++
	return l, nil
}

// leave ends l's place; a step that waited only for l runs now, on its own goroutine so that the
// leaving generation returns at once.
func (b *Batcher) leave(l *lane) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l.emitting = false
	if !l.away {
		b.present--
	}
	l.away = false
	b.lanes = slices.DeleteFunc(b.lanes, func(x *lane) bool { return x == l })
	b.kickLocked()
}

// kickLocked starts the next step on a goroutine of its own when every present lane waits.
func (b *Batcher) kickLocked() {
	if b.ready() {
		b.stepping = true
		go func() {
			b.mu.Lock()
			b.stepping = false
			b.stepLocked()
			b.mu.Unlock()
		}()
	}
}

func (b *Batcher) ready() bool {
	return !b.stepping && !b.paused && b.waiting > 0 && b.waiting == b.present
}

// Pause keeps steps from starting until Resume; generations join and submit meanwhile. A test
// that must know every step's width pauses, starts its generations, waits for Width, resumes.
func (b *Batcher) Pause() {
	b.mu.Lock()
	b.paused = true
	b.mu.Unlock()
}

// Resume lets steps start again, the next one at once if every generation waits for it.
func (b *Batcher) Resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.paused = false
	b.kickLocked()
}

// Locked runs f while no forward runs on b's model pair (it holds the lock b's steps and
// drafting sessions take), for work outside a generation that uses a model's workspace: closing
// a drafting session settles it, a draft forward on the workspace every session of its drafter
// shares. f must not call into b.
func (b *Batcher) Locked(f func()) {
	b.run.Lock()
	defer b.run.Unlock()
	f()
}

// forward submits l's rows for the next step and waits for their result. The step runs when
// every present lane has submitted; the lane that completes the set runs it.
func (l *lane) forward(r model.Request) (model.Result, error) {
	b := l.b
	b.mu.Lock()
	l.req, l.waiting = r, true
	b.waiting++
	b.stepLocked()
	b.mu.Unlock()
	out := <-l.done
	return out.res, out.err
}

// stepLocked runs steps while every present lane waits; b.mu is released during each forward.
// After a step the lane that ran it has not consumed its own result yet, so it is present and
// not waiting: the next step cannot start before that result is read, and the target's
// workspace, which the results alias, is not overwritten under it.
func (b *Batcher) stepLocked() {
	for b.ready() {
		b.stepping = true
		b.step = b.step[:0]
		for _, l := range b.lanes {
			if l.waiting {
				b.step = append(b.step, l)
				l.waiting = false
			}
		}
		b.waiting = 0
		step := b.step
		b.mu.Unlock()
		b.runStep(step)
		clear(step) // the lanes may end before the next step
		b.mu.Lock()
		b.stepping = false
	}
}

// runStep runs one step's forwards and hands each lane its result (after OnStep, so that a
// generation's end follows the report of its last step).
func (b *Batcher) runStep(step []*lane) {
	b.run.Lock()
	defer b.run.Unlock()
	if b.OnStep != nil {
		b.OnStep(len(step))
	}
	if b.batch != nil && len(step) > 1 {
		b.items = b.items[:0]
		for _, l := range step {
			b.items = append(b.items, model.BatchItem{Cache: l.seq.cache, Request: l.req})
		}
		res, err := b.batch.ForwardBatch(b.items)
		clear(b.items)
		if err == nil {
			for i, l := range step {
				l.req = model.Request{}
				l.done <- laneResult{res: res[i]}
			}
			return
		}
		// A refused batch changed no cache: each sequence runs alone and gets its own answer,
		// so one generation's bad rows cannot fail the others.
	}
	for _, l := range step {
		res, err := b.target.Forward(l.seq.cache, l.req)
		if err == nil && len(step) > 1 {
			res = l.keep(res)
		}
		l.req = model.Request{}
		l.done <- laneResult{res: res, err: err}
	}
}

// keep copies res into the lane's own buffers.
func (l *lane) keep(res model.Result) model.Result {
	l.logits = append(l.logits[:0], res.Logits...)
	for len(l.taps) < len(res.Taps) {
		l.taps = append(l.taps, nil)
	}
	for i, t := range res.Taps {
		l.taps[i] = append(l.taps[i][:0], t...)
	}
	return model.Result{Logits: l.logits, Taps: l.taps[:len(res.Taps)]}
}

// emit calls emit with piece. An emit that outlasts emitGrace makes the lane away: steps then
// run without it until the emit returns.
func (l *lane) emit(emit func(Token) error, piece Token) error {
	b := l.b
	b.mu.Lock()
	l.emitting = true
	l.emits++
	n := l.emits
	b.mu.Unlock()
	grace := emitGrace
	if b.EmitGrace > 0 {
		grace = b.EmitGrace
	}
	timer := afterFunc(grace, func() { l.outlasted(n) })
	err := emit(piece)
	timer.Stop()
	b.mu.Lock()
	l.emitting = false
	if l.away {
		l.away = false
		b.present++
	}
	b.mu.Unlock()
	return err
}

// outlasted runs when emit number n has taken emitGrace: if that emit is still the lane's
// current one, the lane goes away, and a step that waited only for it runs now, on this timer's
// goroutine.
func (l *lane) outlasted(n uint64) {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if !l.emitting || l.away || l.emits != n {
		return
	}
	l.away = true
	b.present--
	b.stepLocked()
}

// depth is the next round's depth for a generation of policy p on b, at most limit, and whether
// the round's outcome should train p's controller. Alone on b, p chooses and learns as without a
// Batcher. Batched, an adaptive p's choice is capped at BatchDepth(width) and learns nothing: a
// batched round's time says little about what the depth costs alone, which is what the
// controller models. A fixed p (a seeded request's too) keeps its depth.
func (b *Batcher) depth(p Depth, limit int) (n int, learn bool) {
	w := b.Width()
	b.ctl.Lock()
	defer b.ctl.Unlock()
	n = p.choose(limit)
	if _, fixed := p.IsFixed(); !fixed && w > 1 {
		return min(n, BatchDepth(w)), false
	}
	return n, true
}

func (b *Batcher) observe(p Depth, n, accepted int, took time.Duration) {
	b.ctl.Lock()
	defer b.ctl.Unlock()
	p.observe(n, accepted, took)
}

// lockedSession serialises a session's calls with every forward on its Batcher: its draft
// forwards share the draft's workspace with every other session of the drafter.
type lockedSession struct {
	s  Session
	mu *sync.Mutex
}

func (l *lockedSession) Taps() []int { return l.s.Taps() }
func (l *lockedSession) Limit() int  { return l.s.Limit() }

func (l *lockedSession) Restore(keep int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Restore(keep)
}

func (l *lockedSession) Committed(tokens []int, taps [][]float32, position int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Committed(tokens, taps, position)
}

func (l *lockedSession) Propose(current, n int, history []int, s Sampler) ([]int, []sample.Distribution, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Propose(current, n, history, s)
}

func (l *lockedSession) Settle() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Settle()
}

func (l *lockedSession) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Close()
}

// graceTimer is the part of *time.Timer an emit uses.
type graceTimer interface{ Stop() bool }

// afterFunc is time.AfterFunc; a test replaces it to run a grace timer's function when it
// chooses. One timer per emit costs about a microsecond, next to a forward's milliseconds.
var afterFunc = func(d time.Duration, f func()) graceTimer { return time.AfterFunc(d, f) }
