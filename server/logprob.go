package server

import (
	"math"
	"unicode/utf8"
)

// tokenLogprob is a generated token's Logprob and where its text starts in the output (OpenAI
// completions' text_offset): the bytes of output text shown before the token's own.
type tokenLogprob struct {
	Logprob
	Offset int
}

// minLogprob is the floor of reported log probabilities: JSON has no -Inf, and OpenAI reports
// tokens the model rules out as -9999.
const minLogprob = -9999

func clampLogprob(v float64) float64 {
	if math.IsNaN(v) || v < minLogprob {
		return minLogprob
	}
	return v
}

// tokenBytes is a token text's bytes as OpenAI and ollama list them (a token that is part of a
// UTF-8 character has bytes that do not decode on their own; its token string then shows U+FFFD).
func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// validToken is s with invalid UTF-8 replaced by U+FFFD, which encoding/json would do anyway;
// done here so the token text is the same in every encoder.
func validToken(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s))
}

// OllamaTokenLogprob is one alternative of ollama's logprobs.
type OllamaTokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes,omitempty"`
}

// OllamaLogprob is one generated token's entry of ollama's "logprobs" (api.Logprob).
type OllamaLogprob struct {
	OllamaTokenLogprob
	TopLogprobs []OllamaTokenLogprob `json:"top_logprobs,omitempty"`
}

func ollamaLogprobs(lps []tokenLogprob) []OllamaLogprob {
	if len(lps) == 0 {
		return nil
	}
	out := make([]OllamaLogprob, len(lps))
	for i, lp := range lps {
		out[i].OllamaTokenLogprob = ollamaTokenLogprob(lp.TokenLogprob)
		for _, a := range lp.Top {
			out[i].TopLogprobs = append(out[i].TopLogprobs, ollamaTokenLogprob(a))
		}
	}
	return out
}

func ollamaTokenLogprob(t TokenLogprob) OllamaTokenLogprob {
	return OllamaTokenLogprob{Token: validToken(t.Token), Logprob: clampLogprob(t.Logprob), Bytes: tokenBytes(t.Token)}
}

// OpenAITopLogprob is one alternative of a chat completion's logprobs.
type OpenAITopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// OpenAILogprob is one token of a chat completion's logprobs.content.
type OpenAILogprob struct {
	OpenAITopLogprob
	TopLogprobs []OpenAITopLogprob `json:"top_logprobs"`
}

// OpenAIChatLogprobs is a chat choice's "logprobs" object.
type OpenAIChatLogprobs struct {
	Content []OpenAILogprob `json:"content"`
	Refusal *string         `json:"refusal"`
}

func openAIChatLogprobs(lps []tokenLogprob) *OpenAIChatLogprobs {
	out := &OpenAIChatLogprobs{Content: make([]OpenAILogprob, len(lps))}
	for i, lp := range lps {
		c := &out.Content[i]
		c.OpenAITopLogprob = openAITopLogprob(lp.TokenLogprob)
		c.TopLogprobs = make([]OpenAITopLogprob, len(lp.Top))
		for k, a := range lp.Top {
			c.TopLogprobs[k] = openAITopLogprob(a)
		}
	}
	return out
}

func openAITopLogprob(t TokenLogprob) OpenAITopLogprob {
	return OpenAITopLogprob{Token: validToken(t.Token), Logprob: clampLogprob(t.Logprob), Bytes: tokenBytes(t.Token)}
}

// OpenAICompletionLogprobs is a text completion choice's "logprobs" object (the legacy shape:
// parallel lists, the alternatives as token -> logprob maps).
type OpenAICompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// openAICompletionLogprobs lists lps. Offsets count from the start of the whole completion, in a
// streamed chunk too, as OpenAI's do.
func openAICompletionLogprobs(lps []tokenLogprob) *OpenAICompletionLogprobs {
	out := &OpenAICompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, validToken(lp.Token))
		out.TokenLogprobs = append(out.TokenLogprobs, clampLogprob(lp.TokenLogprob.Logprob))
		top := make(map[string]float64, len(lp.Top))
		for _, a := range lp.Top {
			// Two tokens with the same text (rare: a special token's name) keep the likelier.
			if _, ok := top[validToken(a.Token)]; !ok {
				top[validToken(a.Token)] = clampLogprob(a.Logprob)
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, lp.Offset)
	}
	return out
}
