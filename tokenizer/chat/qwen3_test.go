package chat

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
)

// The expected strings below were derived by reading Qwen3's chat_template by hand. Facts about
// that template that every expectation relies on:
//   - every tag opens with "{%-" or "{{-", so the indentation and newlines between tags are all
//     stripped: the only output is the string expressions inside {{- ... }};
//   - without tools, a leading system message renders as "<|im_start|>system\n" + content +
//     "<|im_end|>\n", and the main loop then skips it ("system and not loop.first" is false);
//   - ns.last_query_index is the index of the last user message that is not a wrapped
//     <tool_response>; only assistant turns after it keep their <think> reasoning;
//   - an assistant's content "<think>\nR\n</think>\n\nA" is split into reasoning "R" (text
//     before </think>, newlines trimmed, after <think>) and content "A" (after </think>, leading
//     newlines trimmed);
//   - the generation prompt is "<|im_start|>assistant\n", plus "<think>\n\n</think>\n\n" only
//     when enable_thinking is defined and false.

func loadQwen3(t testing.TB) *Template {
	t.Helper()
	dir := filepath.Dir(shareddata.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Template == nil {
		t.Fatal("qwen3 tokenizer_config.json: no chat template loaded")
	}
	return cfg.Template
}

const (
	qSys   = "<|im_start|>system\nYou are helpful.<|im_end|>\n"
	qUser1 = "<|im_start|>user\nHi there<|im_end|>\n"
	qUser2 = "<|im_start|>user\nHow are you?<|im_end|>\n"
	qGen   = "<|im_start|>assistant\n"
)

var (
	sys       = Message{Role: "system", Content: "You are helpful."}
	user1     = Message{Role: "user", Content: "Hi there"}
	user2     = Message{Role: "user", Content: "How are you?"}
	thinkingA = Message{Role: "assistant", Content: "<think>\nLet me think.\n</think>\n\nHello!"}
)

func TestQwen3(t *testing.T) {
	tmpl := loadQwen3(t)
	no, yes := false, true
	cases := []struct {
		name string
		msgs []Message
		opt  Options
		want string
	}{
		{
			// (a) The system turn, the user turn, then the bare assistant header: with
			// enable_thinking undefined the template leaves thinking to the model.
			name: "system+user, generation prompt, thinking default",
			msgs: []Message{sys, user1},
			opt:  Options{AddGenerationPrompt: true},
			want: qSys + qUser1 + qGen,
		},
		{
			// (b) enable_thinking=false appends an empty think block to the generation prompt,
			// so the model answers directly.
			name: "system+user, generation prompt, thinking off",
			msgs: []Message{sys, user1},
			opt:  Options{AddGenerationPrompt: true, EnableThinking: &no},
			want: qSys + qUser1 + qGen + "<think>\n\n</think>\n\n",
		},
		{
			// enable_thinking=true is the same as undefined: the test is "is false".
			name: "thinking explicitly on",
			msgs: []Message{sys, user1},
			opt:  Options{AddGenerationPrompt: true, EnableThinking: &yes},
			want: qSys + qUser1 + qGen,
		},
		{
			// (c) The assistant turn at index 1 precedes the last user query (index 3), so its
			// <think> block is dropped and only "Hello!" is kept.
			name: "multi-turn strips historical reasoning",
			msgs: []Message{sys, user1, thinkingA, user2},
			opt:  Options{AddGenerationPrompt: true},
			want: qSys + qUser1 + "<|im_start|>assistant\nHello!<|im_end|>\n" + qUser2 + qGen,
		},
		{
			// (d) The assistant turn is last and after the last user query: its reasoning is
			// re-emitted in a normalised "<think>\nR\n</think>\n\n" block before the answer.
			name: "assistant last keeps reasoning",
			msgs: []Message{sys, user1, thinkingA},
			want: qSys + qUser1 + "<|im_start|>assistant\n<think>\nLet me think.\n</think>\n\nHello!<|im_end|>\n",
		},
		{
			// A last assistant turn without reasoning still gets an (empty) think block, because
			// the branch is taken on loop.last alone.
			name: "assistant last without reasoning",
			msgs: []Message{user1, {Role: "assistant", Content: "Hello!"}},
			want: qUser1 + "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n",
		},
		{
			// reasoning_content given separately wins over parsing; content is used as is and
			// the reasoning is stripped of surrounding newlines only.
			name: "reasoning_content field",
			msgs: []Message{user1, {Role: "assistant", Content: "Hello!", ReasoningContent: "\nponder\n"}},
			want: qUser1 + "<|im_start|>assistant\n<think>\nponder\n</think>\n\nHello!<|im_end|>\n",
		},
		{
			// Without a system message nothing precedes the first user turn.
			name: "user only",
			msgs: []Message{user1},
			opt:  Options{AddGenerationPrompt: true},
			want: qUser1 + qGen,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tmpl.Render(c.msgs, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("render:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// TestQwen3Tools covers the tools system prompt (tojson with Python's separators, key order
// kept from the JSON given), an assistant tool call whose arguments are a JSON object, and a
// tool result wrapped into a user turn.
func TestQwen3Tools(t *testing.T) {
	tmpl := loadQwen3(t)
	tool := json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)
	msgs := []Message{
		sys,
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Content: "sunny"},
	}
	got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true, Tools: []any{tool}})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are helpful.\n\n" +
		"# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		// json.dumps default separators are ", " and ": ", keys in the given order.
		`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		// Empty content and no reasoning: no think block (not last), and no "\n" before the
		// first call because content is empty.
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		// A tool turn after a non-tool turn opens a user turn; being last, it closes it.
		"<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" +
		qGen
	if got != want {
		t.Errorf("render:\n got %q\nwant %q", got, want)
	}
}

func BenchmarkQwen3Render(b *testing.B) {
	tmpl := loadQwen3(b)
	msgs := []Message{sys, user1, thinkingA, user2}
	opt := Options{AddGenerationPrompt: true}
	for b.Loop() {
		if _, err := tmpl.Render(msgs, opt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQwen3Parse(b *testing.B) {
	dir := filepath.Dir(shareddata.Path(b, "tokenizers/qwen3/tokenizer_config.json"))
	cfg, err := LoadConfig(dir)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse(cfg.Source); err != nil {
			b.Fatal(err)
		}
	}
}
