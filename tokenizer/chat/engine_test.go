package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func render(t *testing.T, src string, vars map[string]any) (string, error) {
	t.Helper()
	tmpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(nil, Options{Extra: vars})
}

// Expected outputs are what jinja2 (trim_blocks=True, lstrip_blocks=True, as transformers
// configures it) produces; the comment on each says why.
func TestEngine(t *testing.T) {
	msgs := json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`)
	cases := []struct {
		name, src, want string
	}{
		// Whitespace control.
		{"lstrip and trim blocks", "a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
			// The indentation before each block tag goes (lstrip_blocks), the newline after each
			// goes (trim_blocks), and the template's final newline is dropped.
			"a\n  b\nc"},
		{"minus strips all whitespace", "x  \n {%- if true -%} \n y \n {%- endif -%}\n  z",
			"xyz"},
		{"expression tags are not trimmed", "  {{ 'v' }}\nw",
			// trim_blocks and lstrip_blocks apply to {% %} and {# #} only.
			"  v\nw"},
		{"plus disables lstrip and trim", "  {%+ if true +%}\nx{% endif %}",
			"  \nx"},
		{"lstrip only at line start", "a  {% if true %}b{% endif %}",
			// The spaces follow "a" on the same line, so they stay.
			"a  b"},
		{"comments vanish with their line", "{# c #}\n  {# d #}\nafter", "after"},
		{"minus trims only its own side", "{%- if true -%}A: {{ x }}{%- endif -%}",
			// "-%}" strips the whitespace after the tag; the space before "{{" is the text's own.
			"A: 1"},
		{"space between expression and block tag", "{{ x }} {% if true %}y{% endif %}",
			// lstrip_blocks strips only whitespace that starts a line.
			"1 y"},

		// Control flow.
		{"if elif else", "{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}", "c"},
		{"for with loop vars", "{% for i in [5,6,7] %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }};{% endfor %}",
			"01TrueFalse;12FalseFalse;23FalseTrue;"},
		{"for filter and length", "{% for i in [1,2,3] if i != 2 %}{{ i }}/{{ loop.length }} {% endfor %}",
			// The filter runs first, so loop.length counts the kept items.
			"1/2 3/2 "},
		{"for else", "{% for i in [] %}x{% else %}empty{% endfor %}", "empty"},
		{"break continue", "{% for i in [1,2,3,4] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", "13"},
		{"tuple unpacking", "{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "x=1;y=2;"},
		{"previtem nextitem", "{% for a in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
			// Undefined at the ends renders as "".
			"-2;1-3;2-;"},

		// Assignment and scoping.
		{"set in loop does not leak", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1"},
		{"namespace carries state out", "{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6"},
		{"set in if is visible", "{% if true %}{% set y = 'in' %}{% endif %}{{ y }}", "in"},
		{"multiple set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12"},
		{"block set", "{% set x %}v{{ 1 }}{% endset %}[{{ x }}]", "[v1]"},

		// Macros (Qwen3.5's render_content, gpt-oss's and Gemma 4's helpers).
		{"macro arguments", "{%- macro f(a, b='B', c=a ~ '!') -%}[{{ a }}|{{ b }}|{{ c }}]{%- endmacro -%}{{ f(1) }}{{ f(2, 'x') }}{{ f(3, c='k') }}{{ f() }}",
			// Positional, then keyword, then the default, evaluated per call after the
			// parameters before it; a missing one is undefined.
			"[1|B|1!][2|x|2!][3|B|k][|B|!]"},
		{"macro scope", "{% set ns = namespace(n=0) %}{% set top = 'T' %}{% macro g(x) %}{% set local = 1 %}{% set ns.n = ns.n + x %}{{ top }}{{ item is defined }}{% endmacro %}{% for item in [1, 2] %}{{ g(item) }}{% endfor %}{{ ns.n }}{{ local is defined }}",
			// The macro sees where it is defined (top, ns), not its caller's loop variable, and
			// its own sets do not leak; a namespace carries state out.
			"TFalseTFalse3False"},
		{"macro output is a string", "{% macro m(s) %}  {{ s }}  {% endmacro %}[{{ m('v')|trim }}]{{ m is callable }}",
			"[v]True"},

		// Slicing and indexing, with Python's semantics.
		{"slices", "{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3][5:] }}",
			"bcd fedcba ef [1, 3, 5] []"},
		{"reverse messages", "{% for m in messages[::-1] %}{{ m.role }} {% endfor %}{{ messages[-1]['content'] }}",
			"assistant user yo"},

		// String methods.
		{"split", "{{ ' a  b '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'x</think>y'.split('</think>')[-1] }}",
			"['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b,c'] y"},
		{"strip family", "[{{ '  x  '.strip() }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'xx\\n\\n'.rstrip('\\n') }}|{{ 'abcxba'.strip('ab') }}]",
			// strip(chars) removes any of the characters, not a prefix string.
			"[x|x\n|xx|cx]"},
		{"startswith endswith", "{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hello'.startswith('lo') }}",
			"True True False"},
		{"case and replace", "{{ 'hELLO'.capitalize() }} {{ 'a-b'.replace('-', '+') }} {{ 'abc'.upper() }} {{ 'hello world'.title() }}",
			"Hello a+b ABC Hello World"},

		// Filters.
		{"length", "{{ [1,2,3]|length }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ nothing|length }}",
			// Code points, not bytes; undefined has length 0.
			"3 5 1 0"},
		{"filter binds tighter than minus", "{{ messages|length - 1 }}", "1"},
		{"trim default join", "[{{ '  t \\n'|trim }}] {{ nothing|default('dflt') }} {{ ''|default('e', true) }} {{ [1,2]|join(', ') }}",
			"[t] dflt e 1, 2"},
		{"first last list", "{{ [3,4]|first }} {{ [3,4]|last }} {{ 'ab'|list }}", "3 4 ['a', 'b']"},
		{"tojson", `{{ {'b': [1, 2.5, none, true, 'q"é<'], 'a': {}}|tojson }}`,
			// json.dumps(ensure_ascii=False): ", " and ": " separators, insertion order, no
			// HTML escaping, non-ASCII kept.
			`{"b": [1, 2.5, null, true, "q\"é<"], "a": {}}`},
		{"tojson indent", "{{ [1, {'k': 'v'}]|tojson(indent=2) }}",
			// With indent, Python's item separator becomes "," (no trailing space).
			"[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]"},
		{"tojson indent keeps insertion order", "{{ {'type': 'function', 'function': {'name': 'f', 'description': 'd'}}|tojson(indent=4) }}",
			// Llama 3.1's tools block dumps each tool this way; sorting keys would change the prompt.
			"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"description\": \"d\"\n    }\n}"},
		{"tojson floats", "{{ [0.0, 2.0, 1e-7, 1.5, 3]|tojson }}",
			// A float stays a float (a tool schema's "minimum": 0.0 is "0.0"), in Python's repr.
			"[0.0, 2.0, 1e-07, 1.5, 3]"},
		{"map selectattr", "{{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
			"user,assistant 1"},
		{"sort", "{{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [{'t': 'b', 'n': 1}, {'t': 'a', 'n': 2}, {'t': 'b', 'n': 0}]|sort(attribute='t')|map(attribute='n')|list }} {{ [{'t': 'b', 'n': 1}, {'t': 'a', 'n': 2}, {'t': 'b', 'n': 0}]|sort(attribute='t,n')|map(attribute='n')|list }}",
			// Case-insensitive unless asked, stable (equal keys keep their order), "a,b" sorts
			// by a then b. Mistral 3 sorts tools by attribute='type'.
			"['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] [2, 1, 0] [2, 0, 1]"},
		{"dictsort", "{% for k, v in {'b': 1, 'A': 2, 'c': 0}|dictsort %}{{ k }}{{ v }} {% endfor %}|{% for k, v in {'b': 1, 'A': 2, 'c': 0}|dictsort(by='value', reverse=true) %}{{ k }} {% endfor %}|{% for k, v in {'b': 1, 'a': 2, 'B': 0}|dictsort(case_sensitive=true) %}{{ k }} {% endfor %}",
			// Gemma 4 and Kimi K3 walk tool parameters this way.
			"A2 b1 c0 |A b c |B a b "},
		{"unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ [{'k': 1}, {'k': 1}, {'k': 2}]|unique(attribute='k')|list|length }}",
			// The first of each case-folded value is kept.
			"['a', 'b'] 2"},
		{"select and map of a false value", "{{ none|selectattr('type', 'equalto', 'x')|list|length }} {{ none|map(attribute='x')|list }} {{ ''|reject|list }} {{ nothing|rejectattr('a')|list }}",
			// jinja2 yields nothing without iterating when the value is false, so a template
			// may filter tools=None (functionary's does); "none|list" is still a TypeError.
			"0 [] [] []"},

		// Tests.
		{"is tests", "{{ x is defined }} {{ nothing is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is string }} {{ false is false }} {{ 0 is false }} {{ x is not none }}",
			// "is false" is identity with False: 0 is not False.
			"True False True True False True False True"},
		{"none attribute is undefined", "{{ none.x is defined }}", "False"},
		{"missing key is undefined", "{{ messages[0].reasoning_content is defined }}", "False"},

		// Expressions and Python printing.
		{"arithmetic", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}",
			// Floor division and modulo round toward negative infinity; / is true division.
			"7 3 -4 2 3.5 1024"},
		{"printing", "{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'a': 'b'} }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }}|{{ nothing }}|",
			// str() of Python values: None, True, list and dict repr, float repr.
			"None True [1, 'a', None] {'a': 'b'} 1.0 0.30000000000000004 1e+20||"},
		{"in and comparisons", "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }}",
			"True True True True True True"},
		{"inline if and or", "{{ 'y' if x else 'n' }} [{{ 'y' if nothing }}] {{ x and 'A' or 'B' }} {{ nothing or 'fb' }}",
			"y [] A fb"},
		{"concat", "{{ 'a' ~ 1 ~ none ~ nothing }}", "a1None"},
		{"not with parens", "{{ not ('<a>'.startswith('<a') and '<a>'.endswith('a>')) }}", "False"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := render(t, c.src, map[string]any{"x": 1, "messages": msgs})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("render %q:\n got %q\nwant %q", c.src, got, c.want)
			}
		})
	}
}

// TestEngineErrors checks that what the engine does not support, or what jinja2 itself rejects,
// fails with an error naming the construct and its line instead of rendering something.
func TestEngineErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // substrings of the error
	}{
		{"unknown filter", "a\nb\n{{ x|nofilter }}", []string{"line 3", `unknown filter "nofilter"`}},
		{"unknown test", "{% if x is nothere %}{% endif %}", []string{"line 1", `unknown test "nothere"`}},
		{"call unsupported", "\n{% call f() %}{% endcall %}", []string{"line 2", "unsupported statement {% call %}"}},
		{"macro too many arguments", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", []string{"line 1", "macro f takes not more than 1 argument(s)"}},
		{"macro unknown keyword", "{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", []string{"macro f takes no keyword argument b"}},
		{"macro twice the same argument", "{% macro f(a) %}{% endmacro %}{{ f(1, a=1) }}", []string{"multiple values for argument a"}},
		{"macro recursion", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", []string{"nested deeper than 100"}},
		{"macro varargs unsupported", "{% macro f() %}\n{{ varargs }}{% endmacro %}", []string{"line 2", "unsupported varargs in macro f"}},
		{"macro default order", "{% macro f(a=1, b) %}{% endmacro %}", []string{"parameter b without a default follows one with a default"}},
		{"include unsupported", "{% include 'x' %}", []string{"line 1", "{% include %}"}},
		{"unknown statement", "{% frobnicate %}", []string{"unknown statement {% frobnicate %}"}},
		{"unclosed if", "{% if x %}a", []string{"missing {% endif %}"}},
		{"unclosed tag", "{{ x ", []string{"not closed"}},
		{"attribute of undefined", "\n\n{{ nothing.x }}", []string{"line 3", "'nothing' is undefined"}},
		{"undefined in arithmetic", "{{ nothing + 'a' }}", []string{"'nothing' is undefined"}},
		{"str plus int", "{{ 'a' + 1 }}", []string{"unsupported operand types for +: str and int"}},
		{"raise_exception", "{{ raise_exception('no system role') }}", []string{"template raised an exception: no system role"}},
		{"list append is immutable", "{{ [].append(1) }}", []string{"immutable"}},
		{"unknown method", "{{ 'a'.format(1) }}", []string{"str.format"}},
		{"set on non-namespace", "{% set d = {} %}{% set d.x = 1 %}", []string{"not a namespace"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := render(t, c.src, map[string]any{"x": 1})
			if err == nil {
				t.Fatalf("want an error, rendered %q", got)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	_, err := render(t, "{{ raise_exception('x') }}", nil)
	var te *TemplateException
	if !errors.As(err, &te) || te.Message != "x" {
		t.Errorf("raise_exception error %v is not a *TemplateException with message x", err)
	}
}

// TestLlama3 renders Llama-3's short template, which relies on bos_token, on "|trim" binding
// to message['content'] only (filters bind tighter than +) and on loop.index0.
func TestLlama3(t *testing.T) {
	src := "{% set loop_messages = messages %}{% for message in loop_messages %}" +
		"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}" +
		"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
	tmpl, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl, err = tmpl.WithVar("bos_token", "<|begin_of_text|>"); err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "  hi \n"}},
		Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>" + // content trimmed
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("render:\n got %q\nwant %q", got, want)
	}
}

// chatFormat is a chat template written for TestChatFormat: one of each construct that real
// templates (Qwen3.5, Llama 3.1, Mistral 3, Gemma 4) lean on, in the layout they use them in.
const chatFormat = `{#- A chat format written for this test: each construct real templates lean on, once. -#}
{%- macro render(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- else -%}
        {%- for part in content if part.type == 'text' -%}{{ part.text }}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if not messages -%}{{ raise_exception('no messages') }}{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages[::-1] -%}
    {%- if ns.last_user < 0 and m.role == 'user' -%}
        {%- set ns.last_user = messages|length - 1 - loop.index0 -%}
    {%- endif -%}
{%- endfor -%}
{%- if tools %}
<tools>
    {% for t in tools|sort(attribute='function.name') %}
    {{ t|tojson }}
    {% endfor %}
</tools>
{% endif -%}
{%- for m in messages -%}
    {%- set text = render(m.content)|trim -%}
    {%- if m.role == 'assistant' -%}
        {%- set reasoning = '' -%}
        {%- if m.reasoning_content is defined -%}
            {%- set reasoning = m.reasoning_content.strip('\n') -%}
        {%- elif '</think>' in text -%}
            {%- set reasoning = text.split('</think>')[0].split('<think>')[-1].strip('\n') -%}
            {%- set text = text.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        <a>{% if loop.index0 > ns.last_user and reasoning %}[{{ reasoning }}]{% endif %}{{ text }}
        {%- for c in m.tool_calls|default([]) %}
<call>{{ {'name': c.function.name, 'arguments': c.function.arguments}|tojson }}</call>
        {%- endfor %}</a>
    {%- elif m.role == 'tool' -%}
        {%- if loop.previtem is not defined or loop.previtem.role != 'tool' %}<u>{% endif -%}
        <r>{{ text }}</r>
        {%- if loop.last or loop.nextitem.role != 'tool' %}</u>{% endif -%}
    {%- elif m.role.startswith('sys') and m.role.endswith('tem') -%}
        <s>{{ text }}</s>
    {%- else -%}
        <{{ m.role[0] }}>{{ text }}</{{ m.role[0] }}>
    {%- endif %}
{% endfor -%}
{%- if add_generation_prompt -%}
    <a>{% if enable_thinking is defined and enable_thinking is false %}[]{% endif %}
{%- endif -%}
`

// TestChatFormat renders chatFormat through Template's API; the expected strings are what
// jinja2 renders with transformers' settings for the same variables.
func TestChatFormat(t *testing.T) {
	tmpl, err := Parse(chatFormat)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{
		{Role: "system", Content: "  You are helpful.\n"},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: "<think>\nold\n</think>\n\nLet me look.",
			ToolCalls: []ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city":"Paris","days":2}`}}},
		{Role: "tool", Content: "sunny"},
		{Role: "tool", Content: "22.5"},
		{Role: "user", Content: "And tomorrow?"},
		{Role: "assistant", Content: "<think>\nnew\n</think>\n\nRain."},
	}
	tools := []any{
		json.RawMessage(`{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}`),
		json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":0.0}}}}}`),
	}
	no := false
	got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true, EnableThinking: &no, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	want := "<tools>\n" +
		// Sorted by function.name; an expression tag keeps its indentation (lstrip_blocks
		// strips only before block tags); 0.0 stays a float.
		`    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 0.0}}}}}` + "\n" +
		`    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}` + "\n" +
		"</tools>\n" +
		"<s>You are helpful.</s><u>Weather in Paris?</u>" +
		// Before the last user turn: the reasoning is dropped, the call's arguments are a dict.
		`<a>Let me look.<call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}</call></a>` +
		// Consecutive tool results share one wrapper (loop.previtem / loop.nextitem).
		"<u><r>sunny</r><r>22.5</r></u><u>And tomorrow?</u>" +
		"<a>[new]Rain.</a>" + // after the last user turn the reasoning is kept
		"<a>[]" // enable_thinking=false
	if got != want {
		t.Errorf("render:\n got %q\nwant %q", got, want)
	}

	if got, err = tmpl.Render(msgs[1:2], Options{AddGenerationPrompt: true}); err != nil || got != "<u>Weather in Paris?</u><a>" {
		t.Errorf("one user turn, tools None: %q, %v", got, err)
	}
	var te *TemplateException
	if _, err = tmpl.Render(nil, Options{}); !errors.As(err, &te) || te.Message != "no messages" {
		t.Errorf("no messages: got %v, want the template's raise_exception", err)
	}
}

