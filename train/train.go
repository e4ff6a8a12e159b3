package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
)

// Result summarises a finished (or resumed and finished) run.
type Result struct {
	Config    DraftConfig   // with defaults filled
	Steps     int           // optimizer steps done in total
	Resumed   int           // step the run resumed from (0: fresh)
	Loss      float64       // mean loss over the last progress window
	Acc       []float64     // per block position k (index k, 1..B-1) over the last window
	Losses    []float64     // mean loss of every progress window, in order (this invocation)
	Elapsed   time.Duration // wall time of this invocation
	TokensSec float64       // predicted block tokens per second in this invocation
	Dir       string        // where config.json and model.safetensors were written
}

// CheckpointFile is the name of the resumable state inside the output folder.
const CheckpointFile = "checkpoint.bin"

// trainer holds everything one run shares across steps.
type trainer struct {
	cfg     DraftConfig
	tcfg    model.Config
	target  model.Target
	fz      *frozen
	rp      *rope
	specs   []spec
	params  []float32
	m, v    []float32
	p       *net
	data    []Sequence
	softK   int    // soft targets per position (0: the loss is hard)
	source  string // Data.Source, part of the checkpoint's identity
	tapMu   sync.Mutex
	tapC    cache.Cache
	taps    map[int][]float32
	tapMB   float64
	tapMax  float64
	workers []*worker
}

type worker struct {
	w    work
	grad []float32
	g    *net
	st   stats
	err  error
}

// TrainDraft distils a draft for t from data with cfg, writing the draft (config.json and
// model.safetensors) and a checkpoint into outDir. When outDir holds a checkpoint of the same
// configuration the run resumes from it; with the same seed the final weights are bitwise those of
// an uninterrupted run. Cancelling ctx stops before the next step, after writing a checkpoint.
// Progress lines go to progress (nil: none).
func TrainDraft(ctx context.Context, t model.Target, data *Data, cfg DraftConfig, outDir string, progress io.Writer) (Result, error) {
	start := time.Now()
	tcfg := t.Config()
	cfg, err := cfg.WithDefaults(tcfg)
	if err != nil {
		return Result{}, err
	}
	res := Result{Config: cfg, Dir: outDir}
	if progress == nil {
		progress = io.Discard
	}
	tr, err := newTrainer(t, cfg, data)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, fmt.Errorf("train: %w", err)
	}
	ckpt := filepath.Join(outDir, CheckpointFile)
	step, err := tr.load(ckpt)
	if err != nil {
		return res, err
	}
	res.Resumed = step
	if step > 0 {
		fmt.Fprintf(progress, "resume from %s at step %d\n", ckpt, step)
	}
	fmt.Fprintf(progress, "draft: %d layers, block %d, taps %v, mask %d, %d params; data: %d sequences, %d tokens\n",
		cfg.Layers, cfg.BlockSize, cfg.Taps, cfg.MaskID, len(tr.params), len(tr.data), (&Data{Sequences: tr.data}).Tokens())

	var window stats
	window.reset(cfg.BlockSize)
	windowStart := time.Now()
	var predicted int
	for ; step < cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			if serr := tr.save(ckpt, step); serr != nil {
				return res, errors.Join(err, serr)
			}
			res.Steps = step
			return res, err
		}
		var st stats
		st.reset(cfg.BlockSize)
		if err := tr.step(step, &st); err != nil {
			return res, err
		}
		window.add(&st)
		predicted += st.anchors * (cfg.BlockSize - 1)
		if (step+1)%cfg.ProgressEvery == 0 || step+1 == cfg.Steps {
			el := time.Since(windowStart).Seconds()
			res.Loss = window.loss / float64(max(1, window.anchors))
			res.Acc = make([]float64, cfg.BlockSize)
			for k := 1; k < cfg.BlockSize; k++ {
				res.Acc[k] = float64(window.correct[k]) / float64(max(1, window.seen[k]))
			}
			res.Losses = append(res.Losses, res.Loss)
			var b strings.Builder
			for k := 1; k < cfg.BlockSize; k++ {
				fmt.Fprintf(&b, " %.2f", res.Acc[k])
			}
			toks := float64(window.anchors*(cfg.BlockSize-1)) / el
			done := step + 1 - res.Resumed
			eta := time.Duration(float64(time.Since(start)) / float64(done) * float64(cfg.Steps-step-1))
			fmt.Fprintf(progress, "step %d/%d loss %.4f acc[1..%d]%s lr %.2e tok/s %.0f elapsed %s eta %s\n",
				step+1, cfg.Steps, res.Loss, cfg.BlockSize-1, b.String(), tr.lr(step), toks,
				time.Since(start).Round(time.Second), eta.Round(time.Second))
			window.reset(cfg.BlockSize)
			windowStart = time.Now()
		}
		if (step+1)%cfg.CheckpointEvery == 0 && step+1 < cfg.Steps {
			if err := tr.save(ckpt, step+1); err != nil {
				return res, err
			}
		}
	}
	res.Steps = step
	if err := tr.save(ckpt, step); err != nil {
		return res, err
	}
	if err := writeDraft(outDir, cfg, tcfg, tr.specs, tr.params); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	res.TokensSec = float64(predicted) / res.Elapsed.Seconds()
	return res, nil
}

