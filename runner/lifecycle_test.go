package runner

import (
	"errors"
	"slices"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// recordingDrafter wraps a Drafter and counts the lifecycle calls of every session it opens.
type recordingDrafter struct {
	Drafter
	opens, restores, settles, closes int
	proposed                         []int // n of every Propose
}

func (r *recordingDrafter) Open(capacity int) Session {
	r.opens++
	return &recordingSession{Session: r.Drafter.Open(capacity), r: r}
}

type recordingSession struct {
	Session
	r *recordingDrafter
}

func (s *recordingSession) Restore(keep int) (int, error) {
	s.r.restores++
	return s.Session.Restore(keep)
}
func (s *recordingSession) Settle() error { s.r.settles++; return s.Session.Settle() }
func (s *recordingSession) Close() error  { s.r.closes++; return s.Session.Close() }
func (s *recordingSession) Propose(current, n int, history []int, smp Sampler) ([]int, []sample.Distribution, error) {
	s.r.proposed = append(s.r.proposed, n)
	return s.Session.Propose(current, n, history, smp)
}

// TestWhoeverOpensCloses narrates a conversation of three requests on one sequence: the caller
// opens one session; each Generate restores it once, settles it once at the end (never before a
// proposal, whose forward writes the pending context itself) and never closes it, even when the
// request ends with an error; the caller's one Close ends it, and the draft cache is then level with the target.
func TestWhoeverOpensCloses(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	rec := &recordingDrafter{Drafter: NewBlockDrafter(&fake.Draft{Block: 4, Mask: testVocab - 1, Layers: []int{1}, Vocab: testVocab, Logits: perfectDraft(target, 0.3, 2)})}
	seq := NewSequence(target, 256)
	s := rec.Open(256)
	prompt := []int{1, 2, 3}
	for i := range 3 {
		out, _ := run(t, target, seq, Request{Prompt: prompt, MaxTokens: 8, Session: s, Depth: Fixed(3)})
		prompt = append(append(prompt, out...), 4+i)
	}
	// A request stopped by its consumer still settles the session.
	stop := errors.New("consumer gone")
	if _, err := Generate(t.Context(), seq, Request{Prompt: prompt, MaxTokens: 8, Session: s, Depth: Fixed(3), Clock: fakeClock()}, func(Token) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Generate: %v, want the consumer's error", err)
	}
	if rec.opens != 1 || rec.restores != 4 || rec.closes != 0 {
		t.Fatalf("opens %d, restores %d, closes %d; want 1 open, one restore per request (4), no close by Generate", rec.opens, rec.restores, rec.closes)
	}
	if want := 4; rec.settles != want {
		t.Fatalf("%d settles for %d proposals in 4 requests, want %d (one per request end)", rec.settles, len(rec.proposed), want)
	}
	dc := s.(*recordingSession).Session.(*BlockSession).Cache().(*fake.Cache)
	if dc.Offset() != seq.Cache().Offset() {
		t.Fatalf("between requests the draft cache is at %d, the target at %d: want level", dc.Offset(), seq.Cache().Offset())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.closes != 1 {
		t.Fatalf("%d closes, want the opener's one", rec.closes)
	}
	// A closed session cannot be handed to another request by mistake.
	if _, err := Generate(t.Context(), seq, Request{Prompt: prompt, MaxTokens: 2, Session: s}, nil); err == nil {
		t.Fatal("Generate accepted a closed session")
	}
}

// TestDepthPolicyWrapsAnyDrafter: a fixed policy asks every proposing round for the same depth
// (capped only by what may still be emitted), an adaptive one follows and trains its
// controller, and Fixed(0) never proposes, whichever drafter the policy wraps. Greedy output
// equals plain output under every policy.
func TestDepthPolicyWrapsAnyDrafter(t *testing.T) {
	target := &fake.Target{Vocab: 5, Layers: 2, Seed: 4}
	prompt := []int{1, 2, 3, 4, 0}
	const maxTokens = 40
	want, _ := run(t, target, nil, Request{Prompt: prompt, MaxTokens: maxTokens})
	drafters := map[string]func() Drafter{
		"dflash": func() Drafter {
			return NewBlockDrafter(&fake.Draft{Block: 8, Mask: 4, Layers: []int{0}, Vocab: 5})
		},
		"dflash2": func() Drafter {
			return NewSelectorDrafter(&scriptSelector{Draft: &fake.Draft{Block: 8, Mask: 4, Layers: []int{0}, Vocab: 5}, edges: hashEdges(5)})
		},
		"oracle": func() Drafter {
			return &OracleDrafter{Tokens: append(slices.Clone(prompt), want...), Limit: 7, Noise: 0.3, Vocab: 5, Seed: 1}
		},
	}
	for name, mk := range drafters {
		t.Run(name, func(t *testing.T) {
			gen := func(p Depth) (*recordingDrafter, Stats) {
				rec := &recordingDrafter{Drafter: WithDepth(mk(), p)}
				s := rec.Open(256)
				defer s.Close()
				got, st := run(t, target, nil, Request{Prompt: prompt, MaxTokens: maxTokens, Session: s, Depth: rec.Depth()})
				if !slices.Equal(got, want) {
					t.Fatalf("policy %v: got %v, want plain %v", p, got, want)
				}
				return rec, st
			}

			rec, st := gen(Fixed(2))
			if len(rec.proposed) == 0 {
				t.Fatal("a fixed depth of 2 never proposed")
			}
			for i, n := range rec.proposed {
				if n != 2 && !(i == len(rec.proposed)-1 && n == 1) {
					t.Fatalf("fixed 2: round %d asked for %d (all: %v)", i, n, rec.proposed)
				}
			}
			if st.Rounds <= 1 {
				t.Fatalf("%d rounds", st.Rounds)
			}

			ctl := &Controller{}
			rec, st = gen(Adaptive(ctl))
			if _, ok := ctl.Cost(0); !ok {
				t.Fatal("the adaptive policy's controller never measured plain decoding")
			}
			if st.Rounds == len(rec.proposed) {
				t.Fatalf("all %d adaptive rounds proposed: the controller's first pick (plain) was not followed", st.Rounds)
			}

			rec, st = gen(Fixed(0))
			if len(rec.proposed) != 0 || st.Drafted != 0 {
				t.Fatalf("Fixed(0) proposed %v", rec.proposed)
			}
		})
	}
}

// TestDepthValues: the zero Depth is adaptive (a fresh controller per request), Fixed and
// Adaptive say what they are, and a fixed depth is capped by the round's limit.
func TestDepthValues(t *testing.T) {
	var zero Depth
	if _, ok := zero.IsFixed(); ok || zero.String() != "adaptive" || zero.orFresh().Controller() == nil {
		t.Fatalf("zero Depth: %v, want adaptive with a fresh controller", zero)
	}
	if n, ok := Fixed(5).IsFixed(); !ok || n != 5 || Fixed(5).Controller() != nil || Fixed(5).String() != "fixed 5" {
		t.Fatalf("Fixed(5) = %v", Fixed(5))
	}
	if n, _ := Fixed(-3).IsFixed(); n != 0 {
		t.Fatalf("Fixed(-3) drafts %d, want 0", n)
	}
	if got := Fixed(5).choose(3); got != 3 {
		t.Fatalf("Fixed(5) under limit 3 chose %d", got)
	}
	ctl := &Controller{}
	if Adaptive(ctl).Controller() != ctl || Adaptive(nil).Controller() == nil {
		t.Fatal("Adaptive does not keep its controller")
	}
}
