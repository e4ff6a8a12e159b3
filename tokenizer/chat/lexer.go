package chat

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer turns template source into a flat stream of pieces: literal text and the tokens of
// {{ ... }} and {% ... %} tags (comments vanish). Whitespace control happens here, exactly as
// jinja2's lexer does it for Hugging Face's environment (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False):
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
//   - trim_blocks: a block or comment tag not ending in "-" or "+" swallows one newline after it;
//   - lstrip_blocks: spaces and tabs between a line start and a block or comment tag are removed,
//     unless the tag opens with "+";
//   - one trailing newline of the whole template is dropped.

type tokKind int

const (
	tText     tokKind = iota
	tVarBegin         // {{
	tVarEnd           // }}
	tBlkBegin         // {%
	tBlkEnd           // %}
	tName
	tString
	tInt
	tFloat
	tOp // operators and punctuation
	tEOF
)

type token struct {
	kind tokKind
	s    string // text, name, unquoted string, number literal or operator
	line int
}

func (t token) String() string {
	switch t.kind {
	case tText:
		return "text"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlkBegin:
		return "'{%'"
	case tBlkEnd:
		return "'%}'"
	case tString:
		return fmt.Sprintf("string %q", t.s)
	case tEOF:
		return "end of template"
	}
	return fmt.Sprintf("%q", t.s)
}

// ops lists multi-character operators first so the longest match wins.
var ops = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
	"(", ")", "[", "]", "{", "}", ",", ".", ":", "|"}

func lex(src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False drops exactly one

	var toks []token
	pos, line := 0, 1
	for pos < len(src) {
		// Find the next tag opener.
		start := -1
		for i := pos; i+1 < len(src); i++ {
			if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
				start = i
				break
			}
		}
		if start < 0 {
			toks = append(toks, token{tText, src[pos:], line})
			break
		}
		text := src[pos:start]
		kind := src[start+1]
		mod := byte(0)
		if start+2 < len(src) && (src[start+2] == '-' || src[start+2] == '+') {
			mod = src[start+2]
		}
		switch {
		case mod == '-':
			text = strings.TrimRightFunc(text, isPySpace)
		case mod != '+' && kind != '{':
			// lstrip_blocks: only when the tag is the first non-blank thing on its line.
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || pos == 0 || src[pos-1] == '\n' {
				if strings.TrimFunc(text[lpos:], isPySpace) == "" {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			toks = append(toks, token{tText, text, line})
		}
		line += strings.Count(src[pos:start], "\n")
		tagLine := line
		p := start + 2
		if mod != 0 {
			p++
		}
		var rmod byte
		var end int
		switch kind {
		case '#':
			i := strings.Index(src[p:], "#}")
			if i < 0 {
				return nil, fmt.Errorf("line %d: unclosed comment", tagLine)
			}
			end = p + i + 2
			if i > 0 && (src[p+i-1] == '-' || src[p+i-1] == '+') {
				rmod = src[p+i-1]
			}
			line += strings.Count(src[start:end], "\n")
		default:
			begin, endKind, closer := tVarBegin, tVarEnd, "}}"
			if kind == '%' {
				begin, endKind, closer = tBlkBegin, tBlkEnd, "%}"
			}
			toks = append(toks, token{begin, "", tagLine})
			var err error
			toks, p, line, rmod, err = lexTag(src, p, line, toks, closer)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{endKind, "", line})
			end = p
		}
		pos = end
		switch {
		case rmod == '-':
			for pos < len(src) {
				r, n := utf8.DecodeRuneInString(src[pos:])
				if !isPySpace(r) {
					break
				}
				if r == '\n' {
					line++
				}
				pos += n
			}
		case rmod != '+' && kind != '{':
			if pos < len(src) && src[pos] == '\n' { // trim_blocks
				pos++
				line++
			}
		}
	}
	toks = append(toks, token{tEOF, "", line})
	return toks, nil
}

