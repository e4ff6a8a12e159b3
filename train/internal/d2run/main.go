// Command d2run is the experiment driver for the stories260K DFlash2 draft (report figures). It
// mirrors storiesrun with --arch: the same data cache, the same schedule, and an engine tau at
// T = 0 through the session the draft's kind calls for. The engine's CLI wires package train
// itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/train"
)

func main() {
	data := "/work/shared/data"
	out := flag.String("out", "/tmp/dfs2-l3", "output folder")
	arch := flag.String("arch", train.ArchDFlash2, "draft architecture: dflash or dflash2")
	n := flag.Int("n", 3000, "training sequences")
	length := flag.Int("len", 200, "generated tokens per sequence")
	steps := flag.Int("steps", 10000, "steps")
	layers := flag.Int("layers", 3, "draft layers")
	block := flag.Int("block", 16, "block size")
	anchors := flag.Int("anchors", 16, "anchors per sequence")
	seqs := flag.Int("seqs", 8, "sequences per step")
	lr := flag.Float64("lr", 8e-3, "lr")
	alpha := flag.Float64("alpha", 0, "selector loss weight (0: default)")
	evalN := flag.Int("eval", 100, "held-out sequences")
	dataPrefix := flag.String("data", "/tmp/dfs-big", "data cache prefix")
	flag.Parse()
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
	cfg := train.DraftConfig{Layers: *layers, BlockSize: *block, Steps: *steps, LR: *lr, Arch: *arch,
		SelectorAlpha: *alpha, AnchorsPerSeq: *anchors, BatchSeqs: *seqs, Seed: 1, ProgressEvery: 50, CheckpointEvery: 200}
	res, err := train.TrainDraft(ctx, t, d, cfg, *out, os.Stderr)
	check(err)
	fmt.Fprintf(os.Stderr, "trained %d steps in %s (%.0f tok/s), final loss %.4f\n", res.Steps, res.Elapsed.Round(time.Second), res.TokensSec, res.Loss)

	// Engine tau at T = 0 over the held-out prompts.
	var mk func(capa int) runner.Drafter
	var bs int
	if res.Config.Arch == train.ArchDFlash2 {
		dd, err := dflash2.Load(*out, t, dflash2.Options{})
		check(err)
		mk = func(capa int) runner.Drafter { return runner.NewSelectorSession(dd, capa) }
		bs = dd.BlockSize()
	} else {
		dd, err := dflash.Load(*out, t, dflash.Options{})
		check(err)
		mk = func(capa int) runner.Drafter { return runner.NewSession(dd, capa) }
		bs = dd.BlockSize()
	}
	var all runner.Stats
	t2 := time.Now()
	for _, sq := range ev.Sequences {
		p := sq.Tokens[:sq.Start]
		capa := len(p) + *length + bs
		st, err := runner.Generate(ctx, runner.NewSequence(t, capa), runner.Request{
			Prompt: p, Options: sample.Options{}, MaxTokens: *length, Stop: t.Config().EOS,
			Drafter: mk(capa), Depth: &runner.Depth{Fixed: bs - 1},
		}, func(int) error { return nil })
		check(err)
		all.Add(st)
	}
	fmt.Printf("engine (runner.Generate, %s session, greedy): tau %.3f over %d prompts, %s\n",
		archName(res.Config.Arch), all.Tau(), len(ev.Sequences), time.Since(t2).Round(time.Millisecond))
}

func archName(a string) string {
	if a == "" {
		return train.ArchDFlash
	}
	return a
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
