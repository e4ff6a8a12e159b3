package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/tokenizer"
)

// TargetResult summarises a TrainTarget run.
type TargetResult struct {
	Config    TargetConfig  // with defaults filled
	Params    int           // trainable parameters
	Tokens    int           // tokens of the training text
	Windows   int           // training windows of SeqLen+1 tokens
	Steps     int           // optimizer steps done in total
	Resumed   int           // step the run resumed from (0: fresh)
	Loss      float64       // mean per-token cross-entropy (nats) over the last progress window
	Losses    []float64     // mean loss of every progress window of this invocation
	Elapsed   time.Duration // wall time of this invocation
	TokensSec float64       // trained tokens per second in this invocation
	Dir       string
}

// Text layout of the training data. The corpus marks no story boundaries (blank lines separate
// paragraphs as well as stories), so the text is one stream encoded in a single call, exactly as
// a prompt is encoded at inference. Windows start at paragraph starts (a token following a
// newline), so a bare prompt such as "once upon a time" at position 0 is in distribution without
// any special token: the tokenizer has no BOS and adds none. <|endoftext|> (id 0) is written as
// the eos_token_id for the engine's sake but never trained, so generation runs to its limit.

// lmWindows tokenizes the text at path and returns the token stream and the window starts:
// greedy from 0, each next start the last paragraph start at most SeqLen past the previous one
// (so consecutive windows overlap rather than leave gaps), or exactly SeqLen past it when no
// paragraph starts in between. Every window covers SeqLen+1 tokens.
func lmWindows(tok tokenizer.Tokenizer, text string, seqLen int) ([]int, []int) {
	ids := tok.Encode(text)
	var paraStart []int
	for i := 1; i < len(ids); i++ {
		if b := tok.TokenBytes(ids[i-1]); len(b) > 0 && b[len(b)-1] == '\n' {
			paraStart = append(paraStart, i)
		}
	}
	var starts []int
	k := 0
	for s := 0; s+seqLen+1 <= len(ids); {
		starts = append(starts, s)
		next := s + seqLen
		for k < len(paraStart) && paraStart[k] <= s {
			k++
		}
		best := -1
		for j := k; j < len(paraStart) && paraStart[j] <= s+seqLen; j++ {
			best = paraStart[j]
		}
		if best > s {
			next = best
		}
		s = next
	}
	return ids, starts
}

type lmTrainer struct {
	cfg     TargetConfig
	rp      *rope
	specs   []spec
	params  []float32
	m, v    []float32
	p       *lmNet
	ids     []int
	starts  []int
	workers []*lmWorker
}

type lmWorker struct {
	w    lmWork
	grad []float32
	g    *lmNet
	loss float64
}

func newLMTrainer(cfg TargetConfig, ids, starts []int) *lmTrainer {
	tr := &lmTrainer{cfg: cfg, ids: ids, starts: starts, rp: newRope(cfg.HeadDim, cfg.RopeTheta, cfg.SeqLen)}
	var n int
	tr.specs, n = lmLayout(cfg)
	tr.params = make([]float32, n)
	tr.m = make([]float32, n)
	tr.v = make([]float32, n)
	lmInit(tr.specs, tr.params, cfg)
	tr.p = lmBind(tr.specs, tr.params, cfg.Layers)
	tr.p.refresh()
	for range cfg.Threads {
		w := &lmWorker{grad: make([]float32, n)}
		w.g = lmBind(tr.specs, w.grad, cfg.Layers)
		tr.workers = append(tr.workers, w)
	}
	return tr
}

