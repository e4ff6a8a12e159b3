package transformer

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// SyntheticConfig returns the real shape of a named model, for benchmarks with random weights.
// Shapes are those of the published Qwen3 configs (all tie the head to the embedding).
func SyntheticConfig(name string) (model.Config, error) {
	qwen3 := func(hidden, layers, heads, inter int) model.Config {
		return model.Config{
			Arch: ArchQwen3, Layers: layers, Hidden: hidden, Intermediate: inter, Heads: heads,
			KVHeads: 8, HeadDim: 128, Vocab: 151936, MaxSeq: 40960, RMSEps: 1e-6,
			RopeTheta: 1000000, BOS: -1, EOS: []int{151645, 151643}, DType: kernel.BF16,
			TiedEmbeddings: true,
		}
	}
	switch name {
	case "qwen3-0.6b":
		return qwen3(1024, 28, 16, 3072), nil
	case "qwen3-1.7b":
		return qwen3(2048, 28, 16, 6144), nil
	case "qwen3-4b":
		return qwen3(2560, 36, 32, 9728), nil
	}
	return model.Config{}, fmt.Errorf("synthetic model %q unknown (have qwen3-0.6b, qwen3-1.7b, qwen3-4b)", name)
}

// Synthetic builds a model of cfg's shape with random bf16 weights drawn from N(0, 0.02) and unit
// norm weights, so activations stay in a sane range. The same cfg and seed give the same model.
// Arch picks the family: Qwen3ForCausalLM gets q/k norms, anything else is Llama-style.
func Synthetic(cfg model.Config, seed uint64) (*Model, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, fmt.Errorf("synthetic: %w", err)
	}
	cfg.DType = kernel.BF16
	if cfg.RopeTheta == 0 {
		cfg.RopeTheta = 10000
	}
	h, q, kvw, inter := cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim, cfg.Intermediate
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	// Every matrix is a job with a fixed ordinal, so the weights do not depend on which worker
	// fills which matrix; the workers also run the kernel's repacking in parallel.
	var jobs []genJob
	add := func(dst **kernel.Matrix, n, k int) {
		jobs = append(jobs, genJob{dst: dst, n: n, k: k, id: uint64(len(jobs) + 1)})
	}
	var emb, head *kernel.Matrix
	add(&emb, cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		l := &layers[i]
		l.AttnNorm, l.MLPNorm = ones(h), ones(h)
		add(&l.Q, q, h)
		add(&l.K, kvw, h)
		add(&l.V, kvw, h)
		add(&l.O, h, q)
		if cfg.Arch == ArchQwen3 {
			l.QNorm, l.KNorm = ones(cfg.HeadDim), ones(cfg.HeadDim)
		}
		add(&l.Gate, inter, h)
		add(&l.Up, inter, h)
		add(&l.Down, h, inter)
	}
	if !cfg.TiedEmbeddings {
		add(&head, cfg.Vocab, h)
	}
	generate(jobs, seed)
	if cfg.TiedEmbeddings {
		head = emb
	}
	style := nn.RotateHalf
	if cfg.Arch == ArchLlama2C {
		style = nn.AdjacentPair
	}
	return newModel(cfg, spec{style: style, inv: nn.InvFreq(cfg.HeadDim, cfg.RopeTheta)}, emb, head, layers, ones(h))
}

// normalBF16 maps 16 random bits to a bf16 draw of N(0, 0.02) by the inverse normal CDF at the
// midpoint of each of 65536 equal-probability bins: one table lookup per weight.
var normalBF16 = sync.OnceValue(func() *[1 << 16]uint16 {
	var t [1 << 16]uint16
	for u := range t {
		p := (float64(u) + 0.5) / (1 << 16)
		t[u] = kernel.F32ToBF16(float32(0.02 * math.Sqrt2 * math.Erfinv(2*p-1)))
	}
	return &t
})

// genJob is one random matrix to build. Within it, each block of rows has its own stream seeded
// from the model seed, the job's ordinal and the block.
type genJob struct {
	dst  **kernel.Matrix
	n, k int
	id   uint64
}

const genBlockRows = 64

// generate fills the jobs on all cores, largest first so the embedding does not finish last.
func generate(jobs []genJob, seed uint64) {
	table := normalBF16()
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return jobs[order[a]].n*jobs[order[a]].k > jobs[order[b]].n*jobs[order[b]].k })
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := jobs[i]
				*j.dst = kernel.NewBF16(fill(j.n, j.k, seed, j.id, table), j.n, j.k)
			}
		}()
	}
	for _, i := range order {
		next <- i
	}
	close(next)
	wg.Wait()
}

func fill(n, k int, seed, id uint64, table *[1 << 16]uint16) []uint16 {
	w := make([]uint16, n*k)
	for b := 0; b*genBlockRows < n; b++ {
		s := splitmix.Mix(seed ^ splitmix.Mix(id<<32|uint64(b)))
		part := w[b*genBlockRows*k : min((b+1)*genBlockRows, n)*k]
		i := 0
		for ; i+4 <= len(part); i += 4 {
			s = splitmix.Mix(s)
			part[i] = table[uint16(s)]
			part[i+1] = table[uint16(s>>16)]
			part[i+2] = table[uint16(s>>32)]
			part[i+3] = table[uint16(s>>48)]
		}
		for ; i < len(part); i++ {
			s = splitmix.Mix(s)
			part[i] = table[uint16(s)]
		}
	}
	return w
}

// RandomMatrix is one matrix RandomBF16 builds into *Dst.
type RandomMatrix struct {
	Dst  **kernel.Matrix
	N, K int
}

// RandomBF16 builds random bf16 matrices exactly as Synthetic builds its own: N(0, 0.02) draws,
// mats[i] with ordinal i+1, on all cores, so the same seed and list give the same weights. It lets
// other families (model/qwen35) build synthetic shapes with the same generator.
func RandomBF16(seed uint64, mats []RandomMatrix) {
	jobs := make([]genJob, len(mats))
	for i, m := range mats {
		jobs[i] = genJob{dst: m.Dst, n: m.N, k: m.K, id: uint64(i + 1)}
	}
	generate(jobs, seed)
}
