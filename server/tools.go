package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/dflash/dflash/server/reply"
)

// Tool calling and thinking: what requests ask for, what a model's template can do, and how the
// generated text is split back into thinking, answer and calls (package server/reply).
//
// A model can call tools when its template renders the tools (it names the variable "tools",
// ollama's test) and teaches reply's <tool_call> format (it contains the tag): other tool
// formats would render but their calls could not be read back, so they are refused alike. A
// model thinks when its template has both thinking tags, ollama's test (thinking.InferTags).

// capabilities are what a model's chat template lets requests use.
type capabilities struct {
	tools, thinking bool
}

func capabilitiesOf(mi ModelInfo) capabilities {
	t := mi.Template
	return capabilities{
		tools:    strings.Contains(t, "tools") && strings.Contains(t, reply.CallOpen),
		thinking: strings.Contains(t, reply.ThinkOpen) && strings.Contains(t, reply.ThinkClose),
	}
}

// capabilityList is /api/show's "capabilities".
func capabilityList(mi ModelInfo) []string {
	out := []string{"completion"}
	c := capabilitiesOf(mi)
	if c.tools {
		out = append(out, "tools")
	}
	if c.thinking {
		out = append(out, "thinking")
	}
	return out
}

// Tool choices of the OpenAI API (ollama's has none: "auto").
const (
	choiceAuto     = "auto"
	choiceNone     = "none"
	choiceRequired = "required"
	choiceNamed    = "function"
)

// checkCapabilities refuses what the model's template cannot do, with ollama's messages: "NAME
// does not support tools" and "\"NAME\" does not support thinking" (400), NAME as requested.
func checkCapabilities(j *job, mi ModelInfo) *RequestError {
	c := capabilitiesOf(mi)
	if len(j.Tools) > 0 && !c.tools {
		return &RequestError{Status: http.StatusBadRequest, Param: "tools",
			Msg: fmt.Sprintf("%s does not support tools (its chat template does not render tools in the <tool_call> format)", j.Model)}
	}
	if j.Think != nil && *j.Think && !c.thinking {
		return &RequestError{Status: http.StatusBadRequest, Param: j.ThinkParam,
			Msg: fmt.Sprintf("%q does not support thinking", j.Model)}
	}
	return nil
}

// replyConfig is how the generation of j on a model with capabilities c is split, given the
// rendered prompt: thinking unless the request turned it off, starting inside the block when the
// prompt opened it; calls when tools were offered.
func replyConfig(j *job, c capabilities, prompt string) reply.Config {
	var rc reply.Config
	if len(j.Messages) == 0 {
		return rc // raw prompts: the text is the client's to read
	}
	if c.thinking && (j.Think == nil || *j.Think) {
		rc.Thinking = true
		rc.InThinking = strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), reply.ThinkOpen)
	}
	rc.Tools = len(j.Tools) > 0
	return rc
}

// parseThink reads ollama's think: a boolean, or "low", "medium", "high" or "max" (ollama's
// levels), which mean true: the template has no effort levels to give them to.
func parseThink(param string, raw json.RawMessage) (*bool, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return &b, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "low", "medium", "high", "max":
			on := true
			return &on, nil
		}
	}
	return nil, badField(param, "want true, false, \"low\", \"medium\", \"high\" or \"max\", got %s", clip(raw))
}

// parseReasoningEffort reads OpenAI's reasoning_effort: "none" turns thinking off, "minimal",
// "low", "medium" and "high" turn it on.
func parseReasoningEffort(s *string) (*bool, *RequestError) {
	if s == nil {
		return nil, nil
	}
	on := true
	switch *s {
	case "none":
		on = false
	case "minimal", "low", "medium", "high":
	default:
		return nil, badField("reasoning_effort", "want \"none\", \"minimal\", \"low\", \"medium\" or \"high\", got %q", *s)
	}
	return &on, nil
}

// parseTools checks a tools list: each a {"type":"function","function":{"name":...}} object
// (type may be left out). The schemas are kept as given, for the template.
func parseTools(raw json.RawMessage) ([]json.RawMessage, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badField("tools", "expected a list of tool objects")
	}
	names := map[string]bool{}
	for i, t := range list {
		p := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type     *string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &tool); err != nil || !bytes.HasPrefix(bytes.TrimSpace(t), []byte("{")) {
			return nil, badField(p, "expected a tool object {\"type\":\"function\",\"function\":{...}}")
		}
		if tool.Type != nil && *tool.Type != "function" {
			return nil, unsupported(p+".type", fmt.Sprintf("tool type %q (only \"function\")", *tool.Type))
		}
		if tool.Function == nil || tool.Function.Name == "" {
			return nil, badField(p+".function.name", "a tool needs a function name")
		}
		if names[tool.Function.Name] {
			return nil, badField(p+".function.name", "tool %q is listed twice", tool.Function.Name)
		}
		names[tool.Function.Name] = true
	}
	return list, nil
}

// toolName is the function name of a tool parseTools accepted.
func toolName(t json.RawMessage) string {
	var tool struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	_ = json.Unmarshal(t, &tool)
	return tool.Function.Name
}

