// Command storiesrun is the experiment driver for the stories260K DFlash and DFlash2 drafts
// (BENCHMARKS.md sections 5 and 9): the same data cache and schedule for both architectures, and an
// engine tau at T = 0 through the drafting session the draft's kind calls for. The engine's CLI
// (dflash train draft) wires package train itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/train"
)

func main() {
	data := "/work/shared/data"
	out := flag.String("out", "/tmp/dflash-stories-draft", "output folder")
	n := flag.Int("n", 2000, "training sequences")
	length := flag.Int("len", 200, "generated tokens per sequence")
	steps := flag.Int("steps", 2000, "steps")
	layers := flag.Int("layers", 2, "draft layers")
	block := flag.Int("block", 16, "block size")
	anchors := flag.Int("anchors", 16, "anchors per sequence")
	seqs := flag.Int("seqs", 8, "sequences per step")
	lr := flag.Float64("lr", 3e-3, "lr")
	arch := flag.String("arch", train.ArchDFlash, "draft architecture: dflash or dflash2")
	alpha := flag.Float64("alpha", 0, "dflash2: selector loss weight (0: default)")
	evalN := flag.Int("eval", 100, "held-out sequences")
	dataPrefix := flag.String("data", "", "data cache prefix (default: -out)")
	var taps []int
	flag.Func("taps", "comma-free repeated tap ids", func(s string) error {
		var v int
		_, err := fmt.Sscan(s, &v)
		taps = append(taps, v)
		return err
	})
	flag.Parse()
	if *dataPrefix == "" {
		*dataPrefix = *out
	}
	t, err := transformer.LoadLlama2C(data + "/stories260K/stories260K.bin")
	check(err)
	tok, err := tokenizer.Load(data + "/stories260K/tok512.bin")
	check(err)
	ctx := context.Background()
	t0 := time.Now()
	d, err := train.GenerateTargetData(ctx, t, tok, data+"/corpora/tinystories_4MB.txt", *dataPrefix+"-data.json",
		train.DataOptions{N: *n, Length: *length, Lower: true, Seed: 1, Progress: os.Stderr})
	check(err)
	ev, err := train.GenerateTargetData(ctx, t, tok, data+"/corpora/tinystories_val_800K.txt", *dataPrefix+"-eval.json",
		train.DataOptions{N: *evalN, Length: *length, Lower: true, Seed: 2, Progress: os.Stderr})
	check(err)
	fmt.Fprintf(os.Stderr, "data ready in %s\n", time.Since(t0).Round(time.Millisecond))
	cfg := train.DraftConfig{Layers: *layers, BlockSize: *block, Taps: taps, Steps: *steps, LR: *lr, Arch: *arch,
		SelectorAlpha: *alpha, AnchorsPerSeq: *anchors, BatchSeqs: *seqs, Seed: 1, ProgressEvery: 50, CheckpointEvery: 200}
	res, err := train.TrainDraft(ctx, t, d, cfg, *out, os.Stderr)
	check(err)
	fmt.Fprintf(os.Stderr, "trained %d steps in %s (%.0f tok/s), final loss %.4f\n", res.Steps, res.Elapsed.Round(time.Second), res.TokensSec, res.Loss)
	if res.Config.Arch != train.ArchDFlash2 {
		// The package's own acceptance walk covers DFlash only.
		dr, err := train.LoadDraft(*out, t)
		check(err)
		t1 := time.Now()
		er, err := train.Evaluate(ctx, t, dr, ev, 2)
		check(err)
		fmt.Printf("tau %.3f over %d rounds (%d emitted); accept>=k %v; eval %s\n", er.Tau, er.Rounds, er.Emitted, er.AcceptAt[1:], time.Since(t1).Round(time.Millisecond))
	}
	dd, err := (&engine.Engine{Target: t}).LoadDraft(*out)
	check(err)
	var all runner.Stats
	t2 := time.Now()
	for _, sq := range ev.Sequences {
		p := sq.Tokens[:sq.Start]
		capa := len(p) + *length + dd.BlockSize
		st, err := runner.Generate(ctx, runner.NewSequence(t, capa), runner.Request{
			Prompt: p, Options: sample.Options{}, MaxTokens: *length, Stop: t.Config().EOS,
			Drafter: dd.NewSession(capa), Depth: &runner.Depth{Fixed: dd.BlockSize - 1},
		}, func(int) error { return nil })
		check(err)
		all.Add(st)
	}
	fmt.Printf("engine (runner.Generate + %s session, greedy, depth %d): tau %.3f over %d prompts, %s\n", dd.Arch, dd.BlockSize-1, all.Tau(), len(ev.Sequences), time.Since(t2).Round(time.Millisecond))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
