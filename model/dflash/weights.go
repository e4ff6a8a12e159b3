package dflash

import (
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model/transformer"
)

// A draft comes as a folder in z-lab's layout (config.json and safetensors) or as one draft GGUF
// file (what `dflash convert` writes from such a folder, quantized or not). The GGUF keeps what
// the folder says unchanged, so one reader of each kind serves DFlash and DFlash2 alike:
// general.architecture is GGUFArch, GGUFConfigKey holds the folder's config.json verbatim (the
// z-lab config, which tells DFlash from DFlash2 and holds every key their loaders read), and
// each tensor keeps its folder name, its shape in ggml order (the row length first). No other
// engine runs DFlash drafts, so no other naming scheme would be understood anyway; keeping the
// folder's names lets one table of tensors (Config.Tensors) describe both forms.
const (
	GGUFArch      = "dflash-draft"
	GGUFConfigKey = GGUFArch + ".config_json"
)

// IsFile reports whether a draft path names a file (a draft GGUF) rather than a folder.
func IsFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// LoadConfig reads a draft's config.json from its folder, or from a draft GGUF's metadata.
func LoadConfig(path string) (*hf.Config, error) {
	if !IsFile(path) {
		return hf.LoadConfig(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ggufConfig(f)
}

func ggufConfig(f *gguf.File) (*hf.Config, error) {
	arch, err := f.Architecture()
	if err != nil {
		return nil, err
	}
	if arch != GGUFArch {
		return nil, fmt.Errorf("gguf %s: general.architecture is %q, want %q (a draft converted by dflash convert)", f.Name, arch, GGUFArch)
	}
	js, err := f.Metadata.String(GGUFConfigKey)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", f.Name, err)
	}
	hc, err := hf.ParseConfig([]byte(js))
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %s: %w", f.Name, GGUFConfigKey, err)
	}
	return hc, nil
}

// Weights supplies a draft's tensors by name from a folder or a draft GGUF, checking each
// against the shape its config implies. It records its own errors (a nil or empty result means
// one was recorded), so one load reports every bad tensor. Matrices are repacked and vectors
// copied, so nothing returned aliases the file once Close has run.
type Weights struct {
	path  string
	st    *safetensors.Model // a folder
	gf    *gguf.File         // a draft GGUF
	dtype Compute
	errs  []error
	seen  kernel.DType // BF16 once any matrix is kept in bf16
	// expanded lists the quantized tensors the kernels could not keep quantized (logged by
	// Close).
	expanded []string
}

