package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/defaultmodel"
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

const defaultContext = 4096

func cmdRun(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	var mf modelFlags
	mf.register(fs)
	var sf sampleFlags
	sf.register(fs)
	var df draftFlags
	df.register(fs)
	prompt := fs.String("p", "", "prompt text ('-' reads standard input)")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids (BOS is not added)")
	n := fs.Int("n", 256, "tokens to generate at most")
	printIDs := fs.Bool("print-ids", false, "print the generated ids as one comma-separated line instead of text")
	chatMode := fs.Bool("chat", false, "interactive chat: one user turn per line of input, the KV cache kept between turns")
	system := fs.String("system", "", "system message for --chat")
	think := fs.String("think", "", "chat templates' enable_thinking: on or off (default: the template's)")
	stats := fs.Bool("stats", false, "print detailed decoding and speculation statistics")
	ctxLen := fs.Int("ctx", 0, fmt.Sprintf("context length in tokens (default: the model's, at most %d)", defaultContext))
	traceFile := fs.String("trace", "", "write one JSON line per decode round to this file: position, depth asked, proposed ids (and their q when sampling), accepted, emitted ids, draft and verify ns")
	compare := fs.Bool("compare", false, "also decode plainly (same prompt and options) and print both speeds measured in this run")
	var stops stringsFlag
	fs.Var(&stops, "stop", "end the output at the first occurrence of this text, which is not printed (repeatable; needs a tokenizer)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	defaultRun := false // sampling with the default pair's settings (defaultSampling)
	// With no model named, run dflash's own default pair (embedded in the binary) with its draft,
	// and measure plain decoding beside it so the summary shows what speculation bought.
	if mf.model == "" && mf.synthetic == "" {
		target, draft, err := defaultmodel.Dirs()
		if err != nil {
			return err
		}
		mf.model = target
		if df.draft == "" {
			// The depth is the controller's (auto): warm-started from what earlier runs learned
			// on this machine, it is within a few percent of the best fixed depth from the first
			// rounds, at temperature 0 and when sampling (where it settles near plain decoding).
			df.draft = draft
		}
		if !flagSet(fs, "compare") {
			*compare = true
		}
		if *prompt == "" && *promptIDs == "" && !*chatMode {
			*prompt = defaultmodel.Prompt
		}
		defaultRun = defaultSampling(fs, &sf.o)
	}
	if df.draft == "none" {
		df.draft = ""
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q (quote the prompt and pass it with -p)", fs.Args())
	}
	if *n < 0 {
		return usagef("-n %d: must be >= 0", *n)
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	if defaultRun {
		window := "the last " + strconv.Itoa(sample.DefaultPenaltyWindow) + " tokens"
		switch {
		case opts.PenaltyWindow > 0:
			window = "the last " + strconv.Itoa(opts.PenaltyWindow) + " tokens"
		case opts.PenaltyWindow < 0:
			window = "all tokens"
		}
		coupled := ""
		if opts.Coupled {
			coupled = " coupled"
		}
		fmt.Fprintf(stderr, "sampling%s: temperature %g, top-p %g, repeat penalty %g over %s, seed %d (--seed N tells another story, the same N repeats it; --temp 0 decodes greedily)\n",
			coupled, opts.Temperature, opts.TopP, opts.RepeatPenalty, window, opts.Seed)
	}
	e, err := mf.open()
	if err != nil {
		return err
	}
	if e.Desc.TextOnly {
		fmt.Fprintln(stderr, engine.TextOnlyNotice)
	}
	if err := applyModelDefaults(fs, &opts, &stops, ctxLen, e.Desc.Params); err != nil {
		return err
	}
	capacity := contextLength(e, *ctxLen)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var trace *runner.TraceWriter
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		w := bufio.NewWriter(f)
		trace = runner.NewTraceWriter(w)
		defer func() {
			if err := errors.Join(trace.Err(), w.Flush(), f.Close()); err != nil {
				fmt.Fprintf(stderr, "warning: --trace %s: %v\n", *traceFile, err)
			}
		}()
	}

	if *chatMode {
		return runChat(ctx, e, &df, chatSettings{system: *system, think: *think, n: *n, capacity: capacity, stats: *stats, stops: stops, trace: trace}, opts, stdin, stdout, stderr)
	}

	var ids []int
	switch {
	case *promptIDs != "" && *prompt != "":
		return usagef("give -p or --prompt-ids, not both")
	case *promptIDs != "":
		if ids, err = parseIDs(*promptIDs, e.Target.Config().Vocab); err != nil {
			return usagef("--prompt-ids: %v", err)
		}
	default:
		text := *prompt
		if text == "-" || (text == "" && !isTerminalReader(stdin)) {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return fmt.Errorf("read prompt from standard input: %w", err)
			}
			text = strings.TrimRight(string(b), "\n")
		}
		if ids, err = e.EncodePrompt(text); err != nil {
			return err
		}
		if len(ids) == 0 {
			return usagef("empty prompt: give -p TEXT or --prompt-ids (a tokenizer without BOS needs at least one token)")
		}
	}
	if len(ids) >= capacity {
		if e.Desc.Context > capacity {
			return fmt.Errorf("prompt of %d tokens does not fit the context of %d tokens (capped by --ctx; the model supports %d)", len(ids), capacity, e.Desc.Context)
		}
		return fmt.Errorf("prompt of %d tokens does not fit the model's context of %d tokens (at least one must remain to generate)", len(ids), capacity)
	}

	drafter, err := df.drafter(e, ids, opts, *n, capacity)
	if err != nil {
		return err
	}
	var depth runner.Depth
	if drafter != nil {
		depth = drafter.Depth()
	}
	learned := openLearned(e, df.draft, drafter, opts, stderr)
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	if len(stops) > 0 && e.Tok == nil {
		return usagef("--stop needs a tokenizer to see the text (--tokenizer)")
	}
	var generated []int
	// The runner turns tokens into text through the stream (so stop strings see it) whenever
	// the model has a tokenizer; the text is printed unless ids are.
	var stream *tokenizer.Stream
	printText := !*printIDs && e.Tok != nil
	if e.Tok != nil {
		stream = tokenizer.NewStream(e.Tok)
		for _, id := range ids {
			if s := stream.Add(id); printText {
				out.WriteString(s)
			}
		}
		out.Flush()
	}
	emit := func(t runner.Token) error {
		if t.ID >= 0 {
			generated = append(generated, t.ID)
		}
		if printText {
			out.WriteString(t.Text)
			// Flush per token so the text streams; the buffered writer coalesces the bytes of
			// one token's text into one write.
			return out.Flush()
		}
		return nil
	}
	seq := runner.NewSequence(e.Target, capacity)
	// An explicit --seed asks for a reproducible run: with a draft, a fixed depth (the default
	// seed 0 also replays plain decoding, but leaves the depth to the controller). The default
	// pair's sampled run prints its seed, so it is reproducible too.
	seeded := flagSet(fs, "seed") || defaultRun
	req := runner.Request{Prompt: ids, Options: opts, MaxTokens: *n, Stop: e.Stop, StopStrings: stops, Seeded: seeded}
	if stream != nil {
		req.Text = stream
	}
	if trace != nil {
		req.Trace = trace.Round
	}
	st, genErr := generate(ctx, seq, drafter, depth, req, emit)
	learned.save(depth.Controller(), stderr)
	if printText {
		out.WriteString(stream.Flush())
		out.WriteString("\n")
	} else {
		out.WriteString(joinIDs(generated) + "\n")
	}
	out.Flush()
	printSummary(stderr, st, drafter != nil, *stats)
	if *stats {
		fmt.Fprintf(stderr, "kernel %s; AMX: %s\n", kernel.Path(), kernel.AMXStatus())
	}
	if genErr != nil && !errors.Is(genErr, context.Canceled) {
		return genErr
	}
	if *compare && genErr == nil {
		line, err := compareRuns(ctx, e, drafter, learned, ids, stops, opts, seeded, *n, capacity)
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		fmt.Fprintln(stderr, "summary: "+line)
	}
	return nil
}

