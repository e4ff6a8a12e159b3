// Command lmrun trains the default small target LM with train.TrainTarget and evaluates it (a
// helper of the dflash authors until `dflash train target` exists; it never writes outside
// the folders it is given).
//
//	go run ./train/internal/lmrun --tok /tmp/dflt/tok --data ../shared/data/corpora/tinystories_4MB.txt --out /tmp/dflt/target
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/dflash/dflash/model"

	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/train"
)

func main() {
	tokDir := flag.String("tok", "", "tokenizer folder")
	data := flag.String("data", "", "training text")
	out := flag.String("out", "", "output folder")
	steps := flag.Int("steps", 0, "optimizer steps (0: from epochs)")
	epochs := flag.Float64("epochs", 0, "epochs when steps is 0")
	hidden := flag.Int("hidden", 0, "hidden size")
	layers := flag.Int("layers", 0, "layers")
	batch := flag.Int("batch", 0, "windows per step")
	seqLen := flag.Int("seq", 0, "window length")
	lr := flag.Float64("lr", 0, "peak learning rate")
	bf16 := flag.Bool("bf16", false, "write bf16 weights")
	eval := flag.String("eval", "", "text for bits per byte after training")
	evalBytes := flag.Int("eval-bytes", 200_000, "bytes of the eval text")
	evalModel := flag.String("eval-model", "", "only evaluate this model (a Hugging Face folder or a llama2.c .bin) on --eval with the --tok tokenizer")
	window := flag.Int("window", 0, "tokens per evaluation forward (0: min(max_seq, 256))")
	flag.Parse()
	tok, err := tokenizer.Load(*tokDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *evalModel != "" {
		var m model.Target
		if strings.HasSuffix(*evalModel, ".bin") {
			m, err = transformer.LoadLlama2C(*evalModel)
		} else {
			m, err = transformer.LoadHF(*evalModel, transformer.Options{})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, lower := range []bool{false, true} {
			r, err := train.EvalBPB(m, tok, *eval, train.BPBOptions{MaxBytes: *evalBytes, Lower: lower, Window: *window})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Printf("%s: bits per byte on %s (first %d bytes, lower-cased %v, window %d): %.4f (%d tokens)\n",
				*evalModel, *eval, *evalBytes, lower, *window, r.BitsPerByte, r.Tokens)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := train.TargetConfig{Steps: *steps, Epochs: *epochs, Hidden: *hidden, Layers: *layers, BatchSeqs: *batch,
		SeqLen: *seqLen, LR: *lr, BF16: *bf16, TokenizerDir: *tokDir}
	res, err := train.TrainTarget(ctx, tok, *data, cfg, *out, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if res.Resumed == res.Steps {
		fmt.Printf("already trained (%d steps): folder rewritten from the checkpoint\n", res.Steps)
	} else {
		fmt.Printf("trained %d steps (%d params, %d tokens) in %s, %.0f tok/s, final loss %.4f\n",
			res.Steps, res.Params, res.Tokens, res.Elapsed.Round(1e9), res.TokensSec, res.Loss)
	}
	if *eval == "" {
		return
	}
	m, err := transformer.LoadHF(*out, transformer.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := train.EvalBPB(m, tok, *eval, train.BPBOptions{MaxBytes: *evalBytes, Lower: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("bits per byte on %s (first %d bytes, lower-cased): %.4f (%d tokens)\n", *eval, *evalBytes, r.BitsPerByte, r.Tokens)
}
