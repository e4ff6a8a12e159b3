// Package chat renders a model's chat template (the Jinja "chat_template" of
// tokenizer_config.json) into the prompt text the model was trained on.
//
// It owns a small Jinja interpreter (lexer, parser to a tree, evaluator) that mirrors how Hugging
// Face's transformers renders templates: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks=True and lstrip_blocks=True, the loopcontrols extension (break/continue), the
// {% generation %} tag, a tojson filter that is json.dumps(ensure_ascii=False) and the globals
// raise_exception and strftime_now, with macros. Values follow Python's semantics (None, str(),
// repr of lists, dict key order, slicing, str methods) because templates are written against
// Python.
//
// It must never render a template it does not understand: a construct outside the supported
// subset ({% call %}, includes, a macro's varargs, unknown filters or tests, ...) fails Parse or
// Render with an error naming the construct and its line. It never tokenizes, never decides stop
// tokens and never touches the network or anything outside the folder it is given.
package chat

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dflash/dflash/format/hf"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant" or "tool"
	Content string
	// ReasoningContent is an assistant's thinking kept apart from Content. Empty means absent:
	// the template then sees no reasoning_content key (Qwen3's extracts <think> from Content).
	ReasoningContent string
	ToolCalls        []ToolCall
	Name             string // optional; absent from the template's message when empty
	// ToolCallID is, on a "tool" message, the id of the call it answers; absent when empty.
	ToolCallID string
}

// ToolCall is one function call an assistant made, shown to the template in the OpenAI shape
// {"type": "function", "id": ID, "function": {"name": Name, "arguments": Arguments}}.
type ToolCall struct {
	ID   string // optional
	Name string
	// Arguments is the call's arguments as JSON text. A JSON object is given to the template
	// as a dict (key order kept), as transformers users pass it; anything else as the string.
	Arguments string
}

// Options are the render-time variables besides the messages.
type Options struct {
	// AddGenerationPrompt appends the header that starts the assistant's reply.
	AddGenerationPrompt bool
	// EnableThinking is passed as enable_thinking when non-nil; nil leaves it undefined so the
	// template's default applies (for Qwen3: thinking on).
	EnableThinking *bool
	// Tools are the tool schemas (dicts); nil passes tools=None as transformers does. Use
	// json.RawMessage or *Dict elements to keep key order in tojson output (Go maps are
	// rendered with sorted keys).
	Tools []any
	// Extra holds further template variables; they override everything else.
	Extra map[string]any
}

// Template is a parsed chat template. It is immutable and safe for concurrent Render calls.
type Template struct {
	body []node
	vars map[string]any // special tokens bound by LoadConfig (bos_token, eos_token, ...)
}

// Parse compiles template source. Errors name the offending construct and its line.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	p := &parser{toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{body: body, vars: map[string]any{}}, nil
}

// WithVar returns a copy of t that also defines the variable name (e.g. "bos_token") at render
// time, below Options.Extra in precedence.
func (t *Template) WithVar(name string, v any) (*Template, error) {
	c, err := fromGo(v)
	if err != nil {
		return nil, fmt.Errorf("chat template variable %s: %w", name, err)
	}
	vars := make(map[string]any, len(t.vars)+1)
	for k, x := range t.vars {
		vars[k] = x
	}
	vars[name] = c
	return &Template{body: t.body, vars: vars}, nil
}

// ChatMLSource is the generic ChatML template transformers used as its default: the source of
// ChatML(), shown to clients that ask for a model's template.
const ChatMLSource = "{% for message in messages %}" +
	"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// ChatML returns the plain ChatML template, the fallback for a folder without a template.
func ChatML() *Template {
	t, err := Parse(ChatMLSource)
	if err != nil {
		panic("chat: built-in ChatML template does not parse: " + err.Error()) // a bug here, not input
	}
	return t
}