// applyToolChoice reads OpenAI's tool_choice into j, whose Tools are parsed: "none" drops the
// tools (the template renders without them, the output is not searched for calls); "auto"
// keeps them; "required" keeps them and a named function keeps only that one. Neither of the
// last two can force a call without constrained decoding: a model that answers in text instead
// gets its text back with finish_reason "stop" (logged).
func applyToolChoice(j *job, raw json.RawMessage) *RequestError {
	j.ToolChoice = choiceAuto
	if !present(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case choiceAuto:
		case choiceNone:
			j.ToolChoice, j.Tools = choiceNone, nil
		case choiceRequired:
			if len(j.Tools) == 0 {
				return badField("tool_choice", "\"required\" needs tools")
			}
			j.ToolChoice = choiceRequired
		default:
			return badField("tool_choice", "want \"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}, got %q", s)
		}
		return nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return badField("tool_choice", "want \"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	for _, t := range j.Tools {
		if toolName(t) == named.Function.Name {
			j.ToolChoice, j.ToolChoiceName, j.Tools = choiceNamed, named.Function.Name, []json.RawMessage{t}
			return nil
		}
	}
	return badField("tool_choice", "function %q is not among the tools", named.Function.Name)
}

// OllamaToolCall is one entry of an ollama message's tool_calls.
type OllamaToolCall struct {
	ID       string             `json:"id,omitempty"`
	Function OllamaToolFunction `json:"function"`
}

// OllamaToolFunction is the call itself: arguments are a JSON object.
type OllamaToolFunction struct {
	Index     int             `json:"index"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ollamaCalls converts the tool calls of an ollama request message.
func ollamaCalls(param string, calls []OllamaToolCall) ([]ToolCall, *RequestError) {
	var out []ToolCall
	for i, c := range calls {
		p := fmt.Sprintf("%s[%d].function", param, i)
		if c.Function.Name == "" {
			return nil, badField(p+".name", "a tool call needs a function name")
		}
		args := bytes.TrimSpace(c.Function.Arguments)
		if !present(args) {
			args = []byte("{}")
		}
		if args[0] != '{' {
			return nil, badField(p+".arguments", "expected a JSON object, got %s", clip(args))
		}
		out = append(out, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: string(args)})
	}
	return out, nil
}

// OpenAIToolCall is a tool call of an OpenAI message; in a stream delta, Index says which call a
// fragment belongs to and only the first fragment has ID, Type and Name.
type OpenAIToolCall struct {
	Index    *int               `json:"index,omitempty"`
	ID       string             `json:"id,omitempty"`
	Type     string             `json:"type,omitempty"`
	Function OpenAIToolFunction `json:"function"`
}

// OpenAIToolFunction holds the name and the arguments as a JSON string.
type OpenAIToolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// openAICalls converts the tool calls of an OpenAI request message.
func openAICalls(param string, raw json.RawMessage) ([]ToolCall, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	var calls []OpenAIToolCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, badField(param, "expected a list of {\"id\",\"type\":\"function\",\"function\":{\"name\",\"arguments\"}}")
	}
	var out []ToolCall
	for i, c := range calls {
		p := fmt.Sprintf("%s[%d]", param, i)
		if c.Type != "" && c.Type != "function" {
			return nil, unsupported(p+".type", fmt.Sprintf("tool call type %q (only \"function\")", c.Type))
		}
		if c.Function.Name == "" {
			return nil, badField(p+".function.name", "a tool call needs a function name")
		}
		out = append(out, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return out, nil
}

// callID is a fresh tool call id in OpenAI's form.
func callID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// gathered is a whole reply collected from its parts (non-streamed answers).
type gathered struct {
	content, thinking strings.Builder
	calls             []*reply.Call
}

func (g *gathered) add(p reply.Part) {
	switch p.Kind {
	case reply.Content:
		g.content.WriteString(p.Text)
	case reply.Thinking:
		g.thinking.WriteString(p.Text)
	case reply.ToolCall:
		g.calls = append(g.calls, p.Call)
	}
}

// openAIToolsAndThinking reads the chat request's tools, tool_choice, reasoning_effort and think
// into j.
func openAIToolsAndThinking(j *job, r *OpenAIChatRequest) *RequestError {
	tools, err := parseTools(r.Tools)
	if err != nil {
		return err
	}
	j.Tools = tools
	if err := applyToolChoice(j, r.ToolChoice); err != nil {
		return err
	}
	if r.ParallelToolCalls != nil && !*r.ParallelToolCalls {
		j.Notes = append(j.Notes, "parallel_tool_calls=false is not enforced: every call the model writes is returned")
	}
	if r.ReasoningEffort != nil {
		t, err := parseReasoningEffort(r.ReasoningEffort)
		if err != nil {
			return err
		}
		j.Think, j.ThinkParam = t, "reasoning_effort"
		return nil
	}
	t, err := parseThink("think", r.Think)
	if err != nil {
		return err
	}
	j.Think, j.ThinkParam = t, "think"
	return nil
}
