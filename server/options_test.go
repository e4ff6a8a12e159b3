package server

import (
	"encoding/json"
	"testing"

	"github.com/dflash/dflash/sample"
)

// TestOptionsParseToSampler: both APIs' request options become the sampler's options in one
// step, with each API's defaults and conventions applied (this used to be a second conversion
// in the backend).
func TestOptionsParseToSampler(t *testing.T) {
	ollama := func(opts string) sample.Options {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(opts), &m); err != nil {
			t.Fatal(err)
		}
		o, rerr := parseOllamaOptions(m)
		if rerr != nil {
			t.Fatalf("%s: %v", opts, rerr)
		}
		return o.Sample
	}
	cases := []struct {
		name string
		got  sample.Options
		want sample.Options
	}{
		{"ollama defaults", ollama(`{"seed": 5}`),
			sample.Options{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.1, PenaltyWindow: 64, Seed: 5}},
		// repeat_last_n 0 is a window of no tokens: every penalty is off.
		{"window 0", ollama(`{"seed": 1, "temperature": 0, "top_k": 0, "top_p": 1, "repeat_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.2, "repeat_last_n": 0}`),
			sample.Options{TopP: 1, RepeatPenalty: 1, PenaltyWindow: 0, Seed: 1}},
		// -1 means the whole context in ollama: the sampler's "all".
		{"window all", ollama(`{"seed": 1, "repeat_penalty": 1.2, "repeat_last_n": -1}`),
			sample.Options{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.2, PenaltyWindow: -1, Seed: 1}},
		// A negative seed keeps its bits.
		{"negative seed", ollama(`{"seed": -1, "min_p": 0.05}`),
			sample.Options{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, PenaltyWindow: 64, Seed: 1<<64 - 1}},
	}
	j, rerr := parseOpenAIChat([]byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": -1, "presence_penalty": 0.5, "frequency_penalty": 0.25}`))
	if rerr != nil {
		t.Fatal(rerr)
	}
	cases = append(cases, struct {
		name      string
		got, want sample.Options
	}{"openai penalties", j.Opts.Sample,
		sample.Options{Temperature: 1, TopP: 1, RepeatPenalty: 1, PenaltyWindow: 64, PresencePenalty: 0.5, FrequencyPenalty: 0.25, Seed: 1<<64 - 1}})
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, c.got, c.want)
		}
		if err := c.got.Validate(); err != nil {
			t.Errorf("%s: parsed options do not validate: %v", c.name, err)
		}
	}
	// Without a seed, two requests draw different seeds (a collision has probability 2^-64).
	if a, b := ollama(`{}`), ollama(`{}`); a.Seed == b.Seed {
		t.Errorf("random seeds collide: %d", a.Seed)
	}
	a, _ := parseOpenAIChat([]byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`))
	b, _ := parseOpenAIChat([]byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`))
	if a.Opts.Sample.Seed == b.Opts.Sample.Seed {
		t.Errorf("OpenAI random seeds collide: %d", a.Opts.Sample.Seed)
	}
}

// TestSeededMarksTheClientsSeed: only a seed the client gave makes a request seeded (a fixed
// draft depth, so it reproduces); the random seed of an unseeded request does not.
func TestSeededMarksTheClientsSeed(t *testing.T) {
	for _, tc := range []struct {
		body   string
		seeded bool
	}{
		{`{"model": "m", "prompt": "hi", "options": {"seed": 0}}`, true},
		{`{"model": "m", "prompt": "hi", "options": {"seed": null}}`, false},
		{`{"model": "m", "prompt": "hi", "options": {"temperature": 1}}`, false},
	} {
		j, rerr := parseOllamaGenerate([]byte(tc.body))
		if rerr != nil {
			t.Fatal(rerr)
		}
		if j.Opts.Seeded != tc.seeded {
			t.Errorf("%s: seeded %v, want %v", tc.body, j.Opts.Seeded, tc.seeded)
		}
	}
	for _, tc := range []struct {
		body   string
		seeded bool
	}{
		{`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 3}`, true},
		{`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`, false},
	} {
		j, rerr := parseOpenAIChat([]byte(tc.body))
		if rerr != nil {
			t.Fatal(rerr)
		}
		if j.Opts.Seeded != tc.seeded {
			t.Errorf("%s: seeded %v, want %v", tc.body, j.Opts.Seeded, tc.seeded)
		}
	}
}
