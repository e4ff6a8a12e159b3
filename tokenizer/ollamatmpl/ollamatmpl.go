// Package ollamatmpl renders the chat templates of ollama's model store (the template layer of a
// manifest), which are Go text/template programs, not Jinja: ollama executes them with Go's own
// engine, so this package does too, with the data ollama gives them and the functions they call
// (json, currentDate, yesterdayDate, toTypeScriptType).
//
// A template comes in one of two styles, told apart as ollama does, by the fields it names:
//   - a messages template (it names .Messages) runs once over the whole conversation: .System (all
//     system messages, joined by blank lines), .Messages (consecutive messages of one role merged,
//     tool results kept apart), .Tools, .Think, .ThinkLevel, .IsThinkSet;
//   - a legacy template names only .System, .Prompt and .Response and runs once per turn (a system
//     message, a user prompt, the assistant's response); the last turn's output ends where its
//     .Response would be printed, so the prompt stops where the reply begins. A template naming
//     none of them gets the response appended after each completed turn.
//
// It must never touch the network or files, and never decides tokens or stops: it turns a
// conversation into text. Bad templates fail Parse, and a template that fails while running
// (a missing field, a wrong type) fails Render, each with the template's own error.
package ollamatmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/dflash/dflash/tokenizer/chat"
)

// Template is a parsed ollama chat template. It is safe for concurrent Render calls.
type Template struct {
	t   *template.Template
	src string
	// messages: the template names .Messages (runs once); response: it names .Response.
	messages, response bool
}

// Parse compiles an ollama template.
func Parse(src string) (*Template, error) {
	t, err := template.New("ollama").Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("ollama template: %w", err)
	}
	names := map[string]bool{}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			identifiers(tt.Tree.Root, names)
		}
	}
	return &Template{t: t, src: src, messages: names["messages"], response: names["response"]}, nil
}

// Source is the template text.
func (t *Template) Source() string { return t.src }

// funcs are the functions ollama's templates call.
var funcs = template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
	// The date functions accept (and, as ollama's do, ignore) a format argument.
	"currentDate":   func(...string) string { return time.Now().Format("2006-01-02") },
	"yesterdayDate": func(...string) string { return time.Now().AddDate(0, 0, -1).Format("2006-01-02") },
	"toTypeScriptType": func(v any) string {
		if p, ok := v.(Property); ok {
			return p.typeScript()
		}
		if p, ok := v.(*Property); ok && p != nil {
			return p.typeScript()
		}
		return "any"
	},
}

// identifiers collects, lower-cased, every field and variable name the tree mentions.
func identifiers(n parse.Node, out map[string]bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			identifiers(c, out)
		}
	case *parse.ActionNode:
		identifiers(n.Pipe, out)
	case *parse.TemplateNode:
		identifiers(n.Pipe, out)
	case *parse.IfNode:
		identifiers(&n.BranchNode, out)
	case *parse.RangeNode:
		identifiers(&n.BranchNode, out)
	case *parse.WithNode:
		identifiers(&n.BranchNode, out)
	case *parse.BranchNode:
		identifiers(n.Pipe, out)
		identifiers(n.List, out)
		if n.ElseList != nil {
			identifiers(n.ElseList, out)
		}
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				identifiers(a, out)
			}
		}
	case *parse.FieldNode:
		for _, id := range n.Ident {
			out[strings.ToLower(id)] = true
		}
	case *parse.ChainNode:
		for _, id := range n.Field {
			out[strings.ToLower(id)] = true
		}
		identifiers(n.Node, out)
	case *parse.VariableNode:
		for _, id := range n.Ident {
			out[strings.ToLower(id)] = true
		}
	}
}

// Message is a message as a template sees it (.Messages elements).
type Message struct {
	Role       string
	Content    string
	Thinking   string // the assistant's reasoning (chat.Message.ReasoningContent)
	ToolCalls  []ToolCall
	ToolName   string // a tool result's tool (chat.Message.Name)
	ToolCallID string
}

// ToolCall is one call of an assistant message.
type ToolCall struct {
	ID       string
	Function CallFunction
}

// CallFunction is what a call calls; Arguments prints as JSON.
type CallFunction struct {
	Index     int
	Name      string
	Arguments Args
}

// Args are a call's arguments; printed by a template, they are their JSON object.
type Args map[string]any

func (a Args) String() string {
	if a == nil {
		return "{}"
	}
	b, _ := json.Marshal(map[string]any(a))
	return string(b)
}

// Tools are the request's tool schemas; printed by a template, they are their JSON array.
type Tools []Tool

func (t Tools) String() string {
	b, _ := json.Marshal([]Tool(t))
	return string(b)
}

// Tool is one tool schema in OpenAI's shape, with the field names ollama's templates use.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction describes a tool's function.
type ToolFunction struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Parameters  Parameters `json:"parameters"`
}

// Parameters is a function's parameter schema.
type Parameters struct {
	Type       string     `json:"type"`
	Required   []string   `json:"required,omitempty"`
	Properties Properties `json:"properties"`
}

// Properties are a schema's properties by name; printed, their JSON object.
type Properties map[string]Property

func (p Properties) String() string {
	if p == nil {
		return "{}"
	}
	b, _ := json.Marshal(map[string]Property(p))
	return string(b)
}

