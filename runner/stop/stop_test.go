package stop

import (
	"strings"
	"testing"
)

// feed passes pieces through m as a stream would and returns what was shown, whether a stop
// string ended it, and the text shown after each piece.
func feed(m *Matcher, pieces ...string) (shown string, stopped bool, steps []string) {
	var b strings.Builder
	for _, p := range pieces {
		s, hit := m.Text(p)
		b.WriteString(s)
		steps = append(steps, s)
		if hit {
			return b.String(), true, steps
		}
	}
	rest := m.Flush()
	b.WriteString(rest)
	return b.String(), false, append(steps, rest)
}

func TestStopStringSplitAcrossTokens(t *testing.T) {
	m := New(nil, []string{"</answer>"})
	shown, stopped, steps := feed(m, "The sum is 4", "</an", "swer", "> and more")
	if !stopped || shown != "The sum is 4" {
		t.Fatalf("shown %q, stopped %v; want the text before the stop string", shown, stopped)
	}
	// "</an" and "swer" could still be the stop string: nothing of them is shown early.
	if steps[1] != "" || steps[2] != "" {
		t.Fatalf("steps %q: a prefix of the stop string was shown before it was ruled out", steps)
	}
}

func TestHeldTextReleasedWhenRuledOut(t *testing.T) {
	m := New(nil, []string{"STOP"})
	// "ST" may begin STOP and is held; "ART" rules it out, so "START" is shown whole.
	if s, _ := m.Text("go ST"); s != "go " {
		t.Fatalf("first piece shows %q, want %q (ST held)", s, "go ")
	}
	if s, _ := m.Text("ART"); s != "START" {
		t.Fatalf("second piece shows %q, want the released START", s)
	}
	// A tail still held when the output ends for another reason is released by Flush.
	if s, _ := m.Text(" S"); s != " " {
		t.Fatalf("third piece shows %q, want a space (S held)", s)
	}
	if rest := m.Flush(); rest != "S" {
		t.Fatalf("Flush released %q, want S", rest)
	}
}

func TestStopAtTheVeryStart(t *testing.T) {
	m := New(nil, []string{"\n\n"})
	shown, stopped, _ := feed(m, "\n\nHello")
	if !stopped || shown != "" {
		t.Fatalf("shown %q, stopped %v; want nothing shown", shown, stopped)
	}
	// After a stop nothing more is shown, and Flush has nothing either.
	if s, hit := m.Text("more"); s != "" || !hit || m.Flush() != "" || !m.Stopped() {
		t.Fatalf("after the stop: shown %q, stopped %v", s, hit)
	}
}

func TestSeveralStopsEarliestWins(t *testing.T) {
	// "User:" completes first in the stream, but "Bob" starts earlier in the same piece: the
	// earliest occurrence ends the output.
	m := New(nil, []string{"User:", "Bob"})
	shown, stopped, _ := feed(m, "Hi Bob. User:", " x")
	if !stopped || shown != "Hi " {
		t.Fatalf("shown %q, stopped %v; want %q", shown, stopped, "Hi ")
	}
	// The longest held prefix of any stop string is kept back.
	m = New(nil, []string{"abc", "xyzw"})
	if s, _ := m.Text("1 xy"); s != "1 " {
		t.Fatalf("shows %q, want %q (xy held for xyzw)", s, "1 ")
	}
	if s, hit := m.Text("zw!"); s != "" || !hit {
		t.Fatalf("shows %q, stopped %v; want xyzw found", s, hit)
	}
}

func TestMultibyteStopIsHeldWhole(t *testing.T) {
	// The stop string starts with a two-byte character; a tail of its first byte alone is never
	// a held prefix (it is not a character boundary of the stop string).
	m := New(nil, []string{"éND"})
	if s, _ := m.Text("caf\xc3"); s != "caf\xc3" {
		t.Fatalf("shows %q, want the whole piece", s)
	}
	m = New(nil, []string{"éND"})
	if s, _ := m.Text("café"); s != "caf" {
		t.Fatalf("shows %q, want caf (é held)", s)
	}
}

func TestEOSTokens(t *testing.T) {
	m := New([]int{2, 151645}, nil)
	for _, c := range []struct {
		id   int
		want bool
	}{{2, true}, {151645, true}, {3, false}, {0, false}} {
		if got := m.Token(c.id); got != c.want {
			t.Errorf("Token(%d) = %v, want %v", c.id, got, c.want)
		}
	}
	// Without stop strings text passes through as it comes, nothing held.
	if s, hit := m.Text("ab"); s != "ab" || hit || m.HasStrings() {
		t.Fatalf("no stop strings: shows %q, stopped %v", s, hit)
	}
	// Empty stop strings are ignored rather than matching everywhere.
	if New(nil, []string{""}).HasStrings() {
		t.Fatal("an empty stop string was kept")
	}
}

// TestPieceByPiece is the table the server's stream path was tested with before the matcher
// became the one place stops are applied: what reaches the client piece by piece (empty pieces
// dropped, as the server drops them), and whether a stop string ended the output.
func TestPieceByPiece(t *testing.T) {
	cases := []struct {
		name   string
		stops  []string
		pieces []string
		want   []string
		hit    bool
	}{
		{"no stops passes through", nil, []string{"a", "", "b"}, []string{"a", "b"}, false},
		// "hel"+"lo world" with stop "lo" yields "hel": "l" is withheld, then released before the stop.
		{"stop inside a piece", []string{"lo"}, []string{"hel", "lo world"}, []string{"he", "l"}, true},
		// "l" could begin "lo", so it is withheld until the next piece shows it does not.
		{"withheld then released", []string{"lo"}, []string{"hel", "p"}, []string{"he", "lp"}, false},
		{"stop across three pieces", []string{"abc"}, []string{"xa", "b", "cy"}, []string{"x"}, true},
		{"earliest of two stops wins", []string{"world", "o w"}, []string{"hello world"}, []string{"hell"}, true},
		{"stop at the very start", []string{"The"}, []string{"The end"}, nil, true},
		// A multi-byte stop: the withheld prefix must not split a rune of the output.
		{"utf8 prefix", []string{"é!"}, []string{"café", "?"}, []string{"caf", "é?"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := New(nil, c.stops)
			var got []string
			hit := false
			for _, p := range c.pieces {
				s, stopped := m.Text(p)
				if s != "" {
					got = append(got, s)
				}
				if stopped {
					hit = true
					break
				}
			}
			if rest := m.Flush(); rest != "" {
				got = append(got, rest)
			}
			if hit != c.hit || strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("got %q hit=%v, want %q hit=%v", got, hit, c.want, c.hit)
			}
		})
	}
}
