package reply

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// collect runs a whole output through a parser, fed in the given pieces, and returns the parts
// with adjacent text parts of one kind joined: how a client that concatenates deltas sees it.
func collect(c Config, pieces []string) []Part {
	p := New(c)
	var out []Part
	for _, s := range pieces {
		out = append(out, p.Add(s)...)
	}
	out = append(out, p.Flush()...)
	return merge(out)
}

// splits yields the text cut at every byte boundary into two pieces, then one byte per piece,
// then whole: every way a token stream can cut a tag that matters (a two-piece cut inside each
// tag, a tag arriving one byte at a time).
func splits(text string) [][]string {
	var out [][]string
	for i := 0; i <= len(text); i++ {
		out = append(out, []string{text[:i], text[i:]})
	}
	bytes := make([]string, len(text))
	for i := range text {
		bytes[i] = text[i : i+1]
	}
	return append(out, bytes, []string{text})
}

func th(s string) Part { return Part{Kind: Thinking, Text: s} }
func co(s string) Part { return Part{Kind: Content, Text: s} }
func call(name, args string) Part {
	return Part{Kind: ToolCall, Call: &Call{Name: name, Arguments: json.RawMessage(args)}}
}

func TestParseEverySplit(t *testing.T) {
	think := Config{Thinking: true}
	tools := Config{Tools: true}
	both := Config{Thinking: true, Tools: true}
	opened := Config{InThinking: true, Tools: true}
	cases := []struct {
		name string
		cfg  Config
		text string
		want []Part
	}{
		// Qwen3's shape: the block, a blank line, the answer. The whitespace inside the tags and
		// between the block and the answer is layout and is dropped.
		{"thinking then answer", think, "<think>\nLet me think.\n</think>\n\nHello!", []Part{th("Let me think."), co("Hello!")}},
		// An empty block (what the no-think prompt form looks like if the model writes it).
		{"empty thinking", think, "<think>\n\n</think>\n\nHi", []Part{co("Hi")}},
		// Leading whitespace before the tag still opens the block.
		{"space before think", think, "\n<think>a b</think>c", []Part{th("a b"), co("c")}},
		// No block: everything is answer, whitespace included, and a "<th" that goes nowhere too.
		{"no thinking", think, " <th is not a tag", []Part{co(" <th is not a tag")}},
		// A block cut off by the length limit is all thinking.
		{"unterminated thinking", think, "<think>still going ", []Part{th("still going")}},
		// Thinking off: the tags are text like any other.
		{"thinking not parsed", tools, "<think>x</think>y", []Part{co("<think>x</think>y")}},
		// The prompt opened the block: the output starts inside it.
		{"prompt opened thinking", opened, "\nhmm\n</think>\n\nok", []Part{th("hmm"), co("ok")}},
		// Whitespace inside thinking that is not at its end is kept.
		{"inner whitespace", think, "<think>a\n\nb \n</think>c", []Part{th("a\n\nb"), co("c")}},

		{"one call", tools, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			[]Part{call("get_weather", `{"city":"Paris"}`)}},
		// Text before a call is the answer; the whitespace between them and between calls is not.
		{"text then two calls", tools, "Let me look.\n\n<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":\"b\",\"arguments\":{\"x\":1}}\n</tool_call>\n",
			[]Part{co("Let me look."), call("a", `{}`), call("b", `{"x":1}`)}},
		// Braces and tags inside argument strings, nested objects and arrays: the JSON decides.
		{"nested braces", tools, `<tool_call>{"name":"run","arguments":{"code":"if (x) { y(\"}\") }","opts":{"deep":{"a":[1,{"b":2}]}}}}</tool_call>`,
			[]Part{call("run", `{"code":"if (x) { y(\"}\") }","opts":{"deep":{"a":[1,{"b":2}]}}}`)}},
		// Key order is the model's, not sorted.
		{"key order kept", tools, `<tool_call>{"name":"f","arguments":{"z":1,"a":2}}</tool_call>`, []Part{call("f", `{"z":1,"a":2}`)}},
		{"thinking then call", both, "<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
			[]Part{th("Need weather."), call("w", `{}`)}},
		// "parameters" for "arguments", missing arguments, arguments as a JSON string.
		{"parameters alias", tools, `<tool_call>{"name":"f","parameters":{"a":1}}</tool_call>`, []Part{call("f", `{"a":1}`)}},
		{"no arguments", tools, `<tool_call>{"name":"now"}</tool_call>`, []Part{call("now", `{}`)}},
		{"string arguments", tools, `<tool_call>{"name":"f","arguments":"{\"a\": 1}"}</tool_call>`, []Part{call("f", `{"a":1}`)}},

		// Malformed calls come back as the text the model wrote, tags included, and the parse
		// goes on (the whitespace before a call, good or bad, is still layout).
		{"not json", tools, "<tool_call>get_weather(Paris)</tool_call> ok", []Part{co("<tool_call>get_weather(Paris)</tool_call> ok")}},
		{"no name", tools, `<tool_call>{"arguments":{}}</tool_call>`, []Part{co(`<tool_call>{"arguments":{}}</tool_call>`)}},
		{"arguments not an object", tools, `<tool_call>{"name":"f","arguments":[1]}</tool_call>`, []Part{co(`<tool_call>{"name":"f","arguments":[1]}</tool_call>`)}},
		{"trailing text in body", tools, `<tool_call>{"name":"f"} extra</tool_call>`, []Part{co(`<tool_call>{"name":"f"} extra</tool_call>`)}},
		{"two objects in one body", tools, `<tool_call>{"name":"f"}{"name":"g"}</tool_call>`, []Part{co(`<tool_call>{"name":"f"}{"name":"g"}</tool_call>`)}},
		{"unterminated call", tools, `Sure. <tool_call>{"name":"f","argu`, []Part{co(`Sure.<tool_call>{"name":"f","argu`)}},
		{"bad then good", tools, "<tool_call>{oops}</tool_call>\n<tool_call>{\"name\":\"g\"}</tool_call>",
			[]Part{co("<tool_call>{oops}</tool_call>"), call("g", `{}`)}},
		// Tools off: the block is text.
		{"tools not parsed", think, `<tool_call>{"name":"f"}</tool_call>`, []Part{co(`<tool_call>{"name":"f"}</tool_call>`)}},
		// Plain answers keep their whitespace, trailing included.
		{"plain answer", both, "Hello, world!\n", []Part{co("Hello, world!\n")}},
		// An unfinished tag at the end is text, with the space before it.
		{"lone angle brackets", both, "a < b and <tool but not <tool_call", []Part{co("a < b and <tool but not <tool_call")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := merge(append([]Part(nil), c.want...))
			for _, pieces := range splits(c.text) {
				got := collect(c.cfg, pieces)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("pieces %q:\n got  %s\n want %s", pieces, show(got), show(want))
				}
			}
		})
	}
}

