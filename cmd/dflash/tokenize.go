package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/tokenizer"
)

func cmdTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", stderr)
	modelPath := fs.String("model", "", "model folder (or llama2.c checkpoint) whose tokenizer to use")
	tokPath := fs.String("tokenizer", "", "tokenizer file or folder")
	decode := fs.Bool("decode", false, "read comma- or space-separated ids and print their text")
	bos := fs.Bool("bos", false, "prepend BOS when the tokenizer expects it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var tok tokenizer.Tokenizer
	switch {
	case *modelPath != "":
		// The model's tokenizer as a run of it sees it: its special tokens from the folder's
		// configs, a --tokenizer override honoured.
		d, err := engine.Describe(engine.Options{Model: *modelPath, Tokenizer: *tokPath})
		if err != nil {
			return err
		}
		if tok = d.Tok; tok == nil {
			return fmt.Errorf("model %s has no tokenizer beside it: give --tokenizer FILE", *modelPath)
		}
	case *tokPath != "":
		var err error
		if tok, err = tokenizer.Load(*tokPath); err != nil {
			return err
		}
	default:
		return usagef("give --model PATH or --tokenizer FILE")
	}
	input := strings.Join(fs.Args(), " ")
	if fs.NArg() == 0 {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		input = strings.TrimSuffix(string(b), "\n")
	}
	if *decode {
		ids, err := parseIDs(input, tok.Vocab())
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintln(stdout, tok.Decode(ids))
		return nil
	}
	ids := tok.Encode(input)
	if *bos && tok.AddBOS() && tok.BOS() >= 0 {
		ids = append([]int{tok.BOS()}, ids...)
	}
	fmt.Fprintln(stdout, joinIDs(ids))
	return nil
}
