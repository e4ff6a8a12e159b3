package bpetrain

import "github.com/dflash/dflash/tokenizer"

// PatternQwen2 is the split pattern of Qwen2/Qwen3's tokenizer.json (tokenizer.PatternQwen2).
// package tokenizer splits it with a hand-written matcher, so it is the default: training and
// encoding both run fast, and single digits keep numbers from taking vocabulary a small model
// cannot use.
const PatternQwen2 = tokenizer.PatternQwen2