func show(ps []Part) string {
	var b strings.Builder
	for _, p := range ps {
		if p.Kind == ToolCall {
			fmt.Fprintf(&b, "[call %s %s]", p.Call.Name, p.Call.Arguments)
			continue
		}
		fmt.Fprintf(&b, "[%s %q]", p.Kind, p.Text)
	}
	return b.String()
}

// Text that may begin a tag is held back, and nothing else: a client sees each answer piece as
// soon as it cannot be part of a tag.
func TestHoldsBackOnlyPossibleTags(t *testing.T) {
	p := New(Config{Thinking: true, Tools: true})
	steps := []struct {
		in   string
		want []Part
	}{
		{"<thi", nil},                        // may be <think>
		{"nk>Hm", []Part{th("Hm")}},          // inside: "Hm" is out at once
		{"m. </th", []Part{th("m.")}},        // the space and "</th" may end the block
		{"ink>\n\nSure", []Part{co("Sure")}}, // the block ended; the blank line is layout
		{" <tool", nil},                      // " <tool" may start a call
		{"box> ok", []Part{co(" <toolbox> ok")}},
		{"\n<tool_call>{\"name\":", nil}, // inside a call: nothing until it closes
		{"\"f\"}</tool_call>", []Part{call("f", "{}")}},
	}
	for i, s := range steps {
		got := merge(p.Add(s.in))
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d Add(%q): got %s, want %s", i, s.in, show(got), show(s.want))
		}
	}
	if got := p.Flush(); len(got) != 0 {
		t.Fatalf("Flush after a complete call: %s, want nothing (trailing layout is dropped)", show(got))
	}
	if p.Calls() != 1 {
		t.Fatalf("Calls() = %d, want 1", p.Calls())
	}
}

// FuzzParser: the parse does not depend on where the text is cut, and loses no text.
func FuzzParser(f *testing.F) {
	f.Add("<think>a</think>b<tool_call>{\"name\":\"x\"}</tool_call>", 3)
	f.Add("<tool_call>{", 1)
	f.Add("  <think>\n a \n</think>\n\n b <tool_call>{\"name\":\"f\",\"arguments\":{\"x\":\"}\"}}</tool_call>\n c", 20)
	f.Add("x <tool_call>{oops}</tool_call> <tool_ca", 9)
	f.Fuzz(func(t *testing.T, text string, cut int) {
		if cut < 0 {
			cut = -cut
		}
		cut %= len(text) + 1
		// However the text is cut, the parts are those of the whole text.
		cfg := Config{Thinking: true, Tools: true}
		if got, want := collect(cfg, []string{text[:cut], text[cut:]}), collect(cfg, []string{text}); !reflect.DeepEqual(got, want) {
			t.Fatalf("cut at %d: %s, whole: %s", cut, show(got), show(want))
		}
		p := New(cfg)
		var n int
		for _, part := range append(append(p.Add(text[:cut]), p.Add(text[cut:])...), p.Flush()...) {
			n += len(part.Text)
			if part.Kind == ToolCall {
				n += len(part.Call.Name) + len(part.Call.Arguments)
			}
		}
		// Whitespace and tags are dropped, but a non-space byte of text is never lost unless it
		// went into a call (whose JSON may be compacted).
		if p.Calls() == 0 {
			if got, want := n, len(stripLayout(text)); got < want {
				t.Fatalf("emitted %d bytes of text, input has at least %d outside tags", got, want)
			}
		}
	})
}

// stripLayout is the text minus whitespace and the tags: a lower bound on what must come out.
func stripLayout(s string) string {
	for _, tag := range []string{ThinkOpen, ThinkClose} {
		s = strings.ReplaceAll(s, tag, "")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ { // bytes, not runes: the input need not be UTF-8
		if strings.IndexByte(spaces, s[i]) < 0 {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
