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
	path := *tokPath
	if path == "" {
		if *modelPath == "" {
			return usagef("give --model PATH or --tokenizer FILE")
		}
		path = *modelPath
		if p := engine.FindTokenizer(*modelPath, 0); p != "" {
			path = p
		}
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return err
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
