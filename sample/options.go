package sample

import (
	"fmt"
	"math"
)

// DefaultPenaltyWindow is the number of most recent history tokens penalties look at when
// Options.PenaltyWindow is 0 (ollama's repeat_last_n default).
const DefaultPenaltyWindow = 64

// Options are a request's sampling settings. Temperature 0 means greedy.
type Options struct {
	Temperature float32
	TopK        int     // 0 = off
	TopP        float32 // 0 or 1 = off
	MinP        float32 // 0 = off
	// RepeatPenalty follows llama.cpp/ollama: for a token seen in the window,
	// logit > 0 ? logit/pen : logit*pen, applied once however often the token was seen.
	RepeatPenalty    float32 // 0 or 1 = off
	PresencePenalty  float32 // subtracted once from a token present in the window
	FrequencyPenalty float32 // subtracted count times from a token seen count times in the window
	PenaltyWindow    int     // how many most recent history tokens count (0 = 64 default; -1 = all)
	// Seed keys every draw (Sampler.Uniform): the same Seed gives the same draw for the same
	// position and purpose, on every platform, however many draws came before.
	Seed uint64
	// Coupled chooses each sampled token by the exponential race of Sampler.Race instead of a
	// Draw: exactly the same distribution, and with speculation the same tokens whatever the
	// draft and its depth, since draft and target race with the position's one set of arrival
	// times. Greedy decoding ignores it (argmax either way).
	Coupled bool
}

// Greedy reports whether tokens are chosen by argmax. Any temperature that is not positive
// (including a NaN one that Validate would refuse) decodes greedily, so a sampler built from
// unvalidated options still behaves deterministically.
func (o Options) Greedy() bool { return !(o.Temperature > 0) }

// Race reports whether sampled tokens are chosen by the coupled race (Sampler.Race): Coupled and
// not greedy.
func (o Options) Race() bool { return o.Coupled && !o.Greedy() }

// OptionError says which option is out of range. Field is the API name of the option (the
// ollama/OpenAI request field), so a server can return it to the client as is.
type OptionError struct {
	Field  string
	Value  any
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("sample: %s = %v: %s", e.Field, e.Value, e.Reason)
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// Validate reports the first option outside its range as an *OptionError naming the field.
func (o Options) Validate() error {
	switch {
	case !finite(o.Temperature) || o.Temperature < 0:
		return &OptionError{"temperature", o.Temperature, "must be a finite number >= 0"}
	case o.TopK < 0:
		return &OptionError{"top_k", o.TopK, "must be >= 0 (0 = off)"}
	case !finite(o.TopP) || o.TopP < 0 || o.TopP > 1:
		return &OptionError{"top_p", o.TopP, "must be in [0, 1] (0 or 1 = off)"}
	case !finite(o.MinP) || o.MinP < 0 || o.MinP > 1:
		return &OptionError{"min_p", o.MinP, "must be in [0, 1] (0 = off)"}
	case !finite(o.RepeatPenalty) || o.RepeatPenalty < 0:
		return &OptionError{"repeat_penalty", o.RepeatPenalty, "must be a finite number >= 0 (0 or 1 = off)"}
	case !finite(o.PresencePenalty):
		return &OptionError{"presence_penalty", o.PresencePenalty, "must be finite"}
	case !finite(o.FrequencyPenalty):
		return &OptionError{"frequency_penalty", o.FrequencyPenalty, "must be finite"}
	case o.PenaltyWindow < -1:
		return &OptionError{"repeat_last_n", o.PenaltyWindow, "must be -1 (all history), 0 (default 64) or positive"}
	}
	return nil
}

func (o Options) topPActive() bool { return o.TopP > 0 && o.TopP < 1 }
func (o Options) minPActive() bool { return o.MinP > 0 }
func (o Options) penaltiesActive() bool {
	return (o.RepeatPenalty > 0 && o.RepeatPenalty != 1) || o.PresencePenalty != 0 || o.FrequencyPenalty != 0
}
