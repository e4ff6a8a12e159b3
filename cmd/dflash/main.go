// Command dflash runs open language models on CPUs, with exact speculative decoding.
//
// The command is thin: it parses flags and calls the packages that do the work (engine, runner,
// server, train). Every subcommand is a function of (args, stdin, stdout, stderr) so tests drive
// it in-process.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

type command struct {
	name, summary string
	run           func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "generate text (or ids) from a model, optionally with a DFlash draft", cmdRun},
		{"bench", "measure decode/prefill speed, bandwidth and speculation against plain decoding", cmdBench},
		{"serve", "serve models over ollama- and OpenAI-compatible HTTP APIs", cmdServe},
		{"tokenize", "print the token ids of text, or decode ids back to text", cmdTokenize},
		{"train", "train a tokenizer or a DFlash draft", cmdTrain},
		{"convert", "rewrite a model folder's tensors as bf16 (half the bytes of f32)", cmdConvert},
		{"version", "print the version", func(_ []string, _ io.Reader, stdout, _ io.Writer) error {
			fmt.Fprintln(stdout, "dflash", version)
			return nil
		}},
	}
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// cli runs one subcommand and returns the process exit code: 0 on success, 2 for usage errors,
// 1 for failures.
func cli(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(args[1:], stdin, stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, new(usageError)):
				fmt.Fprintf(stderr, "dflash %s: %v\n", c.name, err)
				return 2
			default:
				fmt.Fprintf(stderr, "dflash %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "dflash: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dflash <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'dflash <command> -h' for a command's flags.")
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dflash "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
