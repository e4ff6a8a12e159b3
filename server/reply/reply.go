// Package reply splits the text a model generates into its thinking, its answer and its tool
// calls, as the text streams: a leading <think>...</think> block (Qwen3, DeepSeek-R1 and the
// templates that share their tags) and <tool_call>{json}</tool_call> blocks (the Hermes format
// Qwen's templates teach).
//
// It owns the parse only: it knows nothing of HTTP, of the APIs' shapes or of templates beyond
// these four tags. Invariants: what it emits, with the tags put back, is the input minus the
// whitespace it drops around tags (and a call's JSON compacted); the parts do not depend on how
// the input is cut into pieces; text it holds back is only text that may still turn out to be
// (part of) a tag, or whitespace next to one; it never fails on any input: a tool call whose
// body is not a JSON object with a name comes back as content, tags and all.
package reply

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The tags the parser recognises.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
	CallOpen   = "<tool_call>"
	CallClose  = "</tool_call>"
)

// Kind says what a Part holds.
type Kind int

const (
	Content  Kind = iota // answer text
	Thinking             // text of the thinking block, tags and surrounding whitespace removed
	ToolCall             // one parsed tool call
)

func (k Kind) String() string {
	switch k {
	case Content:
		return "content"
	case Thinking:
		return "thinking"
	case ToolCall:
		return "tool_call"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Call is one tool call the model made.
type Call struct {
	Name string
	// Arguments is a JSON object, compacted (key order as the model wrote it).
	Arguments json.RawMessage
}

// Part is one piece of parsed output: Text for Content and Thinking, Call for ToolCall.
type Part struct {
	Kind Kind
	Text string
	Call *Call
}

// Config says what to look for.
type Config struct {
	// Thinking splits a thinking block from the start of the output: one opened by ThinkOpen
	// (after optional whitespace), or, with InThinking, one the prompt opened already.
	Thinking bool
	// InThinking says the prompt ends inside an open thinking block (templates that write
	// ThinkOpen into the generation prompt): the output starts as thinking. Implies Thinking.
	InThinking bool
	// Tools parses CallOpen ... CallClose blocks in the answer into calls.
	Tools bool
}

type state int

const (
	stStart    state = iota // before the output shows whether it opens a thinking block
	stThinking              // inside the thinking block
	stContent               // the answer
	stCall                  // inside a tool call block, collecting its body
)

// Parser is the streaming split of one generation. It is not safe for concurrent use.
type Parser struct {
	cfg   Config
	st    state
	buf   string // text received and not yet emitted: a possible tag start or held whitespace
	lead  bool   // drop whitespace before the next non-space text (after a tag)
	calls int    // tool calls emitted so far
	// searched is how much of buf is known not to hold the end of a call: a long call arriving
	// token by token is then searched once, not once per token.
	searched int
}

// New starts a parse.
func New(c Config) *Parser {
	p := &Parser{cfg: c, st: stContent}
	switch {
	case c.InThinking:
		p.st, p.lead = stThinking, true
	case c.Thinking:
		p.st = stStart
	}
	return p
}

// Calls is the number of tool calls emitted so far.
func (p *Parser) Calls() int { return p.calls }

// Add consumes the next piece of generated text and returns what it completes, in order.
func (p *Parser) Add(text string) []Part {
	p.buf += text
	var out []Part
	for {
		parts, progressed := p.step(false)
		out = append(out, parts...)
		if !progressed {
			return merge(out)
		}
	}
}

// Flush ends the parse at the end of the generation: held text is emitted as what it is, an
// unfinished thinking block as thinking, an unfinished tool call as content.
func (p *Parser) Flush() []Part {
	var out []Part
	for {
		parts, progressed := p.step(true)
		out = append(out, parts...)
		if !progressed {
			break
		}
	}
	return merge(out)
}

// step makes one transition on p.buf, reporting whether it consumed anything or changed
// state. At the end (final), nothing is held back.
func (p *Parser) step(final bool) ([]Part, bool) {
	switch p.st {
	case stStart:
		rest := strings.TrimLeft(p.buf, spaces)
		switch {
		case strings.HasPrefix(rest, ThinkOpen):
			p.buf = rest[len(ThinkOpen):]
			p.st, p.lead = stThinking, true
			return nil, true
		case !final && strings.HasPrefix(ThinkOpen, rest):
			return nil, false // only whitespace, or the start of the tag, so far
		}
		p.st = stContent
		return nil, true

	case stThinking:
		if i := strings.Index(p.buf, ThinkClose); i >= 0 {
			text := strings.TrimRight(p.text(p.buf[:i]), spaces)
			p.buf = p.buf[i+len(ThinkClose):]
			p.st, p.lead = stContent, true
			return part(Thinking, text), true
		}
		if final {
			text := strings.TrimRight(p.text(p.buf), spaces)
			p.buf = ""
			return part(Thinking, text), false
		}
		emit, _ := hold(p.buf, ThinkClose, true)
		if emit == "" {
			return nil, false
		}
		p.buf = p.buf[len(emit):]
		return part(Thinking, p.text(emit)), false

	case stContent:
		if !p.cfg.Tools {
			text := p.text(p.buf)
			p.buf = ""
			return part(Content, text), false
		}
		if i := strings.Index(p.buf, CallOpen); i >= 0 {
			// Whitespace between the answer and a call is layout, not answer.
			text := strings.TrimRight(p.text(p.buf[:i]), spaces)
			p.buf = p.buf[i+len(CallOpen):]
			p.st = stCall
			return part(Content, text), true
		}
		if final {
			text := p.text(p.buf)
			p.buf = ""
			return part(Content, text), false
		}
		emit, _ := hold(p.buf, CallOpen, true)
		if emit == "" {
			return nil, false
		}
		p.buf = p.buf[len(emit):]
		return part(Content, p.text(emit)), false

	case stCall:
		from := max(0, p.searched-len(CallClose)+1)
		i := strings.Index(p.buf[from:], CallClose)
		if i >= 0 {
			i += from
		}
		if i < 0 {
			if !final {
				p.searched = len(p.buf)
				return nil, false
			}
			// Cut off before its end (length, stop): not a call, so the text it is.
			text := CallOpen + p.buf
			p.buf, p.st, p.searched = "", stContent, 0
			return part(Content, text), false
		}
		body := p.buf[:i]
		p.buf, p.searched = p.buf[i+len(CallClose):], 0
		p.st, p.lead = stContent, true
		c, err := ParseCall(body)
		if err != nil {
			p.lead = false // the text goes on as text
			return part(Content, CallOpen+body+CallClose), true
		}
		p.calls++
		return []Part{{Kind: ToolCall, Call: c}}, true
	}
	panic("reply: unknown state") // our own bug: every state is handled above
}

// text applies the pending drop of leading whitespace to s.
func (p *Parser) text(s string) string {
	if !p.lead {
		return s
	}
	t := strings.TrimLeft(s, spaces)
	if t != "" {
		p.lead = false
	}
	return t
}

const spaces = " \t\r\n"

// hold splits s into what can be emitted now and what must wait: the longest suffix of s that
// is a proper prefix of tag, and, when holdSpace, the whitespace run before it (it is dropped if
// the tag follows).
func hold(s, tag string, holdSpace bool) (emit, held string) {
	cut := len(s)
	for n := min(len(tag)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			cut = len(s) - n
			break
		}
	}
	if holdSpace {
		for cut > 0 && strings.IndexByte(spaces, s[cut-1]) >= 0 {
			cut--
		}
	}
	return s[:cut], s[cut:]
}

func part(k Kind, text string) []Part {
	if text == "" {
		return nil
	}
	return []Part{{Kind: k, Text: text}}
}

// merge joins adjacent text parts of one kind, so one Add gives one piece per kind run.
func merge(ps []Part) []Part {
	out := ps[:0]
	for _, p := range ps {
		if n := len(out); n > 0 && p.Kind != ToolCall && out[n-1].Kind == p.Kind {
			out[n-1].Text += p.Text
			continue
		}
		out = append(out, p)
	}
	return out
}

// ParseCall reads the body of a tool call block: one JSON object {"name": NAME, "arguments":
// {...}} and nothing else but whitespace. "parameters" is accepted for "arguments" (some
// models write it), a missing one means no arguments, and arguments given as a string holding
// a JSON object are unwrapped.
func ParseCall(body string) (*Call, error) {
	body = strings.TrimSpace(body)
	if !strings.HasPrefix(body, "{") {
		return nil, errors.New("tool call: not a JSON object")
	}
	var raw struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	// Unmarshal refuses text after the object, which a decoder would leave unread.
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		return nil, fmt.Errorf("tool call: %w", err)
	}
	if raw.Name == nil || strings.TrimSpace(*raw.Name) == "" {
		return nil, errors.New("tool call: no function name")
	}
	args := raw.Arguments
	if !present(args) {
		args = raw.Parameters
	}
	if !present(args) {
		args = json.RawMessage("{}")
	}
	if args[0] == '"' {
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return nil, fmt.Errorf("tool call arguments: %w", err)
		}
		args = json.RawMessage(strings.TrimSpace(s))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, args); err != nil {
		return nil, fmt.Errorf("tool call arguments: %w", err)
	}
	if compact.Bytes()[0] != '{' {
		return nil, errors.New("tool call arguments: not a JSON object")
	}
	return &Call{Name: *raw.Name, Arguments: compact.Bytes()}, nil
}

func present(r json.RawMessage) bool { return len(r) > 0 && !bytes.Equal(r, []byte("null")) }