// TrainTarget trains a Qwen3-architecture causal LM on the text at textPath (tokenized with tok)
// and writes a Hugging Face folder into outDir: config.json, generation_config.json,
// model.safetensors, and the tokenizer files of cfg.TokenizerDir. outDir also holds
// checkpoint.bin (every CheckpointEvery steps and on ctx cancel, which returns ctx.Err()); a
// re-run with the same outDir, config and text resumes with bitwise the weights of an
// uninterrupted run. Progress lines go to progress (nil: none).
func TrainTarget(ctx context.Context, tok tokenizer.Tokenizer, textPath string, cfg TargetConfig, outDir string, progress io.Writer) (TargetResult, error) {
	start := time.Now()
	if progress == nil {
		progress = io.Discard
	}
	raw, err := os.ReadFile(textPath)
	if err != nil {
		return TargetResult{}, fmt.Errorf("train target: %w", err)
	}
	seqLen := cfg.SeqLen
	if seqLen <= 0 {
		seqLen = 256
	}
	ids, starts := lmWindows(tok, string(raw), seqLen)
	cfg, err = cfg.WithDefaults(tok.Vocab(), len(starts))
	if err != nil {
		return TargetResult{}, err
	}
	res := TargetResult{Config: cfg, Dir: outDir, Tokens: len(ids), Windows: len(starts)}
	if len(starts) == 0 {
		return res, fmt.Errorf("train target: %s has %d tokens, fewer than one window of %d", textPath, len(ids), cfg.SeqLen+1)
	}
	tr := newLMTrainer(cfg, ids, starts)
	res.Params = len(tr.params)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, fmt.Errorf("train target: %w", err)
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
	fmt.Fprintf(progress, "target: %d layers, hidden %d, heads %d/%d x %d, mlp %d, vocab %d, %d params; text: %d tokens, %d windows of %d; %d steps of %d windows (%.2f epochs)\n",
		cfg.Layers, cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.Intermediate, cfg.Vocab, len(tr.params),
		len(ids), len(starts), cfg.SeqLen, cfg.Steps, cfg.BatchSeqs, float64(cfg.Steps*cfg.BatchSeqs)/float64(len(starts)))
	var wLoss float64
	var wTok, trained int
	windowStart := time.Now()
	for ; step < cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			if serr := tr.save(ckpt, step); serr != nil {
				return res, errors.Join(err, serr)
			}
			res.Steps = step
			return res, err
		}
		wLoss += tr.step(step)
		wTok += cfg.BatchSeqs * cfg.SeqLen
		trained += cfg.BatchSeqs * cfg.SeqLen
		if (step+1)%cfg.ProgressEvery == 0 || step+1 == cfg.Steps {
			el := time.Since(windowStart).Seconds()
			res.Loss = wLoss / float64(wTok)
			res.Losses = append(res.Losses, res.Loss)
			done := step + 1 - res.Resumed
			eta := time.Duration(float64(time.Since(start)) / float64(done) * float64(cfg.Steps-step-1))
			fmt.Fprintf(progress, "step %d/%d loss %.4f lr %.2e tok/s %.0f elapsed %s eta %s\n",
				step+1, cfg.Steps, res.Loss, tr.lr(step), float64(wTok)/el,
				time.Since(start).Round(time.Second), eta.Round(time.Second))
			wLoss, wTok = 0, 0
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
	if err := writeTarget(outDir, cfg, tr.specs, tr.params, tok); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	res.TokensSec = float64(trained) / res.Elapsed.Seconds()
	return res, nil
}

// batch returns the window starts of step: an epoch-wise permutation of all windows drawn from
// (seed, epoch), so a resumed run sees exactly what an uninterrupted one would.
func (tr *lmTrainer) batch(step int) []int {
	c := tr.cfg
	n := len(tr.starts)
	out := make([]int, c.BatchSeqs)
	var perm []int
	permEpoch := -1
	for b := range out {
		pos := step*c.BatchSeqs + b
		if e := pos / n; e != permEpoch {
			perm = rand.New(rand.NewPCG(c.Seed^0x1e7a, uint64(e))).Perm(n)
			permEpoch = e
		}
		out[b] = tr.starts[perm[pos%n]]
	}
	return out
}

func (tr *lmTrainer) lr(step int) float64 {
	c := tr.cfg
	if step < c.Warmup {
		return c.LR * float64(step+1) / float64(c.Warmup)
	}
	span := max(1, c.Steps-c.Warmup)
	p := float64(step-c.Warmup) / float64(span)
	return c.LR * (c.MinLRFrac + (1-c.MinLRFrac)*0.5*(1+math.Cos(math.Pi*p)))
}

// step runs one optimizer step and returns the summed token loss. Worker i takes windows
// b % workers == i (a fixed split, so gradients sum in the same order on every run).
func (tr *lmTrainer) step(step int) float64 {
	c := tr.cfg
	starts := tr.batch(step)
	scale := 1 / float32(len(starts)*c.SeqLen)
	var wg sync.WaitGroup
	for wi, w := range tr.workers {
		clear(w.grad)
		w.loss = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := wi; b < len(starts); b += len(tr.workers) {
				s := starts[b]
				w.loss += w.w.window(tr.p, w.g, c, tr.rp, tr.ids[s:s+c.SeqLen+1], scale, nil)
			}
		}()
	}
	wg.Wait()
	g := tr.workers[0].grad
	loss := 0.0
	for _, w := range tr.workers {
		loss += w.loss
	}
	for _, w := range tr.workers[1:] {
		for i, v := range w.grad {
			g[i] += v
		}
	}
	tr.adamw(step, g)
	return loss
}

// adamw applies one AdamW update (adamw.go, the draft trainer's rule) and refreshes the kernels.
func (tr *lmTrainer) adamw(step int, g []float32) {
	c := tr.cfg
	adamw{Beta1: c.Beta1, Beta2: c.Beta2, WeightDecay: c.WeightDecay, ClipNorm: c.ClipNorm}.step(tr.specs, tr.params, tr.m, tr.v, g, step, tr.lr(step))
	tr.p.refresh()
}

type lmCkptHeader struct {
	Config  json.RawMessage `json:"config"`
	Step    int             `json:"step"`
	Params  int             `json:"params"`
	Tokens  int             `json:"tokens"`
	Windows int             `json:"windows"`
}

