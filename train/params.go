package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
)

// spec is one tensor of the draft inside the flat parameter vector.
type spec struct {
	name   string
	shape  []int
	off, n int
	matrix bool // decayed by AdamW and randomly initialised; norms start at one and are not decayed
}

// layout lists the draft's tensors with the names of DFLASH.md section 2, in a fixed order that
// is the order of the flat parameter, gradient and optimizer vectors.
func layout(c DraftConfig, hidden int) ([]spec, int) {
	var specs []spec
	off := 0
	add := func(name string, matrix bool, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		specs = append(specs, spec{name: name, shape: shape, off: off, n: n, matrix: matrix})
		off += n
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	add("fc.weight", true, hidden, len(c.Taps)*hidden)
	add("hidden_norm.weight", false, hidden)
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		add(p+"input_layernorm.weight", false, hidden)
		add(p+"self_attn.q_proj.weight", true, q, hidden)
		add(p+"self_attn.k_proj.weight", true, kv, hidden)
		add(p+"self_attn.v_proj.weight", true, kv, hidden)
		add(p+"self_attn.o_proj.weight", true, hidden, q)
		add(p+"self_attn.q_norm.weight", false, c.HeadDim)
		add(p+"self_attn.k_norm.weight", false, c.HeadDim)
		add(p+"post_attention_layernorm.weight", false, hidden)
		add(p+"mlp.gate_proj.weight", true, c.Intermediate, hidden)
		add(p+"mlp.up_proj.weight", true, c.Intermediate, hidden)
		add(p+"mlp.down_proj.weight", true, hidden, c.Intermediate)
	}
	add("norm.weight", false, hidden)
	if c.isD2() {
		d2Layout(c, hidden, add)
	}
	return specs, off
}

// net is a view of a flat vector as the draft's tensors: the parameters, or (same shapes) their
// gradients. Views never copy.
type net struct {
	fc         linear
	hiddenNorm []float32
	layers     []layer
	norm       []float32
	d2         *d2net // DFlash2 tensors; nil for a DFlash draft
}

type layer struct {
	inNorm, postNorm, qNorm, kNorm []float32
	q, k, v, o, gate, up, down     linear
}

// bind views flat (laid out by layout) as a net.
func bind(specs []spec, flat []float32, layers int) *net {
	at := func(i int) []float32 { s := specs[i]; return flat[s.off : s.off+s.n] }
	lin := func(i int) linear { s := specs[i]; return linear{W: at(i), N: s.shape[0], K: s.shape[1]} }
	n := &net{fc: lin(0), hiddenNorm: at(1), layers: make([]layer, layers)}
	for l := range n.layers {
		b := 2 + 11*l
		n.layers[l] = layer{
			inNorm: at(b), q: lin(b + 1), k: lin(b + 2), v: lin(b + 3), o: lin(b + 4),
			qNorm: at(b + 5), kNorm: at(b + 6), postNorm: at(b + 7),
			gate: lin(b + 8), up: lin(b + 9), down: lin(b + 10),
		}
	}
	n.norm = at(2 + 11*layers)
	if first := 3 + 11*layers; len(specs) > first {
		n.d2 = bindD2(specs, flat, layers, first)
	}
	return n
}

// refresh rebuilds the kernel copies of every matrix after the flat parameters changed.
func (n *net) refresh() {
	n.fc.refresh()
	for l := range n.layers {
		L := &n.layers[l]
		for _, m := range []*linear{&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down} {
			m.refresh()
		}
	}
	if n.d2 != nil {
		n.d2.refresh()
	}
}

// initParams fills flat deterministically from seed: matrices N(0, scale/sqrt(fan_in)) with the
// residual-writing projections (o, down) shrunk by 1/sqrt(2*layers) so the stack starts near the
// embedding, norms one.
func initParams(specs []spec, flat []float32, c DraftConfig) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x64666c617368))
	for _, s := range specs {
		w := flat[s.off : s.off+s.n]
		if !s.matrix {
			for i := range w {
				w[i] = 1
			}
			continue
		}
		std := c.Init / math.Sqrt(float64(s.shape[1]))
		if strings.HasSuffix(s.name, "o_proj.weight") || strings.HasSuffix(s.name, "down_proj.weight") {
			std /= math.Sqrt(2 * float64(c.Layers))
		}
		for i := range w {
			w[i] = float32(rng.NormFloat64() * std)
		}
	}
	if c.isD2() {
		initD2(specs, flat, c)
	}
}

// writeDraft writes config.json and model.safetensors (f32) into dir through model/dflash's
// writer, which checks every tensor name and shape against the config.
func writeDraft(dir string, c DraftConfig, t model.Config, specs []spec, flat []float32) error {
	w := make(map[string][]float32, len(specs))
	for _, s := range specs {
		w[s.name] = flat[s.off : s.off+s.n]
	}
	if c.isD2() {
		if err := dflash2.Write(dir, c.dflash2Config(t), w, kernel.F32); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		return nil
	}
	if err := dflash.Write(dir, c.dflashConfig(t), w, kernel.F32); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// writeAtomic writes data to path through a synced temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
