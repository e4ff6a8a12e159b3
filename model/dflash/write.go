package dflash

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// Write stores a draft folder in z-lab's layout: dir/config.json from cfg and
// dir/model.safetensors with every tensor of cfg.Tensors(), taken row-major from weights and
// stored as dtype. Norm weights are always stored as given in dtype too (the reference keeps one
// dtype per file). A missing, extra or wrongly sized weight is an error and nothing is written.
func Write(dir string, cfg Config, weights map[string][]float32, dtype kernel.DType) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("write draft %s: config: %w", dir, err)
	}
	specs := cfg.Tensors()
	var errs []error
	known := make(map[string]bool, len(specs))
	out := make([]safetensors.WriteTensor, 0, len(specs))
	for _, s := range specs {
		known[s.Name] = true
		w, ok := weights[s.Name]
		n := 1
		for _, v := range s.Shape {
			n *= v
		}
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("tensor %s %v missing", s.Name, s.Shape))
			continue
		case len(w) != n:
			errs = append(errs, fmt.Errorf("tensor %s has %d values, want %v = %d", s.Name, len(w), s.Shape, n))
			continue
		}
		out = append(out, encode(s, w, dtype))
	}
	for name := range weights {
		if !known[name] {
			errs = append(errs, fmt.Errorf("tensor %s is not part of a draft of this config", name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("write draft %s: %w", dir, errors.Join(errs...))
	}
	return writeFolder(dir, cfg, out, dtype)
}

func encode(s TensorShape, w []float32, dtype kernel.DType) safetensors.WriteTensor {
	if dtype == kernel.BF16 {
		b := make([]uint16, len(w))
		for i, v := range w {
			b[i] = kernel.F32ToBF16(v)
		}
		return safetensors.WriteTensor{Name: s.Name, DType: safetensors.BF16, Shape: s.Shape, Data: safetensors.BF16Bytes(b)}
	}
	return safetensors.WriteTensor{Name: s.Name, DType: safetensors.F32, Shape: s.Shape, Data: safetensors.F32Bytes(w)}
}

func writeFolder(dir string, cfg Config, tensors []safetensors.WriteTensor, dtype kernel.DType) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write draft %s: %w", dir, err)
	}
	name := "float32"
	if dtype == kernel.BF16 {
		name = "bfloat16"
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("write draft %s: %w", dir, err)
	}
	if err := cfg.writeConfig(dir, name); err != nil {
		return fmt.Errorf("write draft %s: %w", dir, err)
	}
	return nil
}

// RandomWeights returns the weights of a random draft of cfg, keyed by tensor name: matrices
// uniform with standard deviation 0.02, norm weights uniform in [0.9, 1.1] (not all ones, so a
// norm applied to the wrong rows changes the output). Each tensor depends only on seed and its
// name. Values are rounded to bf16 when dtype is BF16, so a folder written in bf16 and the
// in-memory draft from Random hold the same numbers.
func RandomWeights(cfg Config, seed uint64, dtype kernel.DType) map[string][]float32 {
	out := make(map[string][]float32)
	for _, s := range cfg.Tensors() {
		out[s.Name] = randomTensor(s, seed, dtype)
	}
	return out
}

func randomTensor(s TensorShape, seed uint64, dtype kernel.DType) []float32 {
	n := 1
	for _, v := range s.Shape {
		n *= v
	}
	st := seed
	for _, c := range []byte(s.Name) {
		st = splitmix.Mix(st ^ uint64(c))
	}
	w := make([]float32, n)
	// Uniform on [-a, a] has standard deviation a/sqrt(3).
	lo, width := -0.02*math.Sqrt(3), 2*0.02*math.Sqrt(3)
	if len(s.Shape) == 1 {
		lo, width = 0.9, 0.2
	}
	for i := range w {
		st = splitmix.Mix(st)
		v := float32(lo + width*float64(st>>11)/(1<<53))
		if dtype == kernel.BF16 {
			v = kernel.BF16ToF32(kernel.F32ToBF16(v))
		}
		w[i] = v
	}
	return w
}

// WriteRandom writes a random draft folder of cfg (see RandomWeights) in dtype.
func WriteRandom(dir string, cfg Config, seed uint64, dtype kernel.DType) error {
	return Write(dir, cfg, RandomWeights(cfg, seed, dtype), dtype)
}

// Random builds in memory the same draft that WriteRandom followed by Load would give, without
// the round trip through a file (for benchmarks of real shapes).
func Random(target model.Target, cfg Config, seed uint64, dtype kernel.DType) (*Draft, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("random draft: %w", err)
	}
	if err := cfg.CheckTarget(target.Config()); err != nil {
		return nil, fmt.Errorf("random draft: %w", err)
	}
	shapes := make(map[string]TensorShape)
	for _, s := range cfg.Tensors() {
		shapes[s.Name] = s
	}
	src := &randomSource{shapes: shapes, seed: seed, dtype: dtype}
	d, err := build(cfg, target, src)
	if err != nil {
		return nil, fmt.Errorf("random draft: %w", err)
	}
	d.dtype = dtype
	return d, nil
}

// randomSource generates tensors on demand, so a real-shaped draft never holds its f32 weights
// all at once.
type randomSource struct {
	shapes map[string]TensorShape
	seed   uint64
	dtype  kernel.DType
}

func (s *randomSource) failed() bool { return false }

func (s *randomSource) vector(name string, n int) []float32 {
	return randomTensor(s.shapes[name], s.seed, s.dtype)
}

func (s *randomSource) matrix(name string, n, k int) *kernel.Matrix {
	w := randomTensor(s.shapes[name], s.seed, s.dtype)
	if s.dtype == kernel.BF16 {
		b := make([]uint16, len(w))
		for i, v := range w {
			b[i] = kernel.F32ToBF16(v)
		}
		return kernel.NewBF16(b, n, k)
	}
	return kernel.NewF32(slices.Clip(w), n, k)
}