// compareRuns measures plain and speculative decoding (with dr; nil: plain only) of the same
// request side by side: three alternating silent runs of each (so host noise hits both alike),
// medians reported. The streamed run above is not used for the figures: writing to a terminal is
// not decoding. Every speculative run opens its own session and starts an adaptive policy
// where the streamed run started (warm from the user cache, or cold), as a fresh `dflash run`
// would; the drafter is loaded once. A seeded request runs at the fixed depth the streamed run
// used (runner.Request.Seeded), so the figures are those of the run the user saw.
func compareRuns(ctx context.Context, e *engine.Engine, dr runner.Drafter, learned *learnedCache, ids []int, stops []string, opts sample.Options, seeded bool, n, capacity int) (string, error) {
	speculative := dr != nil
	// The same request as the streamed run, stop strings included (each run reads its own text).
	request := func() runner.Request {
		r := runner.Request{Prompt: ids, Options: opts, MaxTokens: n, Stop: e.Stop, StopStrings: stops, Seeded: seeded}
		if len(stops) > 0 {
			s := tokenizer.NewStream(e.Tok)
			for _, id := range ids {
				s.Add(id)
			}
			r.Text = s
		}
		return r
	}
	var plain, spec []float64
	var tau float64
	var tokens int
	for r := 0; r < 3; r++ {
		st, err := runner.Generate(ctx, runner.NewSequence(e.Target, capacity), request(), func(runner.Token) error { return nil })
		if err != nil {
			return "", fmt.Errorf("plain decoding: %w", err)
		}
		plain, tokens = append(plain, st.DecodeRate()), st.DecodeTokens
		if !speculative {
			continue
		}
		st, err = generate(ctx, runner.NewSequence(e.Target, capacity), dr, learned.fresh(dr.Depth()), request(), func(runner.Token) error { return nil })
		if err != nil {
			return "", fmt.Errorf("speculative decoding: %w", err)
		}
		spec, tau = append(spec, st.DecodeRate()), st.Tau()
	}
	line := fmt.Sprintf("%d tokens", tokens)
	if !speculative {
		return line + fmt.Sprintf(", plain %.1f tok/s (median of 3)", medianF(plain)), nil
	}
	return line + fmt.Sprintf(", tau %.2f, speculative %.1f tok/s, plain %.1f tok/s (medians of 3 alternating runs): %.2fx",
		tau, medianF(spec), medianF(plain), medianF(spec)/medianF(plain)), nil
}

