package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// scriptedSession proposes, at round k, the sequence's true next tokens for its first
// accept[k] drafts and a wrong token after them, so at temperature 0 round k accepts exactly
// min(accept[k], n). Each proposal's q gives its draft probability qOf(i) (i 1-based), the rest
// to the next token id. Propose charges draftCost to the clock.
type scriptedSession struct {
	full      []int // prompt then the target's greedy continuation, by position
	accept    []int
	qOf       func(i int) float32
	vocab     int
	now       *time.Time
	draftCost time.Duration

	frontier, k int
	drafts      []int
	q           []sample.Distribution
}

func (s *scriptedSession) Taps() []int                   { return nil }
func (s *scriptedSession) Limit() int                    { return 8 }
func (s *scriptedSession) Restore(keep int) (int, error) { s.frontier = keep; return keep, nil }
func (s *scriptedSession) Settle() error                 { return nil }
func (s *scriptedSession) Close() error                  { return nil }
func (s *scriptedSession) Committed(tokens []int, _ [][]float32, position int) error {
	s.frontier = max(s.frontier, position+len(tokens))
	return nil
}

func (s *scriptedSession) Propose(current, n int, _ []int, _ Sampler) ([]int, []sample.Distribution, error) {
	*s.now = s.now.Add(s.draftCost)
	a := s.accept[s.k%len(s.accept)]
	s.k++
	s.drafts, s.q = s.drafts[:0], s.q[:0]
	for i := 1; i <= n; i++ {
		d := s.full[s.frontier+i]
		if i > a {
			d = (d + 1) % s.vocab
		}
		p := s.qOf(i)
		s.drafts = append(s.drafts, d)
		s.q = append(s.q, sample.Distribution{IDs: []int32{int32(d), int32((d + 1) % s.vocab)}, P: []float32{p, 1 - p}})
	}
	return s.drafts, s.q, nil
}

func cloneRound(r Round) Round {
	r.Proposed, r.Q, r.Emitted = slices.Clone(r.Proposed), slices.Clone(r.Q), slices.Clone(r.Emitted)
	return r
}