func newTrainer(t model.Target, cfg DraftConfig, data *Data) (*trainer, error) {
	tcfg := t.Config()
	if data == nil {
		return nil, errors.New("train: no data")
	}
	tr := &trainer{cfg: cfg, tcfg: tcfg, target: t, fz: newFrozen(t), taps: map[int][]float32{}, source: data.Source}
	if cfg.lossMix() > 0 {
		if data.SoftTopK <= 0 {
			return nil, fmt.Errorf("train: the %s loss needs soft targets, and the data (%s) has none: generate it with soft targets (--soft-topk K)", cfg.Loss, data.Source)
		}
		tr.softK = data.SoftTopK
	}
	maxLen := 0
	for i, s := range data.Sequences {
		for _, id := range s.Tokens {
			if id < 0 || id >= tcfg.Vocab {
				return nil, fmt.Errorf("train: sequence %d holds token %d outside the vocabulary [0, %d)", i, id, tcfg.Vocab)
			}
		}
		if tr.softK > 0 {
			if err := checkSoft(s, tr.softK, tcfg.Vocab); err != nil {
				return nil, fmt.Errorf("train: sequence %d: %w", i, err)
			}
		}
		if max(1, s.Start)+cfg.BlockSize <= len(s.Tokens) {
			tr.data = append(tr.data, s)
			maxLen = max(maxLen, len(s.Tokens))
		}
	}
	if len(tr.data) == 0 {
		return nil, fmt.Errorf("train: none of %d sequences is long enough for one block of %d after its start", len(data.Sequences), cfg.BlockSize)
	}
	tr.rp = newRope(cfg.HeadDim, cfg.RopeTheta, maxLen+cfg.BlockSize)
	tr.tapC = t.NewCache(maxLen)
	tr.tapMax = 1024
	var n int
	tr.specs, n = layout(cfg, tcfg.Hidden)
	tr.params = make([]float32, n)
	tr.m = make([]float32, n)
	tr.v = make([]float32, n)
	initParams(tr.specs, tr.params, cfg)
	tr.p = bind(tr.specs, tr.params, cfg.Layers)
	// The draft's output goes through the target's head, so it starts from the target's final
	// norm: its scale sets how sharp the head's logits are (stories260K's is far from one), and
	// growing it from one at the learning rate would be a long plateau.
	if fn, ok := t.(interface{ FinalNorm() []float32 }); ok && len(fn.FinalNorm()) == len(tr.p.norm) {
		copy(tr.p.norm, fn.FinalNorm())
	}
	tr.p.refresh()
	for range cfg.Threads {
		w := &worker{grad: make([]float32, n)}
		w.g = bind(tr.specs, w.grad, cfg.Layers)
		tr.workers = append(tr.workers, w)
	}
	return tr, nil
}

// checkSoft checks that s carries k soft targets for every position from its start, inside the
// vocabulary and with some probability mass (their renormalisation divides by it).
func checkSoft(s Sequence, k, vocab int) error {
	n := (len(s.Tokens) - s.Start) * k
	if s.Start < 0 || len(s.SoftIDs) != n || len(s.SoftP) != n {
		return fmt.Errorf("%d soft targets for %d tokens after start %d, want %d per token", len(s.SoftIDs), len(s.Tokens)-s.Start, s.Start, k)
	}
	for j := 0; j < n; j += k {
		var sum float64
		for i := j; i < j+k; i++ {
			if id := s.SoftIDs[i]; id < 0 || int(id) >= vocab {
				return fmt.Errorf("soft target %d outside the vocabulary [0, %d)", id, vocab)
			}
			if p := s.SoftP[i]; !(p >= 0) || p > 1 {
				return fmt.Errorf("soft target probability %g", p)
			}
			sum += float64(s.SoftP[i])
		}
		if !(sum > 0) {
			return fmt.Errorf("soft targets of position %d hold no probability", s.Start+j/k)
		}
	}
	return nil
}

