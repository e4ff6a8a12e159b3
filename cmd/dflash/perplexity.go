package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/perplexity"
)

// defaultPerplexityCtx is llama.cpp's perplexity chunk, so figures compare with that tool's.
const defaultPerplexityCtx = 512

// cmdPerplexity scores a text file with a model (perplexity.Score: llama.cpp's chunks, the second
// half of each scored) and, with --kl-base, compares its next-token distributions with a base
// model's over the same tokens: how a user judges a quantized file against the weights it came
// from.
func cmdPerplexity(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("perplexity", stderr)
	var mf modelFlags
	mf.register(fs)
	data := fs.String("data", "", "text file to score")
	klBase := fs.String("kl-base", "", "base model (any reference) to compare with: KL divergence, top-1 agreement, ln(PPL/PPL base)")
	ctxLen := fs.Int("ctx", 0, fmt.Sprintf("chunk length in tokens (default %d, or the model's context if smaller)", defaultPerplexityCtx))
	chunks := fs.Int("chunks", 0, "score at most this many chunks (default: all)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *data == "" {
		return usagef("give --data TEXT, the file to score")
	}
	if mf.synthetic != "" {
		return usagef("--synthetic models have no tokenizer: perplexity needs --model")
	}
	if *ctxLen < 0 || *chunks < 0 {
		return usagef("--ctx and --chunks must be >= 0")
	}
	raw, err := os.ReadFile(*data)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	// Both tokenizers read the text before any weights load, so a mismatch is refused at once.
	tokens, err := textTokens(mf.model, mf.tokenizer, string(raw))
	if err != nil {
		return err
	}
	if *klBase != "" {
		baseTokens, err := textTokens(*klBase, "", string(raw))
		if err != nil {
			return fmt.Errorf("--kl-base: %w", err)
		}
		if err := sameTokens(tokens, baseTokens); err != nil {
			return fmt.Errorf("--kl-base %s: tokenizer differs from %s's: %w", *klBase, mf.model, err)
		}
	}
	e, err := mf.open()
	if err != nil {
		return err
	}
	var base *engine.Engine
	if *klBase != "" {
		bf := modelFlags{model: *klBase, stderr: mf.stderr}
		if base, err = bf.open(); err != nil {
			return fmt.Errorf("--kl-base: %w", err)
		}
	}
	o := perplexity.Options{Ctx: *ctxLen, BOS: -1, Chunks: *chunks}
	if o.Ctx == 0 {
		o.Ctx = defaultPerplexityCtx
		for _, d := range []*engine.Engine{e, base} {
			if d != nil && d.Target.Config().MaxSeq > 0 {
				o.Ctx = min(o.Ctx, d.Target.Config().MaxSeq)
			}
		}
	}
	if e.Tok.AddBOS() && e.Tok.BOS() >= 0 {
		o.BOS = e.Tok.BOS()
	}
	if tty := terminalStderr(mf.stderr); tty != nil {
		var mu sync.Mutex
		done, total, ppl := 0, 0, 0.0
		o.Progress = func(d, t int, p float64) {
			mu.Lock()
			done, total, ppl = d, t, p
			mu.Unlock()
		}
		stop := startStatus(tty, "perplexity", progressDelay, 100*time.Millisecond, func() string {
			mu.Lock()
			defer mu.Unlock()
			if total == 0 {
				return "first chunk"
			}
			return fmt.Sprintf("%s chunks, ppl %.4f", progressBar(done, total, 30), ppl)
		})
		defer stop()
	}
	var bt model.Target
	if base != nil {
		bt = base.Target
	}
	start := time.Now()
	r, err := perplexity.Score(e.Target, bt, tokens, o)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Model   string  `json:"model"`
			Base    string  `json:"base,omitempty"`
			Data    string  `json:"data"`
			Seconds float64 `json:"seconds"`
			perplexity.Result
		}{mf.model, *klBase, *data, elapsed.Seconds(), r})
	}
	printPerplexity(stdout, mf.model, *klBase, *data, r, elapsed)
	return nil
}

// textTokens is text as a prompt of the model named by ref reads it (BOS first when its
// tokenizer adds one), from the model's description alone.
func textTokens(ref, tokenizer, text string) ([]int, error) {
	o, _, err := engine.Resolve(engine.Options{Model: ref, Tokenizer: tokenizer}, nil)
	if err != nil {
		return nil, err
	}
	d, err := engine.Describe(o)
	if err != nil {
		return nil, err
	}
	return (&engine.Engine{Name: ref, Tok: d.Tok}).EncodePrompt(text)
}

// sameTokens says where two tokenizations of one text part.
func sameTokens(a, b []int) error {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Errorf("token %d of the text is %d, the base's %d", i, a[i], b[i])
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("the text is %d tokens, the base's %d", len(a), len(b))
	}
	return nil
}

func printPerplexity(w io.Writer, model, base, data string, r perplexity.Result, elapsed time.Duration) {
	fmt.Fprintf(w, "%s on %s: %d chunks of %d tokens, %d tokens scored (the second half of each chunk) in %s\n",
		model, data, r.Chunks, r.Ctx, r.Tokens, round(elapsed))
	fmt.Fprintf(w, "PPL                  %.4f +/- %.4f\n", r.PPL, r.PPLErr)
	k := r.KL
	if k == nil {
		return
	}
	fmt.Fprintf(w, "base PPL             %.4f +/- %.4f (%s)\n", k.BasePPL, k.BasePPLErr, base)
	fmt.Fprintf(w, "ln(PPL/PPL base)     %.6f +/- %.6f\n", k.LnPPLRatio, k.LnPPLRatioErr)
	fmt.Fprintf(w, "KL(base||model) mean %.6f +/- %.6f nats\n", k.Mean, k.MeanErr)
	var qs []string
	for _, q := range k.Quantiles {
		name := fmt.Sprintf("%g%%", 100*q.Q)
		switch q.Q {
		case 1:
			name = "max"
		case 0.5:
			name = "median"
		case 0:
			name = "min"
		}
		qs = append(qs, fmt.Sprintf("%s %.6f", name, q.Value))
	}
	fmt.Fprintf(w, "KL quantiles         %s\n", strings.Join(qs, ", "))
	fmt.Fprintf(w, "same top token       %.3f +/- %.3f %%\n", 100*k.Top1, 100*k.Top1Err)
	fmt.Fprintf(w, "RMS delta p          %.4f %%\n", 100*k.RMSDeltaP)
}
