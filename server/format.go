package server

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dflash/dflash/sample/grammar"
)

// Structured output: ollama's format and OpenAI's response_format compile to a grammar the
// backend decodes under (see docs/structured-output.md). A schema the grammar supports always
// yields output that validates, unless the generation is cut (num_predict, a stop string, the
// context) before the value is whole, so the server does not validate the output again.

// parseOllamaFormat reads ollama's format: absent or "" for free text, "json" for any JSON value,
// or a JSON schema object.
func parseOllamaFormat(raw json.RawMessage) (*grammar.Grammar, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "":
			return nil, nil
		case "json":
			return grammar.AnyJSON(), nil
		}
		return nil, badField("format", "%q is neither \"json\" nor a JSON schema object", s)
	}
	return compileSchema("format", raw)
}

// compileSchema compiles a schema given at param, naming the schema's own path in errors.
func compileSchema(param string, raw json.RawMessage) (*grammar.Grammar, *RequestError) {
	g, err := grammar.CompileSchema(raw)
	var se *grammar.SchemaError
	if errors.As(err, &se) {
		p := param
		if se.Path != "" {
			p += "." + se.Path
		}
		return nil, badField(p, "%s", se.Msg)
	}
	if err != nil {
		return nil, badField(param, "%v", err)
	}
	return g, nil
}

// parseResponseFormat reads OpenAI's response_format: {"type":"text"}, {"type":"json_object"}
// (any JSON object) or {"type":"json_schema","json_schema":{"name":...,"schema":{...},
// "strict":...}}. strict is accepted either way: the grammar enforces the schema exactly as far
// as it supports it, and refuses what it does not.
func parseResponseFormat(raw json.RawMessage) (*grammar.Grammar, *RequestError) {
	if !present(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badField("response_format", "want an object with a type: %v", err)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return grammar.AnyObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return nil, badField("response_format.json_schema", "json_schema is required for type json_schema")
		}
		if !present(rf.JSONSchema.Schema) {
			return nil, badField("response_format.json_schema.schema", "a schema is required")
		}
		return compileSchema("response_format.json_schema.schema", rf.JSONSchema.Schema)
	}
	return nil, badField("response_format.type", "%s", fmt.Sprintf("%q is not text, json_object or json_schema", rf.Type))
}

// formatWithTools refuses a request with both tools and a format: the grammar constrains the
// whole reply, so the model could never write a tool call, which is not what a client offering
// tools means.
func formatWithTools(j *job, param string) *RequestError {
	if j.Format != nil && len(j.Tools) > 0 {
		return unsupported(param, "structured output cannot be combined with tools (the grammar would keep the model from calling them)")
	}
	return nil
}
