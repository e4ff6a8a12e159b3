package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The split patterns of the tokenizer families this package knows. A tokenizer.json whose pattern
// equals one of these is split by a hand-written matcher that gives exactly the regex's matches;
// any other pattern goes to regexp2, which is slower but, unlike Go's regexp, has the lookahead
// `(?!\S)` these patterns rely on.
const (
	// PatternQwen2 is the split pattern of Qwen2/Qwen3's tokenizer.json: contractions, a word
	// with at most one leading non-letter (usually its space), single digits, punctuation runs
	// with their trailing newlines, and whitespace runs.
	PatternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Splitter cuts text into pieces that cover it exactly, in order, calling emit for each non-empty
// piece. It keeps no state between calls.
type Splitter func(s string, emit func(piece string))

// NewSplitter returns the Splitter of a pre-tokenizer split pattern: the hand-written matcher
// when pattern is one of the known families' (PatternQwen2 among them), else regexp2 running
// pattern with HF's Isolated behaviour. Both give the same pieces; the matcher is much faster.
func NewSplitter(pattern string) (Splitter, error) {
	if s := knownSplitter(pattern); s != nil {
		return s, nil
	}
	return regexSplitter(pattern)
}

// knownSplitter returns the hand-written matcher for a known pattern, or nil.
func knownSplitter(pattern string) Splitter {
	switch pattern {
	case PatternQwen2:
		return func(s string, emit func(string)) { splitLlama3Style(s, 1, emit) }
	case patternLlama3:
		return func(s string, emit func(string)) { splitLlama3Style(s, 3, emit) }
	case patternGPT2:
		return splitGPT2
	}
	return nil
}

// regexSplitter runs an arbitrary pattern with regexp2 and isolates each match; text between
// matches becomes a piece of its own (HF's Split behavior Isolated, invert false).
func regexSplitter(pattern string) (Splitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("split pattern %q: %w", pattern, err)
	}
	return func(s string, emit func(string)) {
		// regexp2 works on runes; ranging over s yields one rune per invalid byte, the same as
		// []rune(s), so rune offsets map back to byte offsets without losing raw bytes.
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
	}, nil
}

// Character classes as Oniguruma (HF tokenizers' engine) sees them: \p{L} is Unicode category L,
// \p{N} category N, \s the White_Space property, which is exactly Go's unicode.IsSpace set.
// An invalid byte decodes to utf8.RuneError, which falls in none of the three ("other").

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func isOther(r rune) bool { return !isL(r) && !isN(r) && !isS(r) }

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// scan returns the end of the run of runes satisfying class starting at i.
func scan(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, w := runeAt(s, i)
		if !class(r) {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of the contraction suffix (after the apostrophe) at the start of
// s: s|t|m|d or re|ve|ll, case-folded when fold is set; 0 when none.
func contraction(s string, fold bool) int {
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if len(s) == 0 {
		return 0
	}
	switch lower(s[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && lower(s[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && lower(s[1]) == 'l' {
			return 2
		}
	}
	return 0
}

// spaceRun matches the three whitespace alternatives shared by all known patterns, at i where a
// whitespace rune starts: `\s*[\r\n]+` (only when newlines is set), `\s+(?!\S)`, `\s+`. It returns
// the end of the match.
func spaceRun(s string, i int, newlines bool) int {
	j := scan(s, i, isS)
	if newlines {
		// \s* backtracks until [\r\n]+ can match: the match ends after the run's last newline.
		for k := j - 1; k >= i; k-- {
			if s[k] == '\n' || s[k] == '\r' {
				return k + 1
			}
		}
	}
	if j == len(s) {
		return j
	}
	// \s+(?!\S): the run is followed by a non-space, so give back its last rune if one remains.
	_, w := utf8.DecodeLastRuneInString(s[i:j])
	if j-w > i {
		return j - w
	}
	return j
}

// splitLlama3Style matches the Qwen2 (maxDigits 1) and Llama-3 (maxDigits 3) pattern:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ — alternatives tried in order at each start.
func splitLlama3Style(s string, maxDigits int, emit func(string)) {
	for i := 0; i < len(s); {
		r, w := runeAt(s, i)
		end := -1
		switch {
		case r == '\'' && contraction(s[i+1:], true) > 0:
			end = i + 1 + contraction(s[i+1:], true)
		case isL(r):
			end = scan(s, i+w, isL)
		case r != '\r' && r != '\n' && !isN(r) && i+w < len(s) && startsWith(s, i+w, isL):
			end = scan(s, i+w, isL)
		case isN(r):
			end = i + w
			for n := 1; n < maxDigits && end < len(s); n++ {
				r2, w2 := runeAt(s, end)
				if !isN(r2) {
					break
				}
				end += w2
			}
		}
		if end < 0 {
			// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
			j := i
			if r == ' ' {
				j = i + 1
			}
			if k := scan(s, j, isOther); k > j {
				end = k
				for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
					end++
				}
			}
		}
		if end < 0 {
			if isS(r) {
				end = spaceRun(s, i, true)
			} else {
				end = i + w // unreachable: every rune is L, N, \s or other
			}
		}
		emit(s[i:end])
		i = end
	}
}

// splitGPT2 matches GPT-2's pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
func splitGPT2(s string, emit func(string)) {
	for i := 0; i < len(s); {
		r, w := runeAt(s, i)
		end := -1
		if r == '\'' && contraction(s[i+1:], false) > 0 {
			end = i + 1 + contraction(s[i+1:], false)
		} else {
			j := i
			if r == ' ' {
				j = i + 1
			}
			if j < len(s) {
				r2, _ := runeAt(s, j)
				for _, class := range []func(rune) bool{isL, isN, isOther} {
					if class(r2) {
						end = scan(s, j, class)
						break
					}
				}
			}
		}
		if end < 0 {
			if isS(r) {
				end = spaceRun(s, i, false)
			} else {
				end = i + w
			}
		}
		emit(s[i:end])
		i = end
	}
}

func startsWith(s string, i int, class func(rune) bool) bool {
	r, _ := runeAt(s, i)
	return class(r)
}
