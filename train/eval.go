package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash2"
)

// Draft is a trained draft's weights as this package reads and writes them (for evaluation
// here; the engine loads drafts through model/dflash).
type Draft struct {
	Config DraftConfig
	specs  []spec
	params []float32
}

// LoadDraft reads config.json and model.safetensors from dir, as written by TrainDraft.
func LoadDraft(dir string, t model.Target) (*Draft, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load draft: %w", err)
	}
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("load draft %s: config.json: %w", dir, err)
	}
	for _, a := range h.Architectures {
		if a == dflash2.Arch {
			// Reading it as DFlash would drop its convolutions and selector without a word.
			return nil, fmt.Errorf("load draft %s: a DFlash2 draft; evaluate it through model/dflash2 and runner.NewSelectorSession", dir)
		}
	}
	tc := t.Config()
	if h.HiddenSize != tc.Hidden || h.VocabSize != tc.Vocab || h.NumTargetLayers != tc.Layers {
		return nil, fmt.Errorf("load draft %s: hidden %d, vocab %d, %d target layers; the target has %d, %d, %d",
			dir, h.HiddenSize, h.VocabSize, h.NumTargetLayers, tc.Hidden, tc.Vocab, tc.Layers)
	}
	c := DraftConfig{
		Layers: h.NumHiddenLayers, BlockSize: h.BlockSize, Taps: h.DFlashConfig.TargetLayerIDs,
		Heads: h.NumAttentionHeads, KVHeads: h.NumKeyValueHeads, HeadDim: h.HeadDim,
		Intermediate: h.IntermediateSize, RMSEps: float32(h.RMSNormEps), RopeTheta: h.RopeTheta,
		MaskID: h.DFlashConfig.MaskTokenID,
	}
	c, err = c.WithDefaults(tc)
	if err != nil {
		return nil, fmt.Errorf("load draft %s: %w", dir, err)
	}
	c.MaskID = h.DFlashConfig.MaskTokenID // an explicit 0 must not become the default
	if err := c.check(tc); err != nil {
		return nil, fmt.Errorf("load draft %s: %w", dir, err)
	}
	m, err := safetensors.OpenModel(dir)
	if err != nil {
		return nil, fmt.Errorf("load draft %s: %w", dir, err)
	}
	defer m.Close()
	specs, n := layout(c, tc.Hidden)
	d := &Draft{Config: c, specs: specs, params: make([]float32, n)}
	for _, s := range specs {
		v, err := m.F32(s.name, s.shape...)
		if err != nil {
			return nil, fmt.Errorf("load draft %s: %w", dir, err)
		}
		copy(d.params[s.off:s.off+s.n], v)
	}
	return d, nil
}

// EvalResult is the acceptance of greedy (temperature 0) speculative decoding with the draft
// over held-out sequences: each round drafts B-1 tokens after the anchor, keeps the longest
// prefix that matches the target's greedy tokens, and emits it plus the target's own token.
type EvalResult struct {
	Rounds, Emitted int
	Tau             float64   // emitted tokens per round (target forward), at most B
	AcceptAt        []float64 // index k: fraction of rounds that accepted at least k drafts
}

// Evaluate measures tau of d on data, whose sequences must be the target's own greedy
// continuations after Start (GenerateTargetData) for the figure to be the engine's tau at T = 0.
// The draft sees the full context each round, which is what the engine's cached context
// computes.
func Evaluate(ctx context.Context, t model.Target, d *Draft, data *Data, threads int) (EvalResult, error) {
	c := d.Config
	c.Threads = max(1, threads)
	c.BatchSeqs = 1
	tr, err := newTrainer(t, c, data)
	if err != nil {
		return EvalResult{}, err
	}
	copy(tr.params, d.params)
	tr.p.refresh()
	return tr.evaluate(ctx)
}

func (tr *trainer) evaluate(ctx context.Context) (EvalResult, error) {
	c := tr.cfg
	B := c.BlockSize
	res := EvalResult{AcceptAt: make([]float64, B)}
	atLeast := make([]int, B)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := 0
	for _, w := range tr.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st stats
			for {
				mu.Lock()
				i := next
				next++
				stop := firstErr != nil || ctx.Err() != nil
				mu.Unlock()
				if stop || i >= len(tr.data) {
					return
				}
				s := tr.data[i]
				taps, err := tr.tapsOf(i, s.Tokens)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lo, hi := max(1, s.Start), len(s.Tokens)-B
				accepted := make([]int, hi+1)
				for a0 := lo; a0 <= hi; a0 += 32 {
					var anchors []int
					for a := a0; a <= min(hi, a0+31); a++ {
						anchors = append(anchors, a)
					}
					preds := make([]int, len(anchors)*B)
					st.reset(B)
					ex := example{seq: i, tokens: s.Tokens, taps: taps, anchors: anchors}
					w.w.step(tr.p, nil, tr.fz, c, tr.rp, &ex, 1, &st, preds)
					for j, a := range anchors {
						n := 0
						for k := 1; k < B && preds[j*B+k] == s.Tokens[a+k]; k++ {
							n++
						}
						accepted[a] = n
					}
				}
				rounds, emitted := 0, 0
				local := make([]int, B)
				for p := lo; p <= hi; {
					n := accepted[p]
					rounds++
					emitted += n + 1
					for k := 1; k <= n; k++ {
						local[k]++
					}
					p += n + 1
				}
				mu.Lock()
				res.Rounds += rounds
				res.Emitted += emitted
				for k := range local {
					atLeast[k] += local[k]
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.Rounds > 0 {
		res.Tau = float64(res.Emitted) / float64(res.Rounds)
		for k := 1; k < B; k++ {
			res.AcceptAt[k] = float64(atLeast[k]) / float64(res.Rounds)
		}
	}
	return res, nil
}
