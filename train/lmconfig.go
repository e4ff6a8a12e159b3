package train

import (
	"fmt"
	"math"
)

// TargetConfig is the shape of a small Qwen3-architecture causal LM and the hyper-parameters of
// one training run (TrainTarget). Zero fields take defaults (see WithDefaults), sized so that
// tinystories_4MB.txt with the 4096-token BPE trains in about a quarter of an hour on two cores.
type TargetConfig struct {
	// Shape (Qwen3: per-head q/k RMSNorm, rotate-half RoPE, grouped-query attention, SwiGLU,
	// tied embeddings).
	Layers       int     `json:"layers"`       // default 6
	Hidden       int     `json:"hidden"`       // default 192
	Heads        int     `json:"heads"`        // default 4
	KVHeads      int     `json:"kv_heads"`     // default 2
	HeadDim      int     `json:"head_dim"`     // default Hidden/Heads
	Intermediate int     `json:"intermediate"` // default 2.75*Hidden rounded to a multiple of 16
	SeqLen       int     `json:"seq_len"`      // training window (default 256)
	Vocab        int     `json:"vocab"`        // default: the tokenizer's
	RopeTheta    float64 `json:"rope_theta"`   // default 10000
	RMSEps       float32 `json:"rms_eps"`      // default 1e-6

	// Optimisation.
	LR          float64 `json:"lr"`           // peak AdamW learning rate (default 3e-3)
	MinLRFrac   float64 `json:"min_lr_frac"`  // cosine floor as a fraction of LR (default 0.1)
	Epochs      float64 `json:"epochs"`       // passes over the windows when Steps is 0 (default 2)
	Steps       int     `json:"steps"`        // optimizer steps (default from Epochs)
	Warmup      int     `json:"warmup"`       // linear warm-up steps (default min(100, Steps/10))
	WeightDecay float64 `json:"weight_decay"` // decoupled, on matrices (default 0.1; negative: none)
	Beta1       float64 `json:"beta1"`        // default 0.9
	Beta2       float64 `json:"beta2"`        // default 0.95
	ClipNorm    float64 `json:"clip_norm"`    // global gradient-norm clip (default 1)
	BatchSeqs   int     `json:"batch_seqs"`   // windows per step (default 8)
	Seed        uint64  `json:"seed"`
	InitStd     float64 `json:"init_std"` // embedding init std (default 0.02); matrices use 1/sqrt(fan_in)

	// Running and output (not part of the checkpoint's identity).
	Threads         int    `json:"-"` // goroutines over the windows of a step (default 2)
	CheckpointEvery int    `json:"-"` // steps between checkpoints (default 200)
	ProgressEvery   int    `json:"-"` // steps between progress lines (default 10)
	MaxPositions    int    `json:"-"` // max_position_embeddings written (default 2048)
	BF16            bool   `json:"-"` // store model.safetensors in bf16 (halves the folder; default f32)
	TokenizerDir    string `json:"-"` // folder whose tokenizer files are copied into the output ("" = none)
}

// WithDefaults fills zero fields; vocab is the tokenizer's size, windows the number of training
// windows (for the Epochs-derived step count).
func (c TargetConfig) WithDefaults(vocab, windows int) (TargetConfig, error) {
	if c.Layers <= 0 {
		c.Layers = 6
	}
	if c.Hidden <= 0 {
		c.Hidden = 192
	}
	if c.Heads <= 0 {
		c.Heads = 4
	}
	if c.KVHeads <= 0 {
		c.KVHeads = min(2, c.Heads)
	}
	if c.HeadDim <= 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.Intermediate <= 0 {
		c.Intermediate = (c.Hidden*11/4 + 15) / 16 * 16
	}
	if c.SeqLen <= 0 {
		c.SeqLen = 256
	}
	if c.Vocab <= 0 {
		c.Vocab = vocab
	}
	if c.RopeTheta <= 0 {
		c.RopeTheta = 10000
	}
	if c.RMSEps <= 0 {
		c.RMSEps = 1e-6
	}
	if c.LR <= 0 {
		c.LR = 3e-3
	}
	if c.MinLRFrac <= 0 {
		c.MinLRFrac = 0.1
	}
	if c.BatchSeqs <= 0 {
		c.BatchSeqs = 8
	}
	if c.Epochs <= 0 {
		c.Epochs = 2
	}
	if c.Steps <= 0 {
		c.Steps = max(1, int(math.Ceil(c.Epochs*float64(windows)/float64(c.BatchSeqs))))
	}
	if c.Warmup <= 0 {
		c.Warmup = max(1, min(100, c.Steps/10))
	}
	if c.WeightDecay < 0 {
		c.WeightDecay = 0
	} else if c.WeightDecay == 0 {
		c.WeightDecay = 0.1
	}
	if c.Beta1 <= 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 <= 0 {
		c.Beta2 = 0.95
	}
	if c.ClipNorm <= 0 {
		c.ClipNorm = 1
	}
	if c.InitStd <= 0 {
		c.InitStd = 0.02
	}
	if c.Threads <= 0 {
		c.Threads = 2
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = 200
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 10
	}
	if c.MaxPositions <= 0 {
		c.MaxPositions = 2048
	}
	switch {
	case c.Heads%c.KVHeads != 0:
		return c, fmt.Errorf("target config: %d heads over %d kv heads", c.Heads, c.KVHeads)
	case c.HeadDim%2 != 0:
		return c, fmt.Errorf("target config: head dim %d must be even (rotary pairs)", c.HeadDim)
	case c.Vocab < vocab:
		return c, fmt.Errorf("target config: vocab %d is smaller than the tokenizer's %d", c.Vocab, vocab)
	case c.SeqLen < 2:
		return c, fmt.Errorf("target config: seq len %d, need at least 2", c.SeqLen)
	}
	return c, nil
}
