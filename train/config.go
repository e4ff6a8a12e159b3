package train

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
)

// DraftConfig is the shape of the draft and the hyper-parameters of one training run. Zero
// fields take defaults from the target (see WithDefaults), so DraftConfig{} is a usable start.
type DraftConfig struct {
	// Shape. Hidden is always the target's; the rest default to the target's attention and MLP
	// shape so the draft's cost per row is one target layer's.
	Layers       int     `json:"layers"`     // draft decoder layers (default 2 below 12 target layers, 3 below 24, else 5)
	BlockSize    int     `json:"block_size"` // B: anchor + B-1 masks (default 16)
	Taps         []int   `json:"taps"`       // target layers tapped (default: DFLASH.md rule for Layers taps)
	Heads        int     `json:"heads"`
	KVHeads      int     `json:"kv_heads"`
	HeadDim      int     `json:"head_dim"`
	Intermediate int     `json:"intermediate"`
	RMSEps       float32 `json:"rms_eps"`
	RopeTheta    float64 `json:"rope_theta"`
	// MaskID fills the block after its anchor; it must be inside the target's vocabulary. 0
	// means default: 151669 for Qwen3-sized vocabularies, else 0 itself (llama2.c's <unk>,
	// which text never produces).
	MaskID int `json:"mask_id"`

	// Arch is the draft architecture: "" or "dflash" (DFlash, written through model/dflash) or
	// "dflash2" (DFlash2: convolutions around every sublayer and the candidate selector, written
	// through model/dflash2). The fields below apply to dflash2 only; zero = default (2 taps,
	// groups of 16 channels or the largest power of two dividing hidden, rank 64 for hidden <= 256
	// else 256, 16 candidates, alpha 1). All are omitted from JSON when zero, so a DFlash
	// checkpoint's identity is unchanged.
	Arch          string  `json:"arch,omitempty"`
	ConvKernel    int     `json:"conv_kernel,omitempty"`    // conv_kernel_size: taps of each convolution
	ConvGroup     int     `json:"conv_group,omitempty"`     // conv_group_size: channels per dynamic kernel
	SelectorRank  int     `json:"selector_rank,omitempty"`  // r: codebook width
	SelectorTopK  int     `json:"selector_top_k,omitempty"` // K: candidates per slot
	SelectorAlpha float64 `json:"selector_alpha,omitempty"` // weight of the selector loss

	vocab int // the target's vocabulary (codebook rows), set by WithDefaults

	// Loss and optimisation.
	Gamma         float64 `json:"gamma"`           // position weight decay (default 7 for B >= 16, 4 below)
	LR            float64 `json:"lr"`              // peak AdamW learning rate (default 3e-3)
	MinLRFrac     float64 `json:"min_lr_frac"`     // cosine floor as a fraction of LR (default 0.1)
	WarmupSteps   int     `json:"warmup_steps"`    // linear warm-up (default Steps/20)
	Steps         int     `json:"steps"`           // optimizer steps (default 1000)
	WeightDecay   float64 `json:"weight_decay"`    // AdamW decoupled decay on matrices (default 0.01)
	Beta1         float64 `json:"beta1"`           // default 0.9
	Beta2         float64 `json:"beta2"`           // default 0.95
	ClipNorm      float64 `json:"clip_norm"`       // global gradient-norm clip (default 1)
	BatchSeqs     int     `json:"batch_seqs"`      // sequences per step (default 8)
	AnchorsPerSeq int     `json:"anchors_per_seq"` // anchors sampled per sequence and step (default 16)
	Seed          uint64  `json:"seed"`
	Init          float64 `json:"init"` // std of N(0, Init/sqrt(fan_in)) weight init (default 1)

	// Loss is what each block position learns (soft.go): "" or "hard", the cross-entropy against
	// the continuation's token; "soft", the cross-entropy against the target's renormalised
	// top-K probabilities at that position (needs data with soft targets); "mix",
	// (1-SoftWeight)*hard + SoftWeight*soft (SoftWeight default 0.5). Both terms carry the same
	// position weights w_k. For DFlash2 the same mix applies to the unary logits and to the
	// selector, whose soft targets are the target's restricted to its candidates
	// (d2selectForward). Omitted from JSON when hard, so a hard run's checkpoint identity is
	// unchanged.
	Loss       string  `json:"loss,omitempty"`
	SoftWeight float64 `json:"soft_weight,omitempty"`

	// Running (not part of the checkpoint's identity).
	Threads         int `json:"-"` // goroutines over the sequences of a step (default 2)
	CheckpointEvery int `json:"-"` // steps between checkpoints (default 100)
	ProgressEvery   int `json:"-"` // steps between progress lines (default 10)
}

