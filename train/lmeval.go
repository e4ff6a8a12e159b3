package train

import (
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/tokenizer"
)

// BPBOptions tune EvalBitsPerByte.
type BPBOptions struct {
	MaxBytes int  // evaluate the first MaxBytes bytes of the file, cut back to a line end (0: all)
	Lower    bool // lower-case the text first (for models trained on lower-cased text)
	Window   int  // tokens per forward (default min(MaxSeq, 256))
}

// BPBResult is the outcome of a bits-per-byte evaluation.
type BPBResult struct {
	BitsPerByte float64
	Bits        float64 // summed -log2 p over the predicted tokens
	Bytes       int     // UTF-8 bytes of the evaluated text
	Tokens      int     // tokens of the text (BOS excluded)
	Predicted   int     // tokens scored
}

// EvalBitsPerByte is the model's code length of the first maxBytes of the text at textPath
// (cut back to a line end): sum over tokens of -log2 p(token | preceding tokens of its window),
// divided by the text's bytes. Comparable across tokenizers because it counts bytes, not tokens.
func EvalBitsPerByte(t model.Target, tok tokenizer.Tokenizer, textPath string, maxBytes int) (float64, error) {
	r, err := EvalBPB(t, tok, textPath, BPBOptions{MaxBytes: maxBytes})
	return r.BitsPerByte, err
}

// EvalBPB is EvalBitsPerByte with options. The text is encoded in one call; BOS is prepended
// when tok.AddBOS(), so every token is scored; otherwise the first token has no context and
// is not scored (one token in a text of thousands). Windows overlap by one token: each starts
// with the last token of the previous one, so every later token is scored once, with the
// context of its window only.
func EvalBPB(t model.Target, tok tokenizer.Tokenizer, textPath string, o BPBOptions) (BPBResult, error) {
	raw, err := os.ReadFile(textPath)
	if err != nil {
		return BPBResult{}, fmt.Errorf("bits per byte: %w", err)
	}
	text := string(raw)
	if o.MaxBytes > 0 && len(text) > o.MaxBytes {
		text = text[:o.MaxBytes]
		if i := strings.LastIndexByte(text, '\n'); i > 0 {
			text = text[:i+1]
		}
	}
	if o.Lower {
		text = strings.ToLower(text)
	}
	return evalBPBText(t, tok, text, o.Window)
}

func evalBPBText(t model.Target, tok tokenizer.Tokenizer, text string, window int) (BPBResult, error) {
	cfg := t.Config()
	ids := tok.Encode(text)
	res := BPBResult{Bytes: len(text), Tokens: len(ids)}
	if tok.AddBOS() && tok.BOS() >= 0 {
		ids = append([]int{tok.BOS()}, ids...)
	}
	if window <= 0 {
		window = min(cfg.MaxSeq, 256)
	}
	if window < 2 {
		return res, fmt.Errorf("bits per byte: window %d too small", window)
	}
	c := t.NewCache(window)
	for s := 0; s+1 < len(ids); s += window - 1 {
		w := ids[s:min(s+window, len(ids))]
		if err := c.Rewind(0); err != nil {
			return res, fmt.Errorf("bits per byte: %w", err)
		}
		out, err := t.Forward(c, model.Request{Tokens: w, Logits: model.LogitsAll})
		if err != nil {
			return res, fmt.Errorf("bits per byte: %w", err)
		}
		V := cfg.Vocab
		for i := 0; i+1 < len(w); i++ {
			lg := out.Logits[i*V : (i+1)*V]
			res.Bits += -logSoftmaxAt(lg, w[i+1]) / math.Ln2
			res.Predicted++
		}
	}
	if res.Bytes > 0 {
		res.BitsPerByte = res.Bits / float64(res.Bytes)
	}
	return res, nil
}

// logSoftmaxAt returns log p[target] of logits, in float64.
func logSoftmaxAt(lg []float32, target int) float64 {
	m := lg[0]
	for _, v := range lg[1:] {
		m = max(m, v)
	}
	var sum float64
	for _, v := range lg {
		sum += math.Exp(float64(v - m))
	}
	return float64(lg[target]-m) - math.Log(sum)
}
