package runner

import (
	"fmt"
	"time"
)

// StopReason says why generation ended.
type StopReason string

const (
	StopToken    StopReason = "stop"     // a stop token was produced (it is not emitted)
	StopString   StopReason = "string"   // a stop string appeared in the text (it is not shown)
	StopLength   StopReason = "length"   // MaxTokens were emitted
	StopCapacity StopReason = "capacity" // the target cache is full
	StopCanceled StopReason = "canceled" // the context was canceled or emit returned an error
)

// Stats describe one request, or many added together.
type Stats struct {
	Requests     int
	PromptTokens int // prompt tokens processed (reused rows excluded)
	Reused       int // prompt rows kept from the previous request
	PromptTime   time.Duration
	DecodeTokens int // tokens emitted
	DecodeTime   time.Duration

	Rounds   int   // decode rounds, plain ones included
	Drafted  int   // draft tokens sent to verification
	Accepted int   // of which accepted
	Depths   []int // Depths[n]: rounds that verified n drafts
	// DraftedAt[i] and AcceptedAt[i] count rounds that drafted / accepted position i+1.
	DraftedAt, AcceptedAt []int

	DraftTime, VerifyTime, OtherTime time.Duration

	Reason StopReason
}

// Tau is the mean acceptance length: accepted drafts + 1 per round.
func (s Stats) Tau() float64 {
	if s.Rounds == 0 {
		return 0
	}
	return float64(s.Accepted+s.Rounds) / float64(s.Rounds)
}

// AcceptanceAt is the rate at which position i (1-based) was accepted when drafted.
func (s Stats) AcceptanceAt(i int) float64 {
	if i < 1 || i > len(s.DraftedAt) || s.DraftedAt[i-1] == 0 {
		return 0
	}
	return float64(s.AcceptedAt[i-1]) / float64(s.DraftedAt[i-1])
}

// DecodeRate is emitted tokens per second of decoding.
func (s Stats) DecodeRate() float64 {
	if s.DecodeTime <= 0 {
		return 0
	}
	return float64(s.DecodeTokens) / s.DecodeTime.Seconds()
}

// Add accumulates o into s (Reason becomes o's).
func (s *Stats) Add(o Stats) {
	s.Requests += o.Requests
	s.PromptTokens += o.PromptTokens
	s.Reused += o.Reused
	s.PromptTime += o.PromptTime
	s.DecodeTokens += o.DecodeTokens
	s.DecodeTime += o.DecodeTime
	s.Rounds += o.Rounds
	s.Drafted += o.Drafted
	s.Accepted += o.Accepted
	s.Depths = addCounts(s.Depths, o.Depths)
	s.DraftedAt = addCounts(s.DraftedAt, o.DraftedAt)
	s.AcceptedAt = addCounts(s.AcceptedAt, o.AcceptedAt)
	s.DraftTime += o.DraftTime
	s.VerifyTime += o.VerifyTime
	s.OtherTime += o.OtherTime
	s.Reason = o.Reason
}

func addCounts(dst, src []int) []int {
	for len(dst) < len(src) {
		dst = append(dst, 0)
	}
	for i, v := range src {
		dst[i] += v
	}
	return dst
}

// round records one decode round that verified n drafts and accepted a of them.
func (s *Stats) round(n, a int) {
	s.Rounds++
	s.Drafted += n
	s.Accepted += a
	for len(s.Depths) <= n {
		s.Depths = append(s.Depths, 0)
	}
	s.Depths[n]++
	for len(s.DraftedAt) < n {
		s.DraftedAt = append(s.DraftedAt, 0)
		s.AcceptedAt = append(s.AcceptedAt, 0)
	}
	for i := range n {
		s.DraftedAt[i]++
		if i < a {
			s.AcceptedAt[i]++
		}
	}
}

func (s Stats) String() string {
	return fmt.Sprintf("prompt %d tok (%d reused) in %v; decode %d tok in %v (%.1f tok/s); rounds %d, tau %.2f, accepted %d/%d; draft %v, verify %v, other %v; %s",
		s.PromptTokens, s.Reused, s.PromptTime, s.DecodeTokens, s.DecodeTime, s.DecodeRate(),
		s.Rounds, s.Tau(), s.Accepted, s.Drafted, s.DraftTime, s.VerifyTime, s.OtherTime, s.Reason)
}
