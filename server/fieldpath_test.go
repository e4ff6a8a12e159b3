package server

import (
	"strings"
	"testing"
)

// TestDecodeErrorNamesJSONField: a value of the wrong JSON type is reported under the field's
// JSON path, as the client wrote it, with the JSON kind expected: encoding/json's own path would
// say "openAICommon.max_tokens" (the embedded Go struct) and its type "*int".
func TestDecodeErrorNamesJSONField(t *testing.T) {
	cases := []struct {
		body      string
		dst       any
		param     string
		wantInMsg string
	}{
		{`{"model":"m","max_tokens":"ten"}`, &OpenAIChatRequest{}, "max_tokens", `invalid "max_tokens": expected an integer, got JSON string`},
		{`{"model":"m","temperature":true}`, &OpenAICompletionRequest{}, "temperature", "expected a number, got JSON bool"},
		{`{"model":"m","stream_options":{"include_usage":1}}`, &OpenAIChatRequest{}, "stream_options.include_usage", "expected a boolean"},
		{`{"model":"m","messages":[{"role":5}]}`, &OpenAIChatRequest{}, "messages.role", "expected a string, got JSON number"},
		{`{"model":"m","max_completion_tokens":[1]}`, &OpenAIChatRequest{}, "max_completion_tokens", "expected an integer, got JSON array"},
		{`{"model":"m","prompt":5}`, &OllamaGenerateRequest{}, "prompt", "expected a string"},
	}
	for _, tc := range cases {
		e := decodeJSON([]byte(tc.body), tc.dst)
		if e == nil {
			t.Errorf("%s: decoded without error", tc.body)
			continue
		}
		if e.Param != tc.param || !strings.Contains(e.Msg, tc.wantInMsg) || strings.Contains(e.Msg, "openAICommon") {
			t.Errorf("%s: param %q, message %q; want param %q and %q", tc.body, e.Param, e.Msg, tc.param, tc.wantInMsg)
		}
	}
}
