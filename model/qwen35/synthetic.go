package qwen35

import (
	"fmt"
	"math"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// SyntheticNames lists the shapes SyntheticConfig knows.
var SyntheticNames = []string{"qwen3.5-0.8b", "qwen3.5-4b"}

// SyntheticConfig returns the real shape of a named Qwen3.5 model (QWEN35.md's table: the
// published 0.8B and 4B configs, both tied, full attention every fourth layer), for benchmarks
// with random weights.
func SyntheticConfig(name string) (Config, error) {
	shape := func(hidden, inter, layers, heads, kvHeads, valueHeads int) Config {
		c := Config{
			Config: model.Config{
				Arch: ArchCausalLM, Layers: layers, Hidden: hidden, Intermediate: inter, Heads: heads,
				KVHeads: kvHeads, HeadDim: 256, Vocab: 248320, MaxSeq: 262144, RMSEps: 1e-6,
				RopeTheta: 1e7, BOS: -1, DType: kernel.BF16, TiedEmbeddings: true,
			},
			KeyHeads: 16, ValueHeads: valueHeads, KeyDim: 128, ValueDim: 128, ConvKernel: 4, RotaryDim: 64,
		}
		for i := 0; i < layers; i++ {
			t := Linear
			if (i+1)%4 == 0 {
				t = Full
			}
			c.LayerTypes = append(c.LayerTypes, t)
		}
		return c
	}
	switch name {
	case "qwen3.5-0.8b":
		return shape(1024, 3584, 24, 8, 2, 16), nil
	case "qwen3.5-4b":
		return shape(2560, 9216, 32, 16, 4, 32), nil
	}
	return Config{}, fmt.Errorf("synthetic model %q unknown (have %v)", name, SyntheticNames)
}

// Synthetic builds a model of cfg's shape with random bf16 matrices (transformer.RandomBF16,
// N(0, 0.02)), zero-centred norms at w = 0 (effective weight 1), DeltaNet output norms of 1,
// conv kernels from N(0, 0.02) too, dt_bias 1 and A_log = log(1..16) over the value heads (the
// range of transformers' initialisation). The same cfg and seed give the same model.
func Synthetic(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("synthetic: %w", err)
	}
	cfg.DType = kernel.BF16
	h, inter := cfg.Hidden, cfg.Intermediate
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	var mats []transformer.RandomMatrix
	add := func(dst **kernel.Matrix, n, k int) {
		mats = append(mats, transformer.RandomMatrix{Dst: dst, N: n, K: k})
	}
	var emb, head *kernel.Matrix
	add(&emb, cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		l := &layers[i]
		l.Type = cfg.LayerTypes[i]
		l.AttnNorm, l.MLPNorm = ones(h), ones(h)
		if l.Type == Full {
			q, kvw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			a := &AttnWeights{QNorm: ones(cfg.HeadDim), KNorm: ones(cfg.HeadDim)}
			add(&a.Q, 2*q, h)
			add(&a.K, kvw, h)
			add(&a.V, kvw, h)
			add(&a.O, h, q)
			l.Attn = a
		} else {
			c, vw, hv := cfg.ConvChannels(), cfg.ValueHeads*cfg.ValueDim, cfg.ValueHeads
			d := &DeltaNetWeights{Norm: ones(cfg.ValueDim), DtBias: ones(hv), NegA: make([]float32, hv),
				Conv: normals(c*cfg.ConvKernel, seed^splitmix.Mix(uint64(i)+0xC0))}
			for j := range d.NegA {
				d.NegA[j] = -float32(1 + j%16) // -exp(A_log) with A_log = log(1 + j%16)
			}
			add(&d.QKV, c, h)
			add(&d.Z, vw, h)
			add(&d.B, hv, h)
			add(&d.A, hv, h)
			add(&d.Out, h, vw)
			l.DeltaNet = d
		}
		add(&l.Gate, inter, h)
		add(&l.Up, inter, h)
		add(&l.Down, h, inter)
	}
	if !cfg.TiedEmbeddings {
		add(&head, cfg.Vocab, h)
	}
	transformer.RandomBF16(seed, mats)
	if cfg.TiedEmbeddings {
		head = emb
	}
	return newModel(cfg, emb, head, layers, ones(h))
}

// normals draws n values of N(0, 0.02) by Box-Muller from a splitmix stream.
func normals(n int, seed uint64) []float32 {
	v := make([]float32, n)
	s := seed
	for i := range v {
		s = splitmix.Mix(s)
		u1 := (float64(s>>11) + 0.5) / (1 << 53)
		s = splitmix.Mix(s)
		u2 := float64(s>>11) / (1 << 53)
		v[i] = float32(0.02 * math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2))
	}
	return v
}
