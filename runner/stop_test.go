package runner

import (
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
)

// letters is a Detokenizer that shows token id as the letter 'a'+id.
type letters struct{}

func (letters) Add(id int) string { return string(rune('a' + id)) }
func (letters) Flush() string     { return "" }

// collect runs req and returns the emitted ids (the final held-back piece, ID -1, excluded) and
// the text shown.
func collect(t *testing.T, target *fake.Target, req Request) ([]int, string, Stats) {
	t.Helper()
	var ids []int
	var text strings.Builder
	req.Clock = fakeClock()
	st, err := Generate(t.Context(), NewSequence(target, 256), req, func(tok Token) error {
		if tok.ID >= 0 {
			ids = append(ids, tok.ID)
		}
		text.WriteString(tok.Text)
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return ids, text.String(), st
}

// TestStopStringsInTheLoop: a stop string split across two tokens ends the output where the
// text shows it, with plain and speculative decoding alike (a speculative round may have
// accepted tokens past it: they are not emitted); the earlier of a stop token and a stop string
// wins; a held-back tail is shown when the output ends for another reason.
func TestStopStringsInTheLoop(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	prompt := []int{1, 2, 3}
	greedy := target.Greedy(prompt, 40)
	var full strings.Builder
	for _, id := range greedy {
		full.WriteString(letters{}.Add(id))
	}
	// The letters of greedy tokens 9 and 10: the first occurrence may be earlier; the matcher
	// must find that one.
	stopAt := full.String()[9:11]
	cut := strings.Index(full.String(), stopAt)
	want := full.String()[:cut]

	oracle := &OracleDrafter{Tokens: append(slices.Clone(prompt), greedy...), Limit: 8}
	for _, c := range []struct {
		name string
		req  Request
	}{
		{"plain", Request{}},
		{"oracle", Request{Session: oracle.Open(256), Depth: oracle.Depth()}},
		{"dflash", Request{Session: NewBlockSession(&fake.Draft{Block: 5, Mask: testVocab - 1, Layers: []int{0}, Vocab: testVocab, Logits: perfectDraft(target, 0.2, 3)}, 256)}},
	} {
		req := c.req
		req.Prompt, req.MaxTokens, req.StopStrings, req.Text = prompt, 40, []string{"zz", stopAt}, letters{}
		ids, text, st := collect(t, target, req)
		if text != want || st.Reason != StopString {
			t.Fatalf("%s: shown %q (%s), want %q then the stop string", c.name, text, st.Reason, want)
		}
		// The token that completes the stop string is emitted (its text is not shown); none after.
		if !slices.Equal(ids, greedy[:cut+2]) {
			t.Fatalf("%s: emitted %v, want %v", c.name, ids, greedy[:cut+2])
		}
	}

	// A stop token before the stop string ends the output first: the token is not emitted, and
	// nothing of the stop string was shown.
	ids, text, st := collect(t, target, Request{Prompt: prompt, MaxTokens: 40, Stop: []int{greedy[2]}, StopStrings: []string{stopAt}, Text: letters{}})
	k := slices.Index(greedy, greedy[2])
	if st.Reason != StopToken || !slices.Equal(ids, greedy[:k]) || text != full.String()[:k] {
		t.Fatalf("stop token first: %v %q (%s), want %v", ids, text, st.Reason, greedy[:k])
	}

	// A tail that might have begun a stop string is held back, then shown with ID -1 when the
	// output ends by its length instead.
	tail := full.String()[4:5] + "#"
	ids, text, st = collect(t, target, Request{Prompt: prompt, MaxTokens: 5, StopStrings: []string{tail}, Text: letters{}})
	if st.Reason != StopLength || text != full.String()[:5] || len(ids) != 5 {
		t.Fatalf("held tail: %v %q (%s), want the 5 letters %q in full", ids, text, st.Reason, full.String()[:5])
	}

	// Stop strings need the text.
	if _, err := Generate(t.Context(), NewSequence(target, 64), Request{Prompt: prompt, StopStrings: []string{"a"}}, nil); err == nil {
		t.Fatal("stop strings without Text were accepted")
	}
}