// tapsOf returns the concatenated tap rows of sequence i for its first rows tokens, computed
// by one target forward and kept while the memory budget allows. The target is not safe for
// concurrent forwards, hence the lock.
func (tr *trainer) tapsOf(i int, tokens []int) ([]float32, error) {
	tr.tapMu.Lock()
	defer tr.tapMu.Unlock()
	if x, ok := tr.taps[i]; ok {
		return x, nil
	}
	x, err := computeTaps(tr.target, tr.tapC, tokens, tr.cfg.Taps)
	if err != nil {
		return nil, err
	}
	mb := float64(len(x)) * 4 / (1 << 20)
	if tr.tapMB+mb <= tr.tapMax {
		tr.taps[i] = x
		tr.tapMB += mb
	}
	return x, nil
}

// computeTaps runs the target over tokens and interleaves its taps into rows of
// len(taps)*hidden floats, the layout of a draft context row.
func computeTaps(t model.Target, c cache.Cache, tokens []int, taps []int) ([]float32, error) {
	if err := c.Rewind(0); err != nil {
		return nil, fmt.Errorf("taps: %w", err)
	}
	res, err := t.Forward(c, model.Request{Tokens: tokens, Logits: model.LogitsNone, Taps: taps})
	if err != nil {
		return nil, fmt.Errorf("taps: %w", err)
	}
	h := t.Config().Hidden
	w := len(taps) * h
	out := make([]float32, len(tokens)*w)
	for r := range tokens {
		for k, tp := range res.Taps {
			copy(out[r*w+k*h:r*w+(k+1)*h], tp[r*h:(r+1)*h])
		}
	}
	return out, nil
}

// batch picks the sequences and anchors of a step. Everything random derives from (seed, step)
// and (seed, epoch), so a resumed run draws exactly what an uninterrupted one would.
func (tr *trainer) batch(step int) []example {
	c := tr.cfg
	n := len(tr.data)
	rng := rand.New(rand.NewPCG(c.Seed^0x5eed, uint64(step)))
	exs := make([]example, c.BatchSeqs)
	var perm []int
	permEpoch := -1
	for b := range exs {
		pos := step*c.BatchSeqs + b
		if e := pos / n; e != permEpoch {
			perm = rand.New(rand.NewPCG(c.Seed^0xe90c, uint64(e))).Perm(n)
			permEpoch = e
		}
		idx := perm[pos%n]
		s := tr.data[idx]
		lo := max(1, s.Start)
		hi := len(s.Tokens) - c.BlockSize // inclusive
		cands := hi - lo + 1
		var anchors []int
		if cands <= c.AnchorsPerSeq {
			for a := lo; a <= hi; a++ {
				anchors = append(anchors, a)
			}
		} else {
			seen := map[int]bool{}
			for len(anchors) < c.AnchorsPerSeq {
				a := lo + rng.IntN(cands)
				if !seen[a] {
					seen[a] = true
					anchors = append(anchors, a)
				}
			}
			slices.Sort(anchors)
		}
		exs[b] = example{seq: idx, tokens: s.Tokens, anchors: anchors, softIDs: s.SoftIDs, softP: s.SoftP, softStart: s.Start, softK: tr.softK}
	}
	return exs
}

// lr is the learning rate of step: linear warm-up, then cosine decay to MinLRFrac*LR.
func (tr *trainer) lr(step int) float64 {
	c := tr.cfg
	if step < c.WarmupSteps {
		return c.LR * float64(step+1) / float64(c.WarmupSteps)
	}
	span := max(1, c.Steps-c.WarmupSteps)
	p := float64(step-c.WarmupSteps) / float64(span)
	return c.LR * (c.MinLRFrac + (1-c.MinLRFrac)*0.5*(1+math.Cos(math.Pi*p)))
}