// Property is one parameter's schema. Type is a JSON schema type name or a list of them.
type Property struct {
	Type        any    `json:"type,omitempty"`
	Description string `json:"description,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
	Items       any    `json:"items,omitempty"`
}

// typeScript is the property's type as TypeScript writes it (what toTypeScriptType prints).
func (p Property) typeScript() string {
	one := func(t string) string {
		switch t {
		case "string", "boolean":
			return t
		case "integer", "number":
			return "number"
		case "array":
			return "any[]"
		case "object":
			return "object"
		case "null":
			return "null"
		}
		return "any"
	}
	switch t := p.Type.(type) {
	case string:
		return one(t)
	case []any:
		var parts []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				parts = append(parts, one(s))
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, " | ")
		}
	}
	return "any"
}

// Render writes the conversation msgs as the model's prompt. opt.EnableThinking sets .Think and
// .IsThinkSet; opt.Tools (JSON-shaped schemas: maps, json.RawMessage or structs) become .Tools.
// ollama's templates always end with the reply's header, so opt.AddGenerationPrompt changes
// nothing.
func (t *Template) Render(msgs []chat.Message, opt chat.Options) (string, error) {
	tools, err := toolsOf(opt.Tools)
	if err != nil {
		return "", fmt.Errorf("ollama template: tools: %w", err)
	}
	think := opt.EnableThinking != nil && *opt.EnableThinking
	data := func() map[string]any {
		return map[string]any{"Think": think, "ThinkLevel": "", "IsThinkSet": opt.EnableThinking != nil}
	}
	system, merged, err := collate(msgs)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if t.messages {
		d := data()
		d["System"], d["Messages"], d["Tools"], d["Response"] = system, merged, tools, ""
		if err := t.t.Execute(&b, d); err != nil {
			return "", fmt.Errorf("ollama template: %w", err)
		}
		return b.String(), nil
	}
	return t.legacy(merged, data)
}

// responseMarker stands for the last turn's response in a legacy render (see legacy). NUL bytes
// do not occur in chat text.
const responseMarker = "\x00dflash-response\x00"

// legacy runs a per-turn template over the turns of msgs (see the package comment).
func (t *Template) legacy(msgs []Message, data func() map[string]any) (string, error) {
	var b bytes.Buffer
	var system, prompt, response string
	turn := func(last bool) error {
		d := data()
		d["System"], d["Prompt"], d["Response"] = system, prompt, response
		system, prompt, response = "", "", ""
		if !last {
			if err := t.t.Execute(&b, d); err != nil {
				return fmt.Errorf("ollama template: %w", err)
			}
			if !t.response {
				b.WriteString(d["Response"].(string))
			}
			return nil
		}
		// The prompt ends where the last turn's response would begin: render with a marker
		// in its place and cut at its first occurrence, which is the response's own when no
		// message text contains the marker (Render refuses those). ollama cuts the template's
		// tree at .Response instead; for text the two agree.
		d["Response"] = responseMarker
		var lb bytes.Buffer
		if err := t.t.Execute(&lb, d); err != nil {
			return fmt.Errorf("ollama template: %w", err)
		}
		out := lb.String()
		if i := strings.Index(out, responseMarker); i >= 0 {
			out = out[:i]
		}
		b.WriteString(out)
		return nil
	}
	for i, m := range msgs {
		if strings.Contains(m.Content, responseMarker) {
			return "", fmt.Errorf("ollama template: messages[%d] contains a NUL-delimited marker the renderer reserves", i)
		}
		switch m.Role {
		case "system":
			if prompt != "" || response != "" {
				if err := turn(false); err != nil {
					return "", err
				}
			}
			system = m.Content
		case "user":
			if response != "" {
				if err := turn(false); err != nil {
					return "", err
				}
			}
			prompt = m.Content
		case "assistant":
			response = m.Content
		}
	}
	if err := turn(true); err != nil {
		return "", err
	}
	return b.String(), nil
}

// collate returns the system messages joined by blank lines and the conversation as templates
// see it: consecutive messages of one role merged (their contents joined by a blank line),
// except tool results, which stay one message per result.
func collate(msgs []chat.Message) (string, []Message, error) {
	var system []string
	var out []Message
	for i, m := range msgs {
		if m.Role == "system" {
			system = append(system, m.Content)
		}
		if n := len(out); n > 0 && out[n-1].Role == m.Role && m.Role != "tool" {
			out[n-1].Content += "\n\n" + m.Content
			continue
		}
		tm := Message{Role: m.Role, Content: m.Content, Thinking: m.ReasoningContent}
		if m.Role == "tool" {
			tm.ToolName = m.Name
		}
		for k, c := range m.ToolCalls {
			var args Args
			if strings.TrimSpace(c.Arguments) != "" {
				if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
					return "", nil, fmt.Errorf("ollama template: messages[%d].tool_calls[%d]: arguments are not a JSON object: %w", i, k, err)
				}
			}
			tm.ToolCalls = append(tm.ToolCalls, ToolCall{ID: c.ID, Function: CallFunction{Index: k, Name: c.Name, Arguments: args}})
		}
		out = append(out, tm)
	}
	return strings.Join(system, "\n\n"), out, nil
}

// toolsOf converts JSON-shaped tool schemas into Tools; nil for none.
func toolsOf(tools []any) (Tools, error) {
	if tools == nil {
		return nil, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, err
	}
	var out Tools
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}
