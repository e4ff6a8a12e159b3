package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server/reply"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

func TestSchedulerFIFO(t *testing.T) {
	s := newScheduler(1, 0, nil)
	release, err := s.acquire(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Queue five waiters in a known order, then release: they must run in that order.
	order := make(chan int, 5)
	for i := range 5 {
		go func() {
			r, err := s.acquire(context.Background(), 0)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			r()
		}()
		for s.depth() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	release()
	for want := range 5 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d ran at position %d", got, want)
		}
	}
	// A waiter that gives up leaves the queue and does not consume the slot.
	r, _ := s.acquire(context.Background(), 0)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.acquire(ctx, 0); errc <- err }()
	for s.depth() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	r()
	if s.depth() != 0 || s.free != 1 {
		t.Errorf("after all released: depth %d free %d, want 0 and 1", s.depth(), s.free)
	}
}

func TestParseKeepAlive(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{`"5m"`, 5 * time.Minute, false},
		{`"1h30m"`, 90 * time.Minute, false},
		{`300`, 5 * time.Minute, false}, // numbers are seconds
		{`1.5`, 1500 * time.Millisecond, false},
		{`0`, 0, false}, // unload after the request
		{`"0"`, 0, false},
		{`-1`, -1, false}, // negative: forever
		{`"-5m"`, -1, false},
		{`"30"`, 30 * time.Second, false}, // numeric strings are seconds too
		{`1e300`, -1, false},              // beyond time.Duration: forever
		{`"soon"`, 0, true},
		{`true`, 0, true},
	} {
		got, err := parseKeepAlive(json.RawMessage(c.in))
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("parseKeepAlive(%s) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

// checkJob is what every fuzz target asserts: exactly one of a job or a 4xx error naming
// something, and a job whose limits are within the documented ranges.
func checkJob(t *testing.T, j *job, err *RequestError) {
	if (j == nil) == (err == nil) {
		t.Fatalf("job %v and error %v: want exactly one", j, err)
	}
	if err != nil {
		if err.Status < 400 || err.Status >= 500 || err.Msg == "" {
			t.Fatalf("error %+v: want a 4xx with a message", err)
		}
		return
	}
	o := j.Opts
	if j.Model == "" || o.NumPredict < -2 || o.NumCtx < 0 || o.Sample.Temperature < 0 ||
		o.Sample.TopP < 0 || o.Sample.TopP > 1 || o.Sample.MinP < 0 || o.Sample.MinP > 1 || o.Sample.TopK < 0 {
		t.Fatalf("accepted job out of range: %+v", j)
	}
	for _, s := range o.Stop {
		if s == "" {
			t.Fatalf("empty stop sequence accepted")
		}
	}
}

var fuzzSeeds = []string{
	``, `{}`, `[]`, `null`, `{"model":"m","prompt":"hi"}`, `{"model":"m",`,
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`,
	`{"model":"m","prompt":"x","options":{"temperature":0.2,"top_k":5,"top_p":0.5,"num_predict":-2,"stop":["a"],"seed":3}}`,
	`{"model":"m","keep_alive":"5m"}`, `{"model":"m","keep_alive":-1}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":"x","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","prompt":["a"],"max_tokens":3,"n":1,"temperature":2}`,
}

func FuzzParseOllamaGenerate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := parseOllamaGenerate(body)
		checkJob(t, j, err)
	})
}

func FuzzParseOllamaChat(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := parseOllamaChat(body)
		checkJob(t, j, err)
	})
}

func FuzzParseOpenAIChat(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := parseOpenAIChat(body)
		if j != nil {
			checkJob(t, j.job, err)
			if j.Opts.Sample.Temperature > 2 || (j.Opts.NumPredict != -1 && j.Opts.NumPredict < 1) {
				t.Fatalf("OpenAI limits violated: %+v", j.Opts)
			}
			return
		}
		checkJob(t, nil, err)
	})
}

func FuzzParseOpenAICompletion(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := parseOpenAICompletion(body)
		if j != nil {
			checkJob(t, j.job, err)
			if j.Prompt == "" || j.Opts.NumPredict < 1 {
				t.Fatalf("completion accepted without prompt or limit: %+v", j.job)
			}
			return
		}
		checkJob(t, nil, err)
	})
}