// step runs one optimizer step: every worker takes the examples b with b % workers == its index
// (a fixed split, so gradients sum in the same order on every run), then AdamW.
func (tr *trainer) step(step int, st *stats) error {
	c := tr.cfg
	exs := tr.batch(step)
	total := 0
	for _, e := range exs {
		total += len(e.anchors)
	}
	scale := 1 / float32(total)
	var wg sync.WaitGroup
	for wi, w := range tr.workers {
		clear(w.grad)
		w.st.reset(c.BlockSize)
		w.err = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := wi; b < len(exs); b += len(tr.workers) {
				ex := exs[b]
				taps, err := tr.tapsOf(ex.seq, ex.tokens)
				if err != nil {
					w.err = err
					return
				}
				ex.taps = taps
				w.w.step(tr.p, w.g, tr.fz, c, tr.rp, &ex, scale, &w.st, nil)
			}
		}()
	}
	wg.Wait()
	g := tr.workers[0].grad
	for _, w := range tr.workers {
		if w.err != nil {
			return fmt.Errorf("train step %d: %w", step, w.err)
		}
		st.add(&w.st)
	}
	for _, w := range tr.workers[1:] {
		for i, v := range w.grad {
			g[i] += v
		}
	}
	adamw{Beta1: c.Beta1, Beta2: c.Beta2, WeightDecay: c.WeightDecay, ClipNorm: c.ClipNorm}.step(tr.specs, tr.params, tr.m, tr.v, g, step, tr.lr(step))
	tr.p.refresh()
	return nil
}

// checkpoint header; the identity is the config's JSON (run-only fields excluded), so a resume
// with a different shape, data size or schedule is refused rather than silently mixed.
type ckptHeader struct {
	Config  json.RawMessage `json:"config"`
	Step    int             `json:"step"`
	Params  int             `json:"params"`
	Seqs    int             `json:"sequences"`
	Tokens  int             `json:"tokens"`
	Version int             `json:"version"`
	// Data is the data's description (Data.Source): the same counts of other data (sampled
	// instead of greedy, say) must not continue a run. Empty in checkpoints written before it.
	Data string `json:"data,omitempty"`
}

const ckptMagic = "DFLASHTRAIN1\n"

// save writes params, AdamW moments and the step (see checkpoint.go).
func (tr *trainer) save(path string, step int) error {
	cfgJSON, _ := json.Marshal(tr.cfg)
	h := ckptHeader{Config: cfgJSON, Step: step, Params: len(tr.params), Seqs: len(tr.data), Tokens: (&Data{Sequences: tr.data}).Tokens(), Version: 1, Data: tr.source}
	return saveCheckpoint(path, ckptMagic, h, tr.params, tr.m, tr.v)
}

// load restores a checkpoint if path exists and returns its step (0 when there is none).
func (tr *trainer) load(path string) (int, error) {
	var h ckptHeader
	tokens := (&Data{Sequences: tr.data}).Tokens()
	check := func() error {
		// Compare configs as JSON values, so a field added later with its zero value (omitted)
		// does not orphan older checkpoints.
		cfgJSON, _ := json.Marshal(tr.cfg)
		var have, want any
		_ = json.Unmarshal(h.Config, &have)
		_ = json.Unmarshal(cfgJSON, &want)
		hb, _ := json.Marshal(have)
		wb, _ := json.Marshal(want)
		switch {
		case string(hb) != string(wb):
			return fmt.Errorf("written with config %s, this run has %s (use another output folder or delete the checkpoint)", hb, wb)
		case h.Params != len(tr.params):
			return fmt.Errorf("%d parameters, this draft has %d", h.Params, len(tr.params))
		case h.Seqs != len(tr.data) || h.Tokens != tokens:
			return fmt.Errorf("written for %d sequences / %d tokens of data, this run has %d / %d", h.Seqs, h.Tokens, len(tr.data), tokens)
		case h.Data != "" && h.Data != tr.source:
			return fmt.Errorf("written for the data %q, this run has %q (use another output folder or delete the checkpoint)", h.Data, tr.source)
		}
		return nil
	}
	found, err := loadCheckpoint(path, ckptMagic, "training", &h, check, tr.params, tr.m, tr.v)
	if !found || err != nil {
		return 0, err
	}
	tr.p.refresh()
	return h.Step, nil
}
