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
// 16 GB bf16 target does not fit these machines.
type SyntheticTarget struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, Intermediate, Vocab int
}

// syntheticTargets are the published Qwen3 configs (Qwen/Qwen3-*/config.json): every size has 8
// KV heads of 128, the 151936-row vocabulary and rope_theta 1e6.
var syntheticTargets = map[string]SyntheticTarget{
	"qwen3-0.6b": {Hidden: 1024, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Intermediate: 3072, Vocab: 151936},
	"qwen3-1.7b": {Hidden: 2048, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Intermediate: 6144, Vocab: 151936},
	"qwen3-4b":   {Hidden: 2560, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 9728, Vocab: 151936},
	"qwen3-8b":   {Hidden: 4096, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 12288, Vocab: 151936},
}

// Qwen3MaskID is the mask token of z-lab's Qwen3 drafts: the first id past Qwen3's added
// special tokens.
const Qwen3MaskID = 151669

// SyntheticNames lists the synthetic drafts, "<target>-dflash-b16" for every target shape.
func SyntheticNames() []string {
	var out []string
	for t := range syntheticTargets {
		out = append(out, t+"-dflash-b16")
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
// name is "<target>-dflash-b16" or just "<target>" (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b).
func SyntheticConfig(name string) (Config, error) {
	t, ok := syntheticTargets[strings.TrimSuffix(name, "-dflash-b16")]
	if !ok {
		return Config{}, fmt.Errorf("synthetic draft %q unknown (have %s)", name, strings.Join(SyntheticNames(), ", "))
	}
	const layers, block = 5, 16
	return Config{
		Hidden: t.Hidden, Intermediate: t.Intermediate, Layers: layers,
		Heads: t.Heads, KVHeads: t.KVHeads, HeadDim: t.HeadDim, Vocab: t.Vocab,
		RMSEps: 1e-6, RopeTheta: 1000000, MaxPositions: 40960,
		BlockSize: block, TargetLayerCount: t.Layers, MaskID: Qwen3MaskID,
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