const lmCkptMagic = "DFLASHTARGET1\n"

// save writes params, AdamW moments and the step (see checkpoint.go); the data order is a
// function of (seed, step).
func (tr *lmTrainer) save(path string, step int) error {
	cfgJSON, _ := json.Marshal(tr.cfg)
	h := lmCkptHeader{Config: cfgJSON, Step: step, Params: len(tr.params), Tokens: len(tr.ids), Windows: len(tr.starts)}
	return saveCheckpoint(path, lmCkptMagic, h, tr.params, tr.m, tr.v)
}

// load restores a checkpoint if path exists and returns its step (0 when there is none). A
// checkpoint of another config or text is refused.
func (tr *lmTrainer) load(path string) (int, error) {
	var h lmCkptHeader
	check := func() error {
		cfgJSON, _ := json.Marshal(tr.cfg)
		switch {
		case string(h.Config) != string(cfgJSON):
			return fmt.Errorf("written with config %s, this run has %s (use another output folder or delete the checkpoint)", h.Config, cfgJSON)
		case h.Params != len(tr.params):
			return fmt.Errorf("%d parameters, this model has %d", h.Params, len(tr.params))
		case h.Tokens != len(tr.ids) || h.Windows != len(tr.starts):
			return fmt.Errorf("written for %d tokens / %d windows of text, this run has %d / %d", h.Tokens, h.Windows, len(tr.ids), len(tr.starts))
		}
		return nil
	}
	found, err := loadCheckpoint(path, lmCkptMagic, "target-training", &h, check, tr.params, tr.m, tr.v)
	if !found || err != nil {
		return 0, err
	}
	tr.p.refresh()
	return h.Step, nil
}

// tokenizerFiles are copied from TokenizerDir when present.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "tokenizer.bin"}

// writeTarget writes the Hugging Face folder: model.safetensors (f32, or bf16 when cfg.BF16),
// config.json (Qwen3ForCausalLM, tied embeddings), generation_config.json, tokenizer files.
func writeTarget(dir string, cfg TargetConfig, specs []spec, flat []float32, tok tokenizer.Tokenizer) error {
	tensors := make([]safetensors.WriteTensor, 0, len(specs))
	for _, s := range specs {
		w := flat[s.off : s.off+s.n]
		if cfg.BF16 {
			b := make([]uint16, len(w))
			for i, v := range w {
				b[i] = kernel.F32ToBF16(v)
			}
			tensors = append(tensors, safetensors.WriteTensor{Name: s.name, DType: safetensors.BF16, Shape: s.shape, Data: safetensors.BF16Bytes(b)})
		} else {
			tensors = append(tensors, safetensors.WriteTensor{Name: s.name, DType: safetensors.F32, Shape: s.shape, Data: safetensors.F32Bytes(w)})
		}
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("write target %s: %w", dir, err)
	}
	eos := 0
	if e := tok.EOS(); len(e) > 0 {
		eos = e[0]
	} else if id, ok := tok.TokenID("<|endoftext|>"); ok {
		eos = id
	}
	var bos any // null: the tokenizer has no BOS
	if b := tok.BOS(); b >= 0 {
		bos = b
	}
	dtype := "float32"
	if cfg.BF16 {
		dtype = "bfloat16"
	}
	conf := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"hidden_size":             cfg.Hidden,
		"intermediate_size":       cfg.Intermediate,
		"num_hidden_layers":       cfg.Layers,
		"num_attention_heads":     cfg.Heads,
		"num_key_value_heads":     cfg.KVHeads,
		"head_dim":                cfg.HeadDim,
		"vocab_size":              cfg.Vocab,
		"max_position_embeddings": cfg.MaxPositions,
		"rms_norm_eps":            shortFloat(cfg.RMSEps),
		"rope_theta":              cfg.RopeTheta,
		"hidden_act":              "silu",
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"tie_word_embeddings":     true,
		"torch_dtype":             dtype,
		"bos_token_id":            bos,
		"eos_token_id":            eos,
		"use_cache":               true,
	}
	gen := map[string]any{"bos_token_id": bos, "eos_token_id": eos, "do_sample": false}
	for name, v := range map[string]any{"config.json": conf, "generation_config.json": gen} {
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := writeAtomic(filepath.Join(dir, name), append(b, '\n')); err != nil {
			return fmt.Errorf("write target %s: %w", dir, err)
		}
	}
	if cfg.TokenizerDir != "" {
		for _, name := range tokenizerFiles {
			b, err := os.ReadFile(filepath.Join(cfg.TokenizerDir, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("write target %s: copy tokenizer: %w", dir, err)
			}
			if err := writeAtomic(filepath.Join(dir, name), b); err != nil {
				return fmt.Errorf("write target %s: copy tokenizer: %w", dir, err)
			}
		}
	}
	return nil
}