// The default pair's run samples as a user would (ollama's default temperature is 0.8): these
// are its settings, each taken only when its flag is not given. The repeat penalty is ollama's
// default (1.1 over the last 64 tokens, sample.DefaultPenaltyWindow): the small target, sampled
// without it, falls into repeating a sentence within a few hundred tokens. The seed is fixed so
// the story is the same every run (it is printed, and --seed N tells another). The run samples
// coupled (sample.Options.Coupled): the story is then a function of the seed and the target
// alone, the same with the draft, without it (the plain runs of the comparison tell the same
// story) and at whatever depths the controller picks, so the controller stays on. Under
// rejection sampling a seeded run must draft a fixed depth (runner.Depth.Seeded), and at 0.8
// every fixed depth of the shipped draft is slower than plain decoding (0.4-0.6x), where the
// controller falls back to about 1x.
const (
	defaultTemperature   = 0.8
	defaultTopP          = 0.95
	defaultRepeatPenalty = 1.1
	defaultSeed          = 1
)

// defaultSampling fills the sampling options of the default pair's run into o for every flag
// the command line left unset, and reports whether the run samples with them. An explicit
// --temp 0 is today's greedy run and takes none of them.
func defaultSampling(fs *flag.FlagSet, o *sample.Options) bool {
	if flagSet(fs, "temp") && o.Temperature == 0 {
		return false
	}
	for _, d := range []struct {
		flag string
		set  func()
	}{
		{"temp", func() { o.Temperature = defaultTemperature }},
		{"top-p", func() { o.TopP = defaultTopP }},
		{"repeat-penalty", func() { o.RepeatPenalty = defaultRepeatPenalty }},
		{"seed", func() { o.Seed = defaultSeed }},
		{"coupled", func() { o.Coupled = true }},
	} {
		if !flagSet(fs, d.flag) {
			d.set()
		}
	}
	return true
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// contextLength picks the cache capacity: the flag, else the model's length capped so a large
// model does not reserve gigabytes of cache for a short run.
func contextLength(e *engine.Engine, flagged int) int {
	max := e.Desc.Context
	if max <= 0 {
		max = defaultContext
	}
	if flagged > 0 {
		return min(flagged, max)
	}
	return min(max, defaultContext)
}

func printSummary(w io.Writer, st runner.Stats, speculative, detailed bool) {
	fmt.Fprintf(w, "prompt: %d tokens (%d reused) in %s, %.1f tok/s | decode: %d tokens in %s, %.1f tok/s",
		st.PromptTokens, st.Reused, round(st.PromptTime), rate(st.PromptTokens, st.PromptTime),
		st.DecodeTokens, round(st.DecodeTime), st.DecodeRate())
	if speculative {
		fmt.Fprintf(w, " | tau %.2f (%d of %d drafts accepted in %d rounds)", st.Tau(), st.Accepted, st.Drafted, st.Rounds)
	}
	fmt.Fprintln(w)
	if detailed {
		fmt.Fprintln(w, st.String())
	}
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTerminal(f)
}

// chatCommands are the lines --chat answers itself instead of sending them to the model, as
// ollama run does.
var chatCommands = []string{"/help", "/bye", "/clear"}

// historyRows is how many of ids (msgs rendered with the generation prompt, encoded) are the
// conversation alone, msgs rendered without it, when those are a prefix of ids; else 0.
func historyRows(e *engine.Engine, tmpl engine.Template, msgs []chat.Message, copt chat.Options, ids []int) int {
	copt.AddGenerationPrompt = false
	text, err := tmpl.Render(msgs, copt)
	if err != nil {
		return 0
	}
	h, err := e.EncodePrompt(text)
	if err != nil || len(h) >= len(ids) || !slices.Equal(h, ids[:len(h)]) {
		return 0
	}
	return len(h)
}

const chatHelp = `Commands:
  /help, /?   show this help
  /clear      forget the conversation (and its cache); the system message stays
  /bye        leave (so do Ctrl-D and Ctrl-C)
`

type chatSettings struct {
	system, think string
	n, capacity   int
	stats         bool
	stops         []string
	trace         *runner.TraceWriter // nil: none
}

// runChat holds a multi-turn conversation. The target's cache is kept between turns: each turn's
// prompt is the whole rendered conversation, and the runner reuses the rows it shares with the
// previous turn's cache, so only the new turn is read.
func runChat(ctx context.Context, e *engine.Engine, df *draftFlags, cs chatSettings, opts sample.Options, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	if e.Tok == nil {
		return usagef("--chat needs a model with a tokenizer")
	}
	// The plain "Role: text" fallback the server uses is for clients that ask for chat of any
	// model; here it would only hide that the model was never tuned to converse.
	tmpl := e.Desc.Template
	if tmpl.Kind == engine.TemplatePlain {
		return fmt.Errorf("model %s has no chat template (tokenizer_config.json) and no ChatML tokens; use -p for raw prompts", e.Name)
	}
	var copt chat.Options
	copt.AddGenerationPrompt = true
	switch cs.think {
	case "":
	case "on", "off":
		v := cs.think == "on"
		copt.EnableThinking = &v
	default:
		return usagef("--think %q: want on or off", cs.think)
	}
	// start is the conversation a session begins with, and /clear returns to.
	var start []chat.Message
	if cs.system != "" {
		start = append(start, chat.Message{Role: "system", Content: cs.system})
	}
	msgs := slices.Clone(start)
	seq := runner.NewSequence(e.Target, cs.capacity)
	drafter, err := df.drafter(e, nil, opts, cs.n, cs.capacity)
	if err != nil {
		return err
	}
	// One session for the whole conversation: it keeps the draft context of the turns so far,
	// as seq keeps the target's, and the drafter's policy learns across turns.
	var session runner.Session
	var depth runner.Depth
	if drafter != nil {
		session, depth = drafter.Open(cs.capacity), drafter.Depth()
		learned := openLearned(e, df.draft, drafter, opts, stderr)
		defer func() {
			learned.save(depth.Controller(), stderr)
			if cerr := session.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close drafting session: %w", cerr)
			}
		}()
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	interactive := isTerminalReader(stdin)
	fmt.Fprintln(stderr, "Chatting with "+e.Name+". Type /bye or press Ctrl-D to leave, /help for more.")
	var total runner.Stats
	for {
		if interactive {
			fmt.Fprint(stderr, ">>> ")
		}
		if !in.Scan() {
			break
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			cmd, _, _ := strings.Cut(line, " ")
			switch cmd {
			case "/bye":
				printSummary(stderr, total, drafter != nil, cs.stats)
				return nil
			case "/help", "/?":
				fmt.Fprint(stderr, chatHelp)
			case "/clear":
				// A new sequence and drafting session: nothing of the old conversation stays, not
				// even in a cache row the next prompt would have matched. The drafter and its
				// depth policy stay: they hold the model, not the conversation.
				msgs = slices.Clone(start)
				seq = runner.NewSequence(e.Target, cs.capacity)
				if session != nil {
					if err := session.Close(); err != nil {
						return fmt.Errorf("close drafting session: %w", err)
					}
					session = drafter.Open(cs.capacity)
				}
				fmt.Fprintln(stderr, "Cleared the conversation and its cache.")
			default:
				msg := fmt.Sprintf("Unknown command %q.", cmd)
				if s, ok := closest(cmd, chatCommands); ok {
					msg += fmt.Sprintf(" Did you mean %s?", s)
				}
				fmt.Fprintln(stderr, msg+" Type /help for the commands.")
			}
			continue
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: line})
		text, err := tmpl.Render(msgs, copt)
		if err != nil {
			return fmt.Errorf("chat template: %w", err)
		}
		ids, err := e.EncodePrompt(text)
		if err != nil {
			return err
		}
		if len(ids) >= cs.capacity {
			return fmt.Errorf("conversation of %d tokens no longer fits the context of %d tokens (/clear starts a new one)", len(ids), cs.capacity)
		}
		stream := tokenizer.NewStream(e.Tok)
		var reply strings.Builder
		req := runner.Request{
			Prompt: ids, Options: opts, MaxTokens: cs.n, Stop: e.Stop, StopStrings: cs.stops, Text: stream,
			Session: session, Depth: depth,
		}
		if !cache.CanRewind(seq.Cache()) {
			// A hybrid target resumes the next turn from a checkpoint: ask for one where the
			// conversation ends and this turn's generation prompt begins.
			req.Checkpoint = historyRows(e, tmpl, msgs, copt, ids)
		}
		if cs.trace != nil {
			req.Trace = cs.trace.Round
		}
		st, err := runner.Generate(ctx, seq, req, func(t runner.Token) error {
			reply.WriteString(t.Text)
			_, err := io.WriteString(stdout, t.Text)
			return err
		})
		rest := stream.Flush()
		reply.WriteString(rest)
		fmt.Fprintln(stdout, rest)
		total.Add(st)
		if cs.stats {
			printSummary(stderr, st, drafter != nil, false)
		}
		if err != nil {
			if errors.Is(err, context.Canceled) {
				break
			}
			return err
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: reply.String()})
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("read standard input: %w", err)
	}
	printSummary(stderr, total, drafter != nil, cs.stats)
	return nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string     { return strings.Join(*f, ", ") }
func (f *stringsFlag) Set(s string) error { *f = append(*f, s); return nil }