// tokBounder is a promptBounder over a real tokenizer, BOS included as the backend counts it.
type tokBounder struct{ tok tokenizer.Tokenizer }

func (b tokBounder) MinPromptTokens(text string) int { return 1 + tokenizer.MinTokens(b.tok, text) }

// TestTruncationCutIsFarFromTheTail: cutting a long prompt to a tail before tokenizing (so a huge
// body costs what the context costs) keeps exactly the tokens truncating the whole prompt's
// tokenization keeps, with stories260K's SentencePiece-style tokenizer on TinyStories text, for
// tails of several lengths: the cut lies more than a context of tokens before them.
func TestTruncationCutIsFarFromTheTail(t *testing.T) {
	tok, err := tokenizer.Load(shareddata.Path(t, "stories260K/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	encode := func(s string) []int { return append([]int{tok.BOS()}, tok.Encode(s)...) }
	head := []int{tok.BOS()}
	for _, size := range []int{150_000, 200_003, 250_007} {
		text := string(data[len(data)-size:])
		const ctxLen = 512
		tail := promptTail(tokBounder{tok}, text, 2*ctxLen)
		if len(tail) >= len(text) {
			t.Fatalf("%d bytes: no cut (tail of %d bytes): the test needs one", size, len(tail))
		}
		for _, keep := range []int{ctxLen - 128, ctxLen - 1} {
			want := truncatePrompt(encode(text), head, keep)
			if got := truncatePrompt(encode(tail), head, keep); !slices.Equal(got, want) {
				t.Fatalf("%d bytes cut to %d, keeping %d: truncated prompts differ", size, len(tail), keep)
			}
		}
	}
}

// replyConfig decides the split from the request, the template and the rendered prompt.
func TestReplyConfig(t *testing.T) {
	on, off := true, false
	msgs := []ChatMessage{{Role: "user", Content: "hi"}}
	both := capabilities{tools: true, thinking: true}
	tool := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)}
	cases := []struct {
		name   string
		j      job
		c      capabilities
		prompt string
		want   reply.Config
	}{
		{"thinking by default", job{Messages: msgs}, both, "<|im_start|>assistant\n", reply.Config{Thinking: true}},
		{"think true", job{Messages: msgs, Think: &on}, both, "x", reply.Config{Thinking: true}},
		{"think false", job{Messages: msgs, Think: &off}, both, "x<think>\n\n</think>\n\n", reply.Config{}},
		// Templates that open the block in the generation prompt (Qwen3 thinking releases).
		{"prompt opens the block", job{Messages: msgs}, both, "<|im_start|>assistant\n<think>\n", reply.Config{Thinking: true, InThinking: true}},
		// A closed block in the prompt (an earlier turn, or the no-think form) opens nothing.
		{"prompt closes the block", job{Messages: msgs}, both, "<think>\n\n</think>\n\n", reply.Config{Thinking: true}},
		{"no thinking in the template", job{Messages: msgs, Tools: tool}, capabilities{tools: true}, "x", reply.Config{Tools: true}},
		{"raw prompt", job{Prompt: "x<think>", Tools: tool}, both, "x<think>", reply.Config{}},
	}
	for _, c := range cases {
		if got := replyConfig(&c.j, c.c, c.prompt); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// The real Qwen3 template has tools and thinking; the fallbacks have neither.
func TestCapabilitiesOfTemplates(t *testing.T) {
	raw, err := os.ReadFile(shareddata.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tc struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, src string
		want      capabilities
	}{
		{"qwen3", tc.ChatTemplate, capabilities{tools: true, thinking: true}},
		{"chatml", chat.ChatMLSource, capabilities{}},
		// Renders tools, but in a format the parser cannot read back (a bare JSON call).
		{"other tool format", `{% if tools %}{{ tools | tojson }}{% endif %}`, capabilities{}},
		{"thinking only", `{{ messages }}<think></think>`, capabilities{thinking: true}},
	} {
		if got := capabilitiesOf(ModelInfo{Template: c.src}); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