// traceRun generates with a scripted session under Fixed(depth), collecting the rounds the hook
// saw and the lines the TraceWriter wrote, which must decode to the same rounds.
func traceRun(t *testing.T, prompt []int, n, depth int, accept []int, opts sample.Options, stop ...int) (rounds []Round, out []int, full []int) {
	t.Helper()
	now := time.Unix(0, 0)
	ft := &fake.Target{Vocab: testVocab, Layers: 2}
	full = append(slices.Clone(prompt), ft.Greedy(prompt, n+16)...)
	s := &scriptedSession{full: full, accept: accept, qOf: func(i int) float32 { return 0.9 - 0.1*float32(i) }, vocab: testVocab, now: &now, draftCost: 3 * time.Millisecond}
	var buf bytes.Buffer
	tw := NewTraceWriter(&buf)
	tw.Run = "scripted"
	req := Request{Prompt: prompt, Options: opts, MaxTokens: n, Stop: stop, Session: s, Depth: Fixed(depth), Clock: func() time.Time { return now },
		Trace: func(r Round) { rounds = append(rounds, cloneRound(r)); tw.Round(r) }}
	out, _ = runTarget(t, NewSequence(timedTarget{ft, &now}, 512), req)
	if err := tw.Err(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	i := 0
	for ; sc.Scan(); i++ {
		var line struct {
			Run string `json:"run"`
			Round
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %d %q: %v", i, sc.Text(), err)
		}
		if i >= len(rounds) || line.Run != "scripted" || fmt.Sprint(line.Round) != fmt.Sprint(rounds[i]) {
			t.Fatalf("line %d %s does not match the round the hook saw", i, sc.Text())
		}
	}
	if i != len(rounds) {
		t.Fatalf("%d lines for %d rounds", i, len(rounds))
	}
	return rounds, out, full
}

// TestTraceGreedyRoundByRound checks every line of a greedy trace against the script: where
// each round stands, how deep it asked, what was proposed and accepted, what it emitted, and the
// draft and verify times the fake clock charged (3 ms a proposal; 1 ms + 0.3 ms a verified row).
func TestTraceGreedyRoundByRound(t *testing.T) {
	prompt := []int{1, 2, 3, 4}
	const n, depth = 40, 4
	accept := []int{0, 4, 2, 1, 3, 6}
	rounds, out, full := traceRun(t, prompt, n, depth, accept, sample.Options{})
	if !slices.Equal(out, full[len(prompt):len(prompt)+n]) {
		t.Fatalf("output %v is not the greedy continuation %v", out, full[len(prompt):len(prompt)+n])
	}
	pos, emitted := len(prompt)-1, 0
	for k, r := range rounds {
		wantDepth := min(depth, n-emitted-1)
		a := min(accept[k%len(accept)], wantDepth)
		var proposed []int
		for i := 1; i <= wantDepth; i++ {
			d := full[pos+i]
			if i > accept[k%len(accept)] {
				d = (d + 1) % testVocab
			}
			proposed = append(proposed, d)
		}
		want := Round{Position: pos, Depth: wantDepth, Proposed: proposed, Accepted: a, Emitted: full[pos+1 : pos+a+2],
			DraftNS: (3 * time.Millisecond).Nanoseconds(), VerifyNS: (time.Millisecond + time.Duration(wantDepth+1)*300*time.Microsecond).Nanoseconds()}
		if wantDepth == 0 {
			want.Proposed, want.DraftNS = []int{}, 0
		}
		if fmt.Sprint(r) != fmt.Sprint(want) || r.Q != nil {
			t.Fatalf("round %d:\n got %+v\nwant %+v", k, r, want)
		}
		pos += a + 1
		emitted += a + 1
	}
	if emitted != n {
		t.Fatalf("rounds emitted %d tokens, the request %d", emitted, n)
	}
}

// TestTraceSampledReportsQ: above temperature 0 each proposal's q of its token is in the trace,
// and the rounds' emitted tokens are exactly the output, accepted drafts first.
func TestTraceSampledReportsQ(t *testing.T) {
	prompt := []int{5, 6, 7}
	const n = 50
	rounds, out, _ := traceRun(t, prompt, n, 3, []int{3, 1, 0, 2}, sample.Options{Temperature: 1, Seed: 11})
	var all []int
	for k, r := range rounds {
		if len(r.Q) != len(r.Proposed) {
			t.Fatalf("round %d: %d q for %d proposals", k, len(r.Q), len(r.Proposed))
		}
		for i, q := range r.Q {
			if want := 0.9 - 0.1*float32(i+1); q != want {
				t.Fatalf("round %d: q of proposal %d is %v, the script's %v", k, i+1, q, want)
			}
		}
		if r.Accepted > len(r.Proposed) || len(r.Emitted) != r.Accepted+1 || !slices.Equal(r.Emitted[:r.Accepted], r.Proposed[:r.Accepted]) {
			t.Fatalf("round %d: %+v: emitted must be the accepted drafts and one more token", k, r)
		}
		all = append(all, r.Emitted...)
	}
	if !slices.Equal(all, out) {
		t.Fatalf("the trace emitted %v, the output was %v", all, out)
	}
}

// TestTraceStopToken: a round that meets a stop token among its accepted drafts emits, and
// traces, the tokens before it only; the trace's emitted tokens are the output.
func TestTraceStopToken(t *testing.T) {
	prompt := []int{1, 2, 3, 4}
	ft := &fake.Target{Vocab: testVocab, Layers: 2}
	cont := ft.Greedy(prompt, 40)
	k := 12
	for slices.Contains(cont[:k], cont[k]) {
		k++
	}
	rounds, out, _ := traceRun(t, prompt, 40, 5, []int{5}, sample.Options{}, cont[k])
	if !slices.Equal(out, cont[:k]) {
		t.Fatalf("output %v, want the continuation before the stop token %d: %v", out, cont[k], cont[:k])
	}
	var all []int
	for _, r := range rounds {
		all = append(all, r.Emitted...)
	}
	if !slices.Equal(all, out) {
		t.Fatalf("the trace emitted %v, the output was %v", all, out)
	}
	last := rounds[len(rounds)-1]
	if last.Accepted < len(last.Emitted) {
		t.Fatalf("last round %+v: the stop token should sit among its accepted drafts", last)
	}
}
