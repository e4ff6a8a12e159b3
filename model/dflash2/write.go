package dflash2

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// Write stores a DFlash2 draft folder: config.json and model.safetensors holding exactly
// cfg.Tensors(), each taken from weights by name (row-major, [out][in] for matrices) and stored
// as dtype (kernel.F32 or kernel.BF16; one dtype per file, norms included, as the reference
// does). A missing, extra or misshaped weight is an error, and nothing is written then.
func Write(dir string, cfg Config, weights map[string][]float32, dtype kernel.DType) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("write dflash2 %s: config: %w", dir, err)
	}
	if dtype != kernel.F32 && dtype != kernel.BF16 {
		return fmt.Errorf("write dflash2 %s: dtype %v, want f32 or bf16", dir, dtype)
	}
	var errs []error
	known := map[string]bool{}
	var ts []safetensors.WriteTensor
	for _, t := range cfg.Tensors() {
		known[t.Name] = true
		w, ok := weights[t.Name]
		n := 1
		for _, s := range t.Shape {
			n *= s
		}
		if !ok || len(w) != n {
			errs = append(errs, fmt.Errorf("tensor %s: have %d floats, want shape %v", t.Name, len(w), t.Shape))
			continue
		}
		wt := safetensors.WriteTensor{Name: t.Name, DType: safetensors.F32, Shape: t.Shape}
		if dtype == kernel.BF16 {
			b := make([]uint16, len(w))
			for i, v := range w {
				b[i] = kernel.F32ToBF16(v)
			}
			wt.DType, wt.Data = safetensors.BF16, safetensors.BF16Bytes(b)
		} else {
			wt.Data = safetensors.F32Bytes(w)
		}
		ts = append(ts, wt)
	}
	for name := range weights {
		if !known[name] {
			errs = append(errs, fmt.Errorf("tensor %s is not part of a DFlash2 draft of this config", name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("write dflash2 %s: %w", dir, errors.Join(errs...))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write dflash2 %s: %w", dir, err)
	}
	torch := "float32"
	if dtype == kernel.BF16 {
		torch = "bfloat16"
	}
	js, err := cfg.JSON(torch)
	if err != nil {
		return fmt.Errorf("write dflash2 %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write dflash2 %s: %w", dir, err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("write dflash2 %s: %w", dir, err)
	}
	return nil
}

// RandomWeights returns weights for every tensor of cfg, deterministic per seed: matrices
// N(0, 0.02) (fc and kernel projections too, so the dynamic kernels are live), norms 1,
// base kernels identity plus N(0, 0.1) (so every tap contributes), codebooks N(0, 0.5) (so
// the selector's transition term moves candidate rankings).
func RandomWeights(cfg Config, seed uint64) map[string][]float32 {
	rng := &splitmix.Stream{State: seed}
	out := map[string][]float32{}
	for _, t := range cfg.Tensors() {
		n := 1
		for _, s := range t.Shape {
			n *= s
		}
		w := make([]float32, n)
		name := t.Name
		switch {
		case len(t.Shape) == 1: // norms
			for i := range w {
				w[i] = 1
			}
		case strings.HasSuffix(name, "base_kernel"):
			taps, h := t.Shape[1], t.Shape[2]
			for i := range w {
				w[i] = float32(0.1 * normal(rng))
				if (i/h)%taps == 0 {
					w[i] += 1
				}
			}
		case strings.HasSuffix(name, "_codebook"):
			for i := range w {
				w[i] = float32(0.5 * normal(rng))
			}
		default:
			for i := range w {
				w[i] = float32(0.02 * normal(rng))
			}
		}
		out[name] = w
	}
	return out
}

// WriteRandom writes a DFlash2 draft of cfg with RandomWeights(cfg, seed) as dtype into dir, after
// checking cfg against the target it is meant for, so a test cannot write a draft its own
// target would refuse.
func WriteRandom(dir string, target model.Config, cfg Config, seed uint64, dtype kernel.DType) error {
	if err := cfg.CheckTarget(target); err != nil {
		return fmt.Errorf("write dflash2 %s: %w", dir, err)
	}
	return Write(dir, cfg, RandomWeights(cfg, seed), dtype)
}

// normal is a standard normal draw (Box-Muller): test weights need only be reproducible.
func normal(r *splitmix.Stream) float64 {
	u1 := (float64(r.Next()>>11) + 0.5) / (1 << 53)
	u2 := r.Float64()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
