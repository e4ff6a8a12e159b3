package runner

import (
	"encoding/json"
	"io"
	"sync"
)

// Round is one decode round as a trace reports it: what the draft was asked for and proposed,
// what verification kept, and where the round's time went. It is how a user sees why a draft
// underperforms (which positions it misses, whether drafting or verification dominates) and how
// a test compares a draft's proposals against a reference, round by round.
type Round struct {
	Position int   `json:"position"` // target position of the round's current token (rows before it are committed)
	Depth    int   `json:"depth"`    // drafts asked for: the policy's choice within the round's limits
	Proposed []int `json:"proposed"` // the drafts the session returned (fewer than Depth when it could not draft them all)
	// Q holds, when sampling (T > 0), each proposal's probability under its own proposal
	// distribution, q_i(d_i); nil at temperature 0, where drafts are argmaxes.
	Q        []float32 `json:"q,omitempty"`
	Accepted int       `json:"accepted"` // drafts kept by verification
	// Emitted are the tokens the round handed to the output: the accepted drafts and the
	// target's own token, without a stop token and nothing after a stop string.
	Emitted  []int `json:"emitted"`
	DraftNS  int64 `json:"draft_ns"`  // time in Propose (it includes the draft's pending context write)
	VerifyNS int64 `json:"verify_ns"` // time in the target's verification forward
}

// TraceWriter writes rounds as JSON lines, one per round: the format of `dflash run --trace`.
// Its Round method is a Request.Trace. A write error is kept (Err) and later rounds are dropped,
// so a full disk never ends a generation. It is safe for concurrent use.
type TraceWriter struct {
	// Run, when set, is written with each line as "run", to tell apart the requests of one file
	// (a benchmark's depths, prompts and repetitions).
	Run string

	mu  sync.Mutex
	enc *json.Encoder
	err error
}

// NewTraceWriter writes rounds to w.
func NewTraceWriter(w io.Writer) *TraceWriter { return &TraceWriter{enc: json.NewEncoder(w)} }

type traceLine struct {
	Run string `json:"run,omitempty"`
	Round
}

// Round writes r as one line.
func (t *TraceWriter) Round(r Round) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.err = t.enc.Encode(traceLine{Run: t.Run, Round: r})
}

// Err is the first write error, if any.
func (t *TraceWriter) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
