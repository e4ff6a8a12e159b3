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
	"runtime/debug"
	"strings"
)

// devVersion is the version of a build that says nothing better: not a tagged module (go
// install ...@v1.2.3 records that) and no -ldflags "-X main.version=...".
const devVersion = "0.1.0-dev"

// version is set at build time with -ldflags "-X main.version=...".
var version = devVersion

// versionLine is what --version prints: the version (from -ldflags, else the module's, else
// devVersion), then the VCS revision the binary was built from when the build recorded one.
func versionLine(bi *debug.BuildInfo) string {
	v := version
	if v == devVersion && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	line := "dflash " + v
	if bi == nil {
		return line
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		line += fmt.Sprintf(" (revision %.12s%s)", rev, modified)
	}
	return line + " " + bi.GoVersion
}

func printVersion(stdout io.Writer) {
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
}

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
		{"pull", "download a Hugging Face model or draft into the hub cache (resumable, verified)", cmdPull},
		{"list", "list the models and drafts in the hub cache and ollama's store", cmdList},
		{"show", "show what a model is: config, template, stop tokens, fitting drafts", cmdShow},
		{"perplexity", "score a text file with a model: perplexity, and KL divergence against a base model", cmdPerplexity},
		{"convert", "write a model or a draft as a GGUF file (--type f32|bf16|q8_0|q4_0|q4_k_m) or a folder as bf16", cmdConvert},
		{"version", "print the version and the revision it was built from", func(args []string, _ io.Reader, stdout, _ io.Writer) error {
			if len(args) > 0 {
				return usagef("version takes no arguments")
			}
			printVersion(stdout)
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
	if args[0] == "--version" || args[0] == "-version" {
		printVersion(stdout)
		return 0
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		if c.name == args[0] {
			se := &cliStderr{Writer: stderr}
			err := c.run(args[1:], stdin, stdout, se)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case se.flagError:
				// The flag package said what was wrong, and newFlags what to do about it.
				return 2
			case errors.As(err, new(usageError)):
				fmt.Fprintf(stderr, "dflash %s: %v\n", c.name, err)
				return 2
			default:
				fmt.Fprintf(stderr, "dflash %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "dflash: flags come after the command: dflash <command> %s\n", args[0])
	} else {
		fmt.Fprintf(stderr, "dflash: unknown command %q\n", args[0])
	}
	if s, ok := closest(strings.TrimLeft(args[0], "-"), names); ok {
		fmt.Fprintf(stderr, "Did you mean 'dflash %s'?\n", s)
	}
	fmt.Fprintln(stderr, "Run 'dflash help' for the commands.")
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dflash <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'dflash <command> -h' for a command's flags.")
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }
