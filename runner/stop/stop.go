// Package stop decides where a generation's output ends besides its length: at a stop token (an
// end-of-sequence id) or at the first occurrence of a stop string in the output's text. One
// Matcher serves a request's whole emit path, so `dflash run`, the server and any other caller
// end outputs by the same rules.
//
// A stop string can be split across tokens and a token's text can end with the start of one, so
// the Matcher holds back the tail of the text that could still begin a stop string and releases
// it once it cannot: a stream never shows part of a stop string, and the text it shows is always
// a prefix of the final output. It knows nothing of tokenizers or models: callers give it ids and
// the text those ids add.
package stop

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Matcher applies a request's stops. Invariant: held is the output's text not yet released; it
// never contains a whole stop string and is a proper prefix of one (or empty). A Matcher is not
// safe for concurrent use.
type Matcher struct {
	tokens  []int
	strings []string
	held    string
	stopped bool
}

// New matches the stop tokens ids and the stop strings strs (empty strings are ignored).
func New(ids []int, strs []string) *Matcher {
	m := &Matcher{tokens: ids}
	for _, s := range strs {
		if s != "" {
			m.strings = append(m.strings, s)
		}
	}
	return m
}

// Token reports whether id ends the output; the token itself is not part of it.
func (m *Matcher) Token(id int) bool { return slices.Contains(m.tokens, id) }

// HasStrings reports whether any stop string is set (only then does Text need the output's text).
func (m *Matcher) HasStrings() bool { return len(m.strings) > 0 }

// Stopped reports whether a stop string has ended the output.
func (m *Matcher) Stopped() bool { return m.stopped }

// Text adds the text of the next token of the output and returns what may be shown now. When the
// text completes a stop string (the earliest one, where several match), stopped is true and show
// is the text before it; the stop string and whatever follows are never shown, and every later
// call shows nothing.
func (m *Matcher) Text(text string) (show string, stopped bool) {
	if m.stopped {
		return "", true
	}
	if len(m.strings) == 0 {
		return text, false
	}
	m.held += text
	cut := -1
	for _, s := range m.strings {
		if i := strings.Index(m.held, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		show, m.held, m.stopped = m.held[:cut], "", true
		return show, true
	}
	// Hold the longest tail that is a proper prefix of some stop string; a prefix is cut only at
	// a character boundary of the stop string, so shown text never ends inside a character.
	keep := 0
	for _, s := range m.strings {
		for k := min(len(s)-1, len(m.held)); k > keep; k-- {
			if utf8.RuneStart(s[k]) && strings.HasSuffix(m.held, s[:k]) {
				keep = k
				break
			}
		}
	}
	show = m.held[:len(m.held)-keep]
	m.held = m.held[len(m.held)-keep:]
	return show, false
}

// Flush releases the held-back text once the output has ended without a stop string (nothing
// after one).
func (m *Matcher) Flush() string {
	h := m.held
	m.held = ""
	if m.stopped {
		return ""
	}
	return h
}