// Render renders the conversation. The variables are those transformers' apply_chat_template
// passes: messages, tools (None when absent), documents (None), add_generation_prompt, the
// special tokens bound to the template, enable_thinking when set, then Options.Extra.
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	vars := map[string]any{
		"messages":              messagesValue(msgs),
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": opt.AddGenerationPrompt,
	}
	if opt.Tools != nil {
		tools, err := fromGo(opt.Tools)
		if err != nil {
			return "", fmt.Errorf("chat template: tools%w", err)
		}
		vars["tools"] = tools
	}
	for k, v := range t.vars {
		vars[k] = v
	}
	if opt.EnableThinking != nil {
		vars["enable_thinking"] = *opt.EnableThinking
	}
	for k, v := range opt.Extra {
		c, err := fromGo(v)
		if err != nil {
			return "", fmt.Errorf("chat template: variable %s: %w", k, err)
		}
		vars[k] = c
	}
	st := &state{frames: []map[string]any{vars}}
	if err := st.exec(t.body); err != nil {
		return "", fmt.Errorf("chat template: render: %w", err)
	}
	return st.out.String(), nil
}

func messagesValue(msgs []Message) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		d := NewDict().Set("role", m.Role).Set("content", m.Content)
		if m.ReasoningContent != "" {
			d.Set("reasoning_content", m.ReasoningContent)
		}
		if m.Name != "" {
			d.Set("name", m.Name)
		}
		if m.ToolCallID != "" {
			d.Set("tool_call_id", m.ToolCallID)
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				var args any = tc.Arguments
				if v, err := parseJSON([]byte(tc.Arguments)); err == nil {
					if _, isObj := v.(*Dict); isObj {
						args = v
					}
				}
				fn := NewDict().Set("name", tc.Name).Set("arguments", args)
				c := NewDict().Set("type", "function")
				if tc.ID != "" {
					c.Set("id", tc.ID)
				}
				calls[j] = c.Set("function", fn)
			}
			d.Set("tool_calls", calls)
		}
		out[i] = d
	}
	return out
}

// Config is what a model folder's tokenizer_config.json says about chat formatting.
type Config struct {
	// Template is the parsed "default" chat template with the special tokens bound as
	// bos_token / eos_token; nil when the file has no template (use ChatML()).
	Template *Template
	// Source is the template text Template was parsed from.
	Source string
	// Named holds every named template when chat_template is a list (e.g. "default",
	// "tool_use", "rag"), unparsed.
	Named       map[string]string
	BOSToken    string // "" when null or absent
	EOSToken    string
	AddBOSToken bool
}

// LoadConfig reads dir/tokenizer_config.json (through format/hf, its one reader) and parses its
// template. chat_template may be a string or a list of {name, template} (the "default" one is
// parsed); bos_token and eos_token may be strings or {"content": ...} objects.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("load chat config: %w", err)
	}
	tc, err := hf.LoadTokenizerConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load chat config: %w", err)
	}
	cfg, err := FromTokenizerConfig(tc)
	if err != nil {
		return nil, fmt.Errorf("load chat config %s: %w", path, err)
	}
	return cfg, nil
}

// FromTokenizerConfig parses the template of an already-read tokenizer_config.json and binds its
// special tokens as bos_token / eos_token. A config without a template gives a Config whose
// Template is nil.
func FromTokenizerConfig(tc *hf.TokenizerConfig) (*Config, error) {
	cfg := &Config{Source: tc.ChatTemplate, Named: tc.Named, BOSToken: tc.BOSToken, EOSToken: tc.EOSToken}
	if tc.AddBOSToken != nil {
		cfg.AddBOSToken = *tc.AddBOSToken
	}
	if cfg.Source == "" {
		return cfg, nil
	}
	t, err := Parse(cfg.Source)
	if err != nil {
		return nil, err
	}
	// transformers passes only the special tokens that are set; a null bos_token stays
	// undefined in the template rather than rendering "None".
	for n, v := range map[string]string{"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken} {
		if v != "" {
			if t, err = t.WithVar(n, v); err != nil {
				return nil, err
			}
		}
	}
	cfg.Template = t
	return cfg, nil
}