func TestChatML(t *testing.T) {
	got, err := ChatML().Render([]Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}},
		Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("render:\n got %q\nwant %q", got, want)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	// A list of named templates, special tokens as objects, and add_bos_token.
	cfg := `{"chat_template": [{"name": "default", "template": "{{ bos_token }}{{ eos_token }}{{ messages|length }}"},
		{"name": "tool_use", "template": "T"}],
		"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "add_bos_token": true}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.BOSToken != "<s>" || c.EOSToken != "</s>" || !c.AddBOSToken || c.Named["tool_use"] != "T" {
		t.Errorf("config %+v", c)
	}
	got, err := c.Template.Render([]Message{{Role: "user"}}, Options{})
	if err != nil || got != "<s></s>1" {
		t.Errorf("render = %q, %v; want \"<s></s>1\"", got, err)
	}

	// No template: Template is nil, and a null bos_token is "" (left undefined for templates).
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": null, "eos_token": "<|im_end|>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err = LoadConfig(dir); err != nil || c.Template != nil || c.BOSToken != "" || c.EOSToken != "<|im_end|>" {
		t.Errorf("config %+v, %v", c, err)
	}

	// A template that does not parse is an error at load time, with the file named.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "{% extends 'base' %}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Errorf("want a load error naming the file, got %v", err)
	}
}

func TestToolsFromGoMap(t *testing.T) {
	// A Go map has no order, so its keys are sorted to keep output deterministic.
	got, err := render(t, "{{ tools|tojson }}", nil)
	if err != nil || got != "null" {
		t.Fatalf("tools default = %q, %v; want null (transformers passes tools=None)", got, err)
	}
	tmpl, _ := Parse("{{ tools|tojson }}")
	got, err = tmpl.Render(nil, Options{Tools: []any{map[string]any{"z": 1, "a": []any{"x", 2.0}}}})
	if err != nil || got != `[{"a": ["x", 2.0], "z": 1}]` {
		t.Errorf("render = %q, %v", got, err)
	}
}

// FuzzTemplate checks that no template source or render makes the engine panic; errors are fine.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"{{ x }}", "{% for a in b %}{{ loop.index }}{% endfor %}", "{{ 'a'[::-1] }}",
		"{% if x is not none %}{{ x|tojson(indent=2) }}{% endif %}", "{{ not", "{{ x[1:2:", "{% set ns.a = 1 %}",
		"{{ {'a': [1, 2]}|items|list }}", "{{ '%s' % 1 }}", "{{ -x|abs }}", "{% for k, v in x %}{% endfor %}",
		"{% macro f(a, b=1) %}{{ a }}{{ f(b) }}{% endmacro %}{{ f(x, b=2)|trim }}"} {
		f.Add(s)
	}
	msgs := []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "<think>a</think>b"}}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		_, _ = tmpl.Render(msgs, Options{Extra: map[string]any{"x": []any{int64(1), "a", nil}, "b": "xyz"}})
	})
}

func TestStepBudget(t *testing.T) {
	defer func(n int) { maxSteps = n }(maxSteps)
	maxSteps = 10_000 // the real bound is 50M; a small one keeps the test fast
	_, err := render(t, "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", nil)
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("nested loops of 1e6 iterations under a 1e4 budget: got %v, want a budget error", err)
	}
	if _, err := render(t, "{% for i in range(100) %}{{ i }}{% endfor %}", nil); err != nil {
		t.Errorf("a small loop within budget failed: %v", err)
	}
}