// OpenWeights opens the tensors of the draft at path (a folder or a draft GGUF); dtype picks the
// element type matrices are kept in.
func OpenWeights(path string, dtype Compute) (*Weights, error) {
	w := &Weights{path: path, dtype: dtype, seen: kernel.F32}
	var err error
	if IsFile(path) {
		w.gf, err = gguf.Open(path)
	} else {
		w.st, err = safetensors.OpenModel(path)
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Close releases the file mappings; the recorded errors stay. It logs the quantized tensors that
// were expanded to bf16 for want of a kernel.
func (w *Weights) Close() error {
	if len(w.expanded) > 0 {
		log.Printf("load draft %s: %d quantized tensors have no quantized kernel and were expanded to bf16: %s", w.path, len(w.expanded), strings.Join(w.expanded, ", "))
		w.expanded = nil
	}
	if w.gf != nil {
		return w.gf.Close()
	}
	return w.st.Close()
}

// Err joins the recorded errors (nil when every tensor read well).
func (w *Weights) Err() error { return errors.Join(w.errs...) }

// DType is the dtype of the last matrix kept in bf16 or quantized, F32 when every one is f32.
func (w *Weights) DType() kernel.DType { return w.seen }

func (w *Weights) fail(err error) { w.errs = append(w.errs, err) }

// ggufInfo is the info of a GGUF tensor whose folder shape is shape ([out, in] for matrices).
func (w *Weights) ggufInfo(name string, shape []int) (gguf.TensorInfo, bool) {
	t, ok := w.gf.Tensor(name)
	want := make([]uint64, len(shape))
	for i, s := range shape {
		want[len(shape)-1-i] = uint64(s)
	}
	switch {
	case !ok:
		w.fail(fmt.Errorf("tensor %s (expected shape %v): %w", name, shape, gguf.ErrNoTensor))
	case !slices.Equal(t.Shape, want):
		w.fail(fmt.Errorf("tensor %s has ggml shape %v, want %v", name, t.Shape, want))
	case t.Type.Check() != nil:
		w.fail(fmt.Errorf("tensor %s: %w", name, t.Type.Check()))
	default:
		return t, true
	}
	return t, false
}

// stTensor is a folder tensor of the given shape.
func (w *Weights) stTensor(name string, shape []int) *safetensors.Tensor {
	t, err := w.st.Tensor(name)
	if err != nil {
		w.fail(fmt.Errorf("tensor %s (expected shape %v): %w", name, shape, err))
		return nil
	}
	if err := t.Expect(shape...); err != nil {
		w.fail(err)
		return nil
	}
	return t
}

// Vector reads a tensor of any shape (norms, convolution base kernels) as f32.
func (w *Weights) Vector(name string, shape ...int) []float32 {
	if w.gf != nil {
		if _, ok := w.ggufInfo(name, shape); !ok {
			return nil
		}
		v, err := w.gf.F32(name) // a copy, never a view of the mapping
		if err != nil {
			w.fail(err)
			return nil
		}
		return v
	}
	t := w.stTensor(name, shape)
	if t == nil {
		return nil
	}
	v, err := t.F32()
	if err != nil {
		w.fail(err)
		return nil
	}
	return slices.Clone(v) // F32 may be a view of the mapping, closed after loading
}

// Matrix reads an [n][k] weight in the compute dtype: as stored for F32 and BF16 (F16 widened to
// F32) unless a dtype is forced; a GGUF's quantized tensors as transformer.GGUFMatrix converts
// them, so a draft computes with what its target's loader would make of the same tensor.
func (w *Weights) Matrix(name string, n, k int) *kernel.Matrix {
	var (
		m   *kernel.Matrix
		err error
	)
	if w.gf != nil {
		t, ok := w.ggufInfo(name, []int{n, k})
		if !ok {
			return nil
		}
		var expanded error
		m, expanded, err = transformer.GGUFMatrix(w.gf, t, n, k, w.dtype)
		if expanded != nil {
			w.expanded = append(w.expanded, fmt.Sprintf("%s (%s)", name, t.Type))
		}
	} else {
		t := w.stTensor(name, []int{n, k})
		if t == nil {
			return nil
		}
		switch t.DType {
		case safetensors.F32, safetensors.BF16, safetensors.F16:
		default:
			w.fail(fmt.Errorf("%s: tensor %s: %w %s (want F32, BF16 or F16)", t.File, name, safetensors.ErrUnsupportedDType, t.DType))
			return nil
		}
		m, err = transformer.MatrixOf(t, n, k, w.dtype == ForceBF16 || (w.dtype == KeepDType && t.DType == safetensors.BF16))
	}
	if err != nil {
		w.fail(err)
		return nil
	}
	if m.DType == kernel.BF16 || m.DType.Quantized() {
		w.seen = m.DType
	}
	return m
}

// Table reads an [n][k] lookup table (DFlash2's codebooks, read a row at a time) as bf16 when it
// is stored so and no f32 is forced, as f32 otherwise; exactly one result is set on success. A
// quantized table in a GGUF is dequantized and rounded to bf16, as quantized matrices are.
func (w *Weights) Table(name string, n, k int) (f32 []float32, bf16 []uint16) {
	if w.gf != nil {
		t, ok := w.ggufInfo(name, []int{n, k})
		if !ok {
			return nil, nil
		}
		if t.Type == quant.F32 || t.Type == quant.F16 || w.dtype == ForceF32 {
			return w.Vector(name, n, k), nil
		}
		v, err := w.gf.F32(name)
		if err != nil {
			w.fail(err)
			return nil, nil
		}
		b := make([]uint16, len(v))
		for i, x := range v {
			b[i] = quant.F32ToBF16(x) // exact for a BF16 tensor
		}
		return nil, b
	}
	t := w.stTensor(name, []int{n, k})
	if t == nil {
		return nil, nil
	}
	if t.DType != safetensors.BF16 || w.dtype == ForceF32 {
		return w.Vector(name, n, k), nil
	}
	b, err := t.BF16()
	if err != nil {
		w.fail(err)
		return nil, nil
	}
	return nil, slices.Clone(b)
}