// lexTag scans expression tokens from p up to and including closer ("}}" or "%}"), returning the
// position after the closer and the closer's modifier ('-', '+' or 0).
func lexTag(src string, p, line int, toks []token, closer string) ([]token, int, int, byte, error) {
	depth := 0 // open brackets: "}}" inside {'a': {'b': 1}} does not close the tag
	for {
		for p < len(src) && (src[p] == ' ' || src[p] == '\t' || src[p] == '\n') {
			if src[p] == '\n' {
				line++
			}
			p++
		}
		if p >= len(src) {
			return nil, 0, 0, 0, fmt.Errorf("line %d: tag not closed with %q", line, closer)
		}
		rest := src[p:]
		if depth == 0 && strings.HasPrefix(rest, closer) {
			return toks, p + len(closer), line, 0, nil
		}
		if depth == 0 && (rest[0] == '-' || rest[0] == '+') && strings.HasPrefix(rest[1:], closer) {
			return toks, p + 1 + len(closer), line, rest[0], nil
		}
		c := rest[0]
		switch {
		case c == '_' || c < utf8.RuneSelf && unicode.IsLetter(rune(c)):
			i := 1
			for i < len(rest) && (rest[i] == '_' || rest[i] < utf8.RuneSelf && (unicode.IsLetter(rune(rest[i])) || unicode.IsDigit(rune(rest[i])))) {
				i++
			}
			toks = append(toks, token{tName, rest[:i], line})
			p += i
		case c >= '0' && c <= '9':
			i, kind := 0, tInt
			for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '_') {
				i++
			}
			if i+1 < len(rest) && rest[i] == '.' && rest[i+1] >= '0' && rest[i+1] <= '9' {
				kind = tFloat
				i++
				for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
					i++
				}
			}
			if i < len(rest) && (rest[i] == 'e' || rest[i] == 'E') {
				j := i + 1
				if j < len(rest) && (rest[j] == '+' || rest[j] == '-') {
					j++
				}
				if j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
					kind = tFloat
					for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
						j++
					}
					i = j
				}
			}
			toks = append(toks, token{kind, strings.ReplaceAll(rest[:i], "_", ""), line})
			p += i
		case c == '\'' || c == '"':
			s, n, nl, err := lexString(rest)
			if err != nil {
				return nil, 0, 0, 0, fmt.Errorf("line %d: %w", line, err)
			}
			toks = append(toks, token{tString, s, line})
			line += nl
			p += n
		default:
			found := false
			for _, op := range ops {
				if strings.HasPrefix(rest, op) {
					switch op {
					case "(", "[", "{":
						depth++
					case ")", "]", "}":
						depth--
					}
					toks = append(toks, token{tOp, op, line})
					p += len(op)
					found = true
					break
				}
			}
			if !found {
				r, _ := utf8.DecodeRuneInString(rest)
				return nil, 0, 0, 0, fmt.Errorf("line %d: unexpected character %q in tag", line, r)
			}
		}
	}
}

// lexString decodes a Python-style quoted string literal at the start of s, returning its value,
// the number of bytes consumed and the newlines inside it.
func lexString(s string) (string, int, int, error) {
	q := s[0]
	var b strings.Builder
	nl := 0
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nl, nil
		case c == '\\' && i+1 < len(s):
			i++
			switch e := s[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '\n':
				nl++ // a backslash-newline continues the literal
			case 'u', 'x', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n >= len(s) {
					return "", 0, 0, fmt.Errorf("bad \\%c escape in string literal", e)
				}
				var r rune
				if _, err := fmt.Sscanf(s[i+1:i+1+n], "%x", &r); err != nil {
					return "", 0, 0, fmt.Errorf("bad \\%c escape in string literal", e)
				}
				b.WriteRune(r)
				i += n
			default:
				// Python keeps unknown escapes verbatim, backslash included.
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			if c == '\n' {
				nl++
			}
			b.WriteByte(c)
		}
	}
	return "", 0, 0, fmt.Errorf("unterminated string literal")
}
