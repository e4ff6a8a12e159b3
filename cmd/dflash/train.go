package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dflash/dflash/tokenizer/bpetrain"
)

// cmdTrain dispatches the training subcommands. Training writes Hugging Face layouts, so what it
// makes loads through the same paths as downloaded models.
func cmdTrain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	subs := map[string]func([]string, io.Reader, io.Writer, io.Writer) error{
		"tokenizer": cmdTrainTokenizer,
		"draft":     cmdTrainDraft,
	}
	if len(args) == 0 || subs[args[0]] == nil {
		return usagef("usage: dflash train tokenizer|draft [flags] (see dflash train <what> -h)")
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

// cmdTrainDraft is wired when the trainer lands.
func cmdTrainDraft(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	return fmt.Errorf("train draft: not available in this build")
}
