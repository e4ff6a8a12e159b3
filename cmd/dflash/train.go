package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/train"

	"github.com/dflash/dflash/tokenizer/bpetrain"
)

// cmdTrain dispatches the training subcommands. Training writes Hugging Face layouts, so what it
// makes loads through the same paths as downloaded models.
func cmdTrain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	subs := map[string]func([]string, io.Reader, io.Writer, io.Writer) error{
		"tokenizer": cmdTrainTokenizer,
		"target":    cmdTrainTarget,
		"draft":     cmdTrainDraft,
	}
	if len(args) == 0 || subs[args[0]] == nil {
		return usagef("usage: dflash train tokenizer|target|draft [flags] (see dflash train <what> -h)")
	}
	return subs[args[0]](args[1:], stdin, stdout, stderr)
}

func cmdTrainTokenizer(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("train tokenizer", stderr)
	data := fs.String("data", "", "training text file")
	out := fs.String("out", "", "folder to write tokenizer.json and tokenizer_config.json into")
	vocab := fs.Int("vocab", 4096, "vocabulary size, byte symbols and special tokens included")
	minFreq := fs.Int("min-frequency", 2, "pairs seen fewer times are not merged")
	special := fs.String("special", "<|endoftext|>,<|im_start|>,<|im_end|>,<|mask|>", "comma-separated special tokens (ids 0.. in this order)")
	eos := fs.String("eos", "<|endoftext|>", "end-of-sequence token (one of --special)")
	lower := fs.Bool("lowercase", false, "lower-case text before splitting (for lower-cased corpora)")
	nfc := fs.Bool("nfc", false, "NFC-normalize text before splitting")
	maxBytes := fs.Int64("max-bytes", 0, "read at most this many bytes of text (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" || *out == "" {
		return usagef("give --data FILE and --out DIR")
	}
	f, err := os.Open(*data)
	if err != nil {
		return err
	}
	defer f.Close()
	var sp []string
	for _, s := range strings.Split(*special, ",") {
		if s = strings.TrimSpace(s); s != "" {
			sp = append(sp, s)
		}
	}
	t0 := time.Now()
	res, err := bpetrain.Train(f, bpetrain.Config{VocabSize: *vocab, MinFrequency: *minFreq, Special: sp, Lowercase: *lower, NFC: *nfc, MaxBytes: *maxBytes}, stderr)
	if err != nil {
		return fmt.Errorf("train tokenizer on %s: %w", *data, err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := res.WriteFiles(*out, *eos); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tokenizer: %d tokens (%d merges) from %d bytes in %s, written to %s\n", res.Vocab(), res.Merges(), res.TrainingBytes(), time.Since(t0).Round(time.Millisecond), *out)
	return nil
}

// cmdTrainTarget trains a small Qwen3-architecture causal LM from text and writes a Hugging Face
// folder (with the tokenizer copied in) that every dflash command loads like a downloaded model.
// Interrupting it writes a checkpoint; the same command resumes.
func cmdTrainTarget(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("train target", stderr)
	tokDir := fs.String("tokenizer", "", "tokenizer folder (e.g. from dflash train tokenizer)")
	data := fs.String("data", "", "training text")
	out := fs.String("out", "", "output folder")
	var c train.TargetConfig
	fs.IntVar(&c.Layers, "layers", 0, "decoder layers (default 6)")
	fs.IntVar(&c.Hidden, "hidden", 0, "hidden size (default 192)")
	fs.IntVar(&c.Heads, "heads", 0, "attention heads (default 4)")
	fs.IntVar(&c.KVHeads, "kv-heads", 0, "key/value heads (default 2)")
	fs.IntVar(&c.SeqLen, "seq", 0, "training window in tokens (default 256)")
	fs.IntVar(&c.BatchSeqs, "batch", 0, "windows per step (default 8)")
	fs.IntVar(&c.Steps, "steps", 0, "optimizer steps (default: from --epochs)")
	fs.Float64Var(&c.Epochs, "epochs", 0, "passes over the text when --steps is 0 (default 2)")
	fs.Float64Var(&c.LR, "lr", 0, "peak learning rate (default 3e-3)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of initialisation and window order")
	fs.BoolVar(&c.BF16, "bf16", false, "store the weights in bf16 (half the size)")
	evalFile := fs.String("eval", "", "held-out text: report bits per byte after training")
	evalBytes := fs.Int("eval-bytes", 200_000, "bytes of --eval to score")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokDir == "" || *data == "" || *out == "" {
		return usagef("give --tokenizer, --data and --out")
	}
	tok, err := tokenizer.Load(*tokDir)
	if err != nil {
		return err
	}
	c.TokenizerDir = *tokDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := train.TrainTarget(ctx, tok, *data, c, *out, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: checkpoint written to %s; run the same command again to resume", *out)
		}
		return err
	}
	fmt.Fprintf(stdout, "target: %d steps (%d resumed), %d parameters, %d tokens, final loss %.4f, written to %s\n",
		res.Steps, res.Resumed, res.Params, res.Tokens, res.Loss, *out)
	if *evalFile != "" {
		e, err := engine.Open(engine.Options{Model: *out})
		if err != nil {
			return err
		}
		r, err := train.EvalBPB(e.Target, e.Tok, *evalFile, train.BPBOptions{MaxBytes: *evalBytes})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "held-out: %.4f bits per byte on the first %d bytes of %s\n", r.BitsPerByte, r.Bytes, *evalFile)
	}
	return nil
}

// cmdTrainDraft distils a DFlash draft for a frozen target from the target's own continuations
// of prompts, greedy or sampled at the temperatures users use, optionally with the target's top-K
// probabilities as soft targets (cached beside the output with how they were made, so a second
// run reuses them and a run with other data flags is refused), or from raw text. Interrupting it
// (Ctrl-C) writes a checkpoint; running the same command again resumes.
func cmdTrainDraft(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("train draft", stderr)
	target := fs.String("target", "", "target model: a Hugging Face folder or a llama2.c checkpoint")
	tokPath := fs.String("tokenizer", "", "tokenizer of the target (default: found with it)")
	data := fs.String("data", "", "text file: prompts are the first tokens of its lines")
	out := fs.String("out", "", "output folder (config.json, model.safetensors, checkpoint.bin, data.json)")
	raw := fs.Bool("raw", false, "train on chunks of the raw text instead of the target's continuations (cheaper, lower acceptance)")
	n := fs.Int("n", 3000, "training sequences")
	length := fs.Int("len", 200, "tokens per sequence (generated, or raw chunk length)")
	lower := fs.Bool("lower", false, "lower-case the text first (for targets trained on lower-cased text, e.g. stories260K)")
	layers := fs.Int("layers", 0, "draft decoder layers (default from the target's depth)")
	block := fs.Int("block", 16, "block size B (anchor + B-1 masks)")
	tapsFlag := fs.String("taps", "", "comma-separated target layers to tap (default: DFLASH.md's rule)")
	mask := fs.Int("mask", 0, "mask token id (0: default, which is 151669 for Qwen3 vocabularies and 0 otherwise)")
	steps := fs.Int("steps", 1000, "optimizer steps")
	lr := fs.Float64("lr", 3e-3, "peak learning rate (AdamW, warm-up then cosine)")
	batch := fs.Int("batch", 8, "sequences per step")
	anchors := fs.Int("anchors", 16, "anchor blocks sampled per sequence and step")
	seed := fs.Uint64("seed", 1, "seed of data selection, initialisation and anchor sampling")
	arch := fs.String("arch", "dflash", "draft architecture: dflash, or dflash2 (adds convolutions and a candidate selector)")
	convKernel := fs.Int("conv-kernel", 0, "dflash2: convolution taps (0: default 2)")
	convGroup := fs.Int("conv-group", 0, "dflash2: channels per convolution group (0: default 16 or what divides hidden)")
	selRank := fs.Int("selector-rank", 0, "dflash2: selector codebook rank (0: default)")
	selTopK := fs.Int("selector-topk", 0, "dflash2: candidates per slot (0: default 16)")
	selAlpha := fs.Float64("selector-alpha", 0, "dflash2: weight of the selector loss (0: default 1)")
	dataTemp := fs.Float64("data-temp", 0, "temperature of the target's training continuations (0: greedy)")
	dataTemps := fs.String("data-temps", "", "comma-separated temperatures splitting the sequences among them, e.g. 0,0.8,1 (instead of --data-temp)")
	dataTopP := fs.Float64("data-top-p", 1, "top-p of the sampled training continuations (1: off)")
	softTopK := fs.Int("soft-topk", 0, "keep the target's K most probable next tokens per position as soft targets, 8*K bytes per token (0: 8 with --loss soft|mix, else none)")
	regen := fs.Bool("regen-data", false, "rebuild the cached data.json when it was made with other data flags (its checkpoint then no longer resumes)")
	loss := fs.String("loss", "hard", "hard (the continuation's tokens), soft (the target's top-K probabilities) or mix")
	softWeight := fs.Float64("soft-weight", 0, "weight of the soft term in --loss mix, in (0, 1] (0: default 0.5)")
	evalFile := fs.String("eval", "", "held-out text file: report tau on the target's continuations of its prompts")
	evalN := fs.Int("eval-n", 100, "held-out sequences")
	evalTemps := fs.String("eval-temps", "0", "comma-separated temperatures to report held-out tau at (sampling with --seed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || *data == "" || *out == "" {
		return usagef("give --target, --data and --out")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	temps := []float64{*dataTemp}
	if *dataTemps != "" {
		if given["data-temp"] {
			return usagef("give --data-temp or --data-temps, not both")
		}
		var err error
		if temps, err = parseTemps(*dataTemps); err != nil {
			return usagef("--data-temps: %v", err)
		}
	}
	etemps, err := parseTemps(*evalTemps)
	if err != nil {
		return usagef("--eval-temps: %v", err)
	}
	if *loss != train.LossHard && *loss != train.LossSoft && *loss != train.LossMix {
		return usagef("--loss %q: want hard, soft or mix", *loss)
	}
	if *softTopK == 0 && *loss != train.LossHard {
		*softTopK = 8
	}
	if *raw && (*softTopK > 0 || given["data-temp"] || *dataTemps != "") {
		return usagef("--raw text has no target continuations: --data-temp(s), --soft-topk and --loss soft|mix need them")
	}
	var taps []int
	if *tapsFlag != "" {
		if taps, err = parseIDs(*tapsFlag, 1<<20); err != nil {
			return usagef("--taps: %v", err)
		}
	}
	e, err := engine.Open(engine.Options{Model: *target, Tokenizer: *tokPath})
	if err != nil {
		return err
	}
	if e.Tok == nil {
		return fmt.Errorf("target %s has no tokenizer: give --tokenizer", *target)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := train.DataOptions{N: *n, Length: *length, Lower: *lower, Seed: *seed, Progress: stderr,
		Temps: temps, TopP: *dataTopP, SoftTopK: *softTopK, Regenerate: *regen}
	var d *train.Data
	if *raw {
		d, err = train.RawTextData(e.Tok, *data, opts)
	} else {
		d, err = train.GenerateTargetData(ctx, e.Target, e.Tok, *data, filepath.Join(*out, "data.json"), opts)
	}
	if err != nil {
		return err
	}
	cfg := train.DraftConfig{Layers: *layers, BlockSize: *block, Taps: taps, Steps: *steps, LR: *lr, BatchSeqs: *batch, AnchorsPerSeq: *anchors, Seed: *seed}
	cfg.MaskID = *mask
	cfg.Loss, cfg.SoftWeight = *loss, *softWeight
	cfg.Arch, cfg.ConvKernel, cfg.ConvGroup, cfg.SelectorRank, cfg.SelectorTopK, cfg.SelectorAlpha = *arch, *convKernel, *convGroup, *selRank, *selTopK, *selAlpha
	t0 := time.Now()
	res, err := train.TrainDraft(ctx, e.Target, d, cfg, *out, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: checkpoint written to %s; run the same command again to resume", *out)
		}
		return err
	}
	fmt.Fprintf(stdout, "draft: %d steps (%d resumed) in %s, final loss %.3f, written to %s\n", res.Steps, res.Resumed, time.Since(t0).Round(time.Second), res.Loss, *out)
	if *evalFile != "" {
		// The held-out prompts are what matters (the engine generates its own continuations);
		// the file is cheap to rebuild, so other flags rebuild it rather than refuse.
		ev, err := train.GenerateTargetData(ctx, e.Target, e.Tok, *evalFile, filepath.Join(*out, "eval.json"),
			train.DataOptions{N: *evalN, Length: *length, Lower: *lower, Seed: *seed + 1, Progress: stderr, Regenerate: true})
		if err != nil {
			return err
		}
		dr, err := e.LoadDraft(*out)
		if err != nil {
			return err
		}
		// Full blocks for DFlash; a DFlash2 draft keeps its own fixed depth (DFLASH.md section 5).
		depth := runner.Fixed(dr.BlockSize - 1)
		if dr.Arch == dflash2.Arch {
			depth = dr.Drafter.Depth()
		}
		for _, temp := range etemps {
			var st runner.Stats
			for i, s := range ev.Sequences {
				prompt := s.Tokens[:max(1, s.Start)]
				seq := runner.NewSequence(e.Target, len(s.Tokens)+dr.BlockSize+8)
				sess := dr.Drafter.Open(len(s.Tokens) + dr.BlockSize + 8)
				opt := sample.Options{Temperature: float32(temp), Seed: *seed + uint64(i)}
				one, err := runner.Generate(ctx, seq, runner.Request{Prompt: prompt, Options: opt, MaxTokens: len(s.Tokens) - len(prompt), Stop: e.Stop,
					Session: sess, Depth: depth}, func(runner.Token) error { return nil })
				if cerr := sess.Close(); cerr != nil && err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				st.Add(one)
			}
			fmt.Fprintf(stdout, "held-out: %d sequences, tau %.2f at temperature %g (%s, block %d)\n", len(ev.Sequences), st.Tau(), temp, dr.Arch, dr.BlockSize)
		}
	}
	return nil
}

// parseTemps reads a comma-separated list of temperatures, each finite and >= 0.
func parseTemps(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("temperature %q, want a number >= 0", f)
		}
		out = append(out, v)
	}
	return out, nil
}
