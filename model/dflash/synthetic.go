package dflash

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// SyntheticTarget is one target shape a synthetic draft can be built for: the Qwen3 shapes of
// model/transformer's synthetic targets, plus Qwen3-8B, whose published draft exists but whose
// 16 GB bf16 target does not fit these machines, and the Qwen3.5 shapes of model/qwen35's.
// HeadDim and Heads / KVHeads are those of the target's (full-attention) layers, which a draft's
// attention follows.
type SyntheticTarget struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, Intermediate, Vocab int
	MaskID                                                       int
	RopeTheta                                                    float64
	MaxPositions                                                 int
	// Suffix ends the draft's name: "-dflash-b16" as z-lab names its Qwen3 drafts,
	// "-dflash" as its Qwen3.5 ones (Qwen3.5-4B-DFlash).
	Suffix string
}

// syntheticTargets are the published Qwen3 configs (Qwen/Qwen3-*/config.json): every size has 8
// KV heads of 128, the 151936-row vocabulary and rope_theta 1e6; and the Qwen3.5 ones
// (QWEN35.md's table: heads of 256, the 248320-row vocabulary, rope_theta 1e7).
var syntheticTargets = map[string]SyntheticTarget{
	"qwen3-0.6b": qwen3Target(1024, 28, 16, 3072),
	"qwen3-1.7b": qwen3Target(2048, 28, 16, 6144),
	"qwen3-4b":   qwen3Target(2560, 36, 32, 9728),
	"qwen3-8b":   qwen3Target(4096, 36, 32, 12288),
	"qwen3.5-0.8b": {Hidden: 1024, Layers: 24, Heads: 8, KVHeads: 2, HeadDim: 256, Intermediate: 3584, Vocab: 248320,
		MaskID: Qwen35MaskID, RopeTheta: 1e7, MaxPositions: 262144, Suffix: "-dflash"},
	"qwen3.5-4b": {Hidden: 2560, Layers: 32, Heads: 16, KVHeads: 4, HeadDim: 256, Intermediate: 9216, Vocab: 248320,
		MaskID: Qwen35MaskID, RopeTheta: 1e7, MaxPositions: 262144, Suffix: "-dflash"},
}

func qwen3Target(hidden, layers, heads, inter int) SyntheticTarget {
	return SyntheticTarget{Hidden: hidden, Layers: layers, Heads: heads, KVHeads: 8, HeadDim: 128, Intermediate: inter,
		Vocab: 151936, MaskID: Qwen3MaskID, RopeTheta: 1e6, MaxPositions: 40960, Suffix: "-dflash-b16"}
}

// Qwen3MaskID is the mask token of z-lab's Qwen3 drafts: the first id past Qwen3's added
// special tokens.
const Qwen3MaskID = 151669

// Qwen35MaskID is the mask token of the Qwen3.5 drafts (QWEN35.md section 7; also what
// SpecForge's Qwen3.5-4B draft config sets).
const Qwen35MaskID = 248070

// SyntheticNames lists the synthetic drafts, "<target><suffix>" for every target shape.
func SyntheticNames() []string {
	var out []string
	for name, t := range syntheticTargets {
		out = append(out, name+t.Suffix)
	}
	slices.Sort(out)
	return out
}

// SyntheticConfig is the shape of a named synthetic draft: z-lab's Qwen3-4B-DFlash-b16 and
// Qwen3-8B-DFlash-b16 (DFLASH.md: 5 layers, B = 16), and the same rule applied to the smaller
// Qwen3 targets so a simulation runs at every size. A DFlash draft's attention and MLP follow its
// target's (hidden, heads, KV heads, head_dim, intermediate size, vocabulary), its taps follow
// the default rule for 5 draft layers ([1 9 17 25 33] on 36 target layers, [1 7 13 19 25] on 28),
// and it drafts with Qwen3's mask token. The shape is derived from DFLASH.md and the targets'
// published configs, not read from the drafts' own config.json (not reachable from here).
//
// The Qwen3.5 drafts (qwen3.5-4b-dflash for z-lab's Qwen3.5-4B-DFlash, qwen3.5-0.8b-dflash by the
// same rule) follow what QWEN35.md section 7 and SpecForge's Qwen3.5-4B draft config give: 5
// layers of the target's full-attention shape (16 heads / 4 KV heads of 256, intermediate 9216
// for 4B), block 16, mask 248070, rope_theta 1e7 over the whole head (as z-lab's MLX code builds
// the draft's RoPE: a partial_rotary_factor in the config does not reach it), taps by the same
// rule ([1 8 15 22 29] on 32 layers, [1 6 11 16 21] on 24). That 4B draft is 1.04 GB of bf16
// weights; one third-party listing gives z-lab's as 1.18 GiB (1.27 GB), so the published one may
// be a layer deeper: a simulation with this shape slightly under-counts the draft's cost.
//
// name is "<target><suffix>" or just "<target>" (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,
// qwen3.5-0.8b, qwen3.5-4b).
func SyntheticConfig(name string) (Config, error) {
	t, ok := syntheticTargets[name]
	for base, st := range syntheticTargets {
		if name == base+st.Suffix {
			t, ok = st, true
		}
	}
	if !ok {
		return Config{}, fmt.Errorf("synthetic draft %q unknown (have %s)", name, strings.Join(SyntheticNames(), ", "))
	}
	const layers, block = 5, 16
	return Config{
		Hidden: t.Hidden, Intermediate: t.Intermediate, Layers: layers,
		Heads: t.Heads, KVHeads: t.KVHeads, HeadDim: t.HeadDim, Vocab: t.Vocab,
		RMSEps: 1e-6, RopeTheta: t.RopeTheta, MaxPositions: t.MaxPositions,
		BlockSize: block, TargetLayerCount: t.Layers, MaskID: t.MaskID,
		TargetLayers: DefaultTargetLayers(t.Layers, layers),
	}, nil
}

// Synthetic builds the named synthetic draft for target with random bf16 weights (see Random);
// the target must have the shape the draft was made for.
func Synthetic(name string, target model.Target, seed uint64) (*Draft, error) {
	cfg, err := SyntheticConfig(name)
	if err != nil {
		return nil, err
	}
	d, err := Random(target, cfg, seed, kernel.BF16)
	if err != nil {
		return nil, fmt.Errorf("synthetic draft %s: %w", name, err)
	}
	return d, nil
}