// DefaultTaps is DFLASH.md's rule (model/dflash.DefaultTargetLayers: one draft layer taps the
// middle target layer, n > 1 spread round(1 + i*(L-4)/(n-1))), then clamped into range and made
// strictly ascending for tiny targets where the rule collides (L < n + 3).
func DefaultTaps(targetLayers, n int) []int { return dflash.SpreadTargetLayers(targetLayers, n) }

// WithDefaults fills zero fields from the target's shape and checks the result against it.
func (c DraftConfig) WithDefaults(t model.Config) (DraftConfig, error) {
	if c.Layers <= 0 {
		switch {
		case t.Layers < 12:
			c.Layers = 2
		case t.Layers < 24:
			c.Layers = 3
		default:
			c.Layers = 5
		}
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if len(c.Taps) == 0 {
		c.Taps = DefaultTaps(t.Layers, c.Layers)
	}
	if c.Heads <= 0 {
		c.Heads = t.Heads
	}
	if c.KVHeads <= 0 {
		c.KVHeads = t.KVHeads
	}
	if c.HeadDim <= 0 {
		c.HeadDim = t.HeadDim
		if c.HeadDim <= 0 && c.Heads > 0 {
			c.HeadDim = t.Hidden / c.Heads
		}
	}
	if c.Intermediate <= 0 {
		c.Intermediate = t.Intermediate
	}
	if c.RMSEps <= 0 {
		c.RMSEps = t.RMSEps
		if c.RMSEps <= 0 {
			c.RMSEps = 1e-6
		}
	}
	if c.RopeTheta <= 0 {
		c.RopeTheta = t.RopeTheta
		if c.RopeTheta <= 0 {
			c.RopeTheta = 10000
		}
	}
	if c.MaskID <= 0 {
		c.MaskID = 0
		if t.Vocab > 151669 {
			c.MaskID = 151669
		}
	}
	if c.Gamma <= 0 {
		c.Gamma = 7
		if c.BlockSize < 16 {
			c.Gamma = 4
		}
	}
	if c.Loss == LossHard {
		c.Loss = "" // one spelling of the hard loss, so its checkpoints keep their identity
	}
	if c.Loss == LossMix && c.SoftWeight == 0 {
		c.SoftWeight = 0.5
	}
	if c.LR <= 0 {
		c.LR = 3e-3
	}
	if c.MinLRFrac <= 0 {
		c.MinLRFrac = 0.1
	}
	if c.Steps <= 0 {
		c.Steps = 1000
	}
	if c.WarmupSteps <= 0 {
		c.WarmupSteps = max(1, c.Steps/20)
	}
	if c.WeightDecay < 0 {
		c.WeightDecay = 0
	} else if c.WeightDecay == 0 {
		c.WeightDecay = 0.01
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
	if c.BatchSeqs <= 0 {
		c.BatchSeqs = 8
	}
	if c.AnchorsPerSeq <= 0 {
		c.AnchorsPerSeq = 16
	}
	if c.Init <= 0 {
		c.Init = 1
	}
	if c.Threads <= 0 {
		c.Threads = 2
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = 100
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 10
	}
	if c.Arch == ArchDFlash {
		c.Arch = "" // one spelling of DFlash, so its checkpoints keep their identity
	}
	if c.isD2() {
		c.d2Defaults(t)
	}
	c.vocab = t.Vocab
	return c, c.check(t)
}

func (c DraftConfig) check(t model.Config) error {
	switch {
	case c.BlockSize < 2:
		return fmt.Errorf("draft config: block size %d, need at least 2", c.BlockSize)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("draft config: %d heads over %d kv heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("draft config: head dim %d must be positive and even (rotary pairs)", c.HeadDim)
	case c.Intermediate <= 0:
		return fmt.Errorf("draft config: intermediate size %d", c.Intermediate)
	case c.MaskID < 0 || c.MaskID >= t.Vocab:
		return fmt.Errorf("draft config: mask id %d outside the target vocabulary [0, %d)", c.MaskID, t.Vocab)
	case c.Arch != "" && c.Arch != ArchDFlash && c.Arch != ArchDFlash2:
		return fmt.Errorf("draft config: arch %q, want %q or %q", c.Arch, ArchDFlash, ArchDFlash2)
	case c.Loss != "" && c.Loss != LossHard && c.Loss != LossSoft && c.Loss != LossMix:
		return fmt.Errorf("draft config: loss %q, want %q, %q or %q", c.Loss, LossHard, LossSoft, LossMix)
	case c.Loss == LossMix && !(c.SoftWeight > 0 && c.SoftWeight <= 1):
		return fmt.Errorf("draft config: soft weight %g, want (0, 1]", c.SoftWeight)
	case c.Loss != LossMix && c.SoftWeight != 0:
		return fmt.Errorf("draft config: soft weight %g applies to the mix loss only, this run's is %q", c.SoftWeight, c.lossName())
	}
	if c.isD2() {
		if err := c.d2Check(t); err != nil {
			return err
		}
	}
	for i, id := range c.Taps {
		if id < 0 || id >= t.Layers {
			return fmt.Errorf("draft config: tap %d is layer %d, the target has %d layers", i, id, t.Layers)
		}
		if i > 0 && id <= c.Taps[i-1] {
			return fmt.Errorf("draft config: taps %v must be strictly ascending", c.Taps)
		}
	}
	return nil
}

// lossName is c.Loss with the hard loss spelled out.
func (c DraftConfig) lossName() string {
	if c.Loss == "" {
		return LossHard
	}
	return c.Loss
}

// hfConfig is the part of config.json (z-lab's layout, DFLASH.md section 2) LoadDraft reads.
type hfConfig struct {
	Architectures     []string `json:"architectures"`
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	VocabSize         int      `json:"vocab_size"`
	RMSNormEps        float64  `json:"rms_norm_eps"`
	RopeTheta         float64  `json:"rope_theta"`
	BlockSize         int      `json:"block_size"`
	NumTargetLayers   int      `json:"num_target_layers"`
	DFlashConfig      struct {
		MaskTokenID    int   `json:"mask_token_id"`
		TargetLayerIDs []int `json:"target_layer_ids"`
	} `json:"dflash_config"`
}

// dflashConfig is the model/dflash description of the draft, whose writer produces the folder
// the engine loads.
func (c DraftConfig) dflashConfig(t model.Config) dflash.Config {
	return dflash.Config{
		Hidden: t.Hidden, Intermediate: c.Intermediate, Layers: c.Layers, Heads: c.Heads,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, Vocab: t.Vocab, RMSEps: shortFloat(c.RMSEps),
		RopeTheta: c.RopeTheta, MaxPositions: t.MaxSeq, BlockSize: c.BlockSize,
		TargetLayerCount: t.Layers, MaskID: c.MaskID, TargetLayers: slices.Clone(c.Taps),
	}
}

// shortFloat widens f to the float64 with the shortest decimal form (1e-5, not 9.99999974e-06).
func shortFloat(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}
