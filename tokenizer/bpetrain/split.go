package bpetrain

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// PatternQwen2 is the split pattern of Qwen2/Qwen3's tokenizer.json: contractions, a word with at
// most one leading non-letter (usually its space), single digits, punctuation runs with their
// trailing newlines, and whitespace runs. package tokenizer recognises this exact string and
// splits with a hand-written matcher, so it is the default: training and encoding both run fast,
// and single digits keep numbers from taking vocabulary a small model cannot use.
const PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// splitFunc cuts text into pre-tokens that cover it exactly, in order.
type splitFunc func(s string, emit func(string))

// newSplitter returns a splitter for pattern: the hand-written matcher for PatternQwen2, else
// regexp2 (Go's regexp lacks the `(?!\S)` lookahead these patterns use).
func newSplitter(pattern string) (splitFunc, error) {
	if pattern == PatternQwen2 {
		return splitQwen2, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("split pattern %q: %w", pattern, err)
	}
	return func(s string, emit func(string)) { regexSplit(re, s, emit) }, nil
}

// regexSplit isolates each match of re in s; text between matches is a piece of its own
// (Hugging Face's Split with behavior Isolated). Ranging over s gives one rune per invalid byte,
// as regexp2 sees it, so rune offsets map back to byte offsets without losing bytes.
func regexSplit(re *regexp2.Regexp, s string, emit func(string)) {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	last := 0
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		a, b := offs[m.Index], offs[m.Index+m.Length]
		if a > last {
			emit(s[last:a])
		}
		if b > a {
			emit(s[a:b])
		}
		last = b
		m, err = re.FindNextMatch(m)
	}
	if last < len(s) {
		emit(s[last:])
	}
}

// Character classes as Hugging Face's regex engine sees them: \p{L} is category L, \p{N}
// category N, \s the White_Space property (Go's unicode.IsSpace). An invalid byte decodes to
// utf8.RuneError, which is none of the three.

func letter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func digit(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func space(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func other(r rune) bool { return !letter(r) && !digit(r) && !space(r) }

func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run returns the end of the run of runes in class starting at i.
func run(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, w := decode(s, i)
		if !class(r) {
			break
		}
		i += w
	}
	return i
}

// suffixLen is the length of a contraction suffix (s, t, m, d, re, ve, ll; ASCII case folded)
// at the start of s, 0 when there is none.
func suffixLen(s string) int {
	if len(s) == 0 {
		return 0
	}
	fold := func(c byte) byte { return c | 0x20 }
	switch fold(s[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && fold(s[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && fold(s[1]) == 'l' {
			return 2
		}
	}
	return 0
}

// splitQwen2 gives exactly the pieces PatternQwen2 isolates: at each position the alternatives
// are tried in the pattern's order and the first that matches wins.
func splitQwen2(s string, emit func(string)) {
	for i := 0; i < len(s); {
		r, w := decode(s, i)
		end := -1
		switch {
		case r == '\'' && suffixLen(s[i+1:]) > 0:
			end = i + 1 + suffixLen(s[i+1:])
		case letter(r):
			end = run(s, i+w, letter)
		case r != '\r' && r != '\n' && !digit(r) && i+w < len(s) && letter(first(s, i+w)):
			end = run(s, i+w, letter)
		case digit(r):
			end = i + w
		}
		if end < 0 {
			// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
			j := i
			if r == ' ' {
				j++
			}
			if k := run(s, j, other); k > j {
				end = k
				for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
					end++
				}
			}
		}
		if end < 0 && space(r) {
			j := run(s, i, space)
			// `\s*[\r\n]+`: the greedy \s* gives back runes until the last newline of the run.
			for k := j - 1; k >= i && end < 0; k-- {
				if s[k] == '\r' || s[k] == '\n' {
					end = k + 1
				}
			}
			if end < 0 {
				// `\s+(?!\S)` keeps the run's last rune for the word after it; a one-rune run
				// falls to `\s+` and is taken whole.
				end = j
				if j < len(s) {
					if _, lw := utf8.DecodeLastRuneInString(s[i:j]); j-lw > i {
						end = j - lw
					}
				}
			}
		}
		if end < 0 {
			end = i + w // unreachable: every rune is a letter, digit, space or other
		}
		emit(s[i:end])
		i = end
	}
}

func first(s string, i int) rune {
	r, _ := decode(s, i)
	return r
}
