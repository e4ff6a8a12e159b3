package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// benchReport is what `dflash bench` measures, printed as a table or (--json) one object.
// Every ratio in it comes from figures measured in the same run.
type benchReport struct {
	Model         string        `json:"model"`
	Kernel        string        `json:"kernel"`
	Threads       int           `json:"threads"`
	WeightBytes   int64         `json:"weight_bytes"`
	ProbeGBs      float64       `json:"bandwidth_probe_gbs"`
	PrefillTokens int           `json:"prefill_tokens"`
	PrefillTokS   float64       `json:"prefill_tok_s"`
	DecodeTokens  int           `json:"decode_tokens"`
	DecodeTokS    float64       `json:"decode_tok_s"`
	DecodeGBs     float64       `json:"decode_effective_gbs"`
	DecodeOfProbe float64       `json:"decode_fraction_of_probe"`
	VerifyCost    []verifyCost  `json:"verify_cost,omitempty"`
	Speculation   []specFigures `json:"speculation,omitempty"`
}

// verifyCost is c(n)/c(1): the time of one target forward over n rows (a verification of n-1
// drafts) divided by that of a one-row decode step at the same offset.
type verifyCost struct {
	Rows  int     `json:"rows"`
	Ratio float64 `json:"ratio"`
}

type specFigures struct {
	Draft       string  `json:"draft"`
	Depth       int     `json:"depth"` // 0: the draft's own policy (adaptive for DFlash)
	Temperature float32 `json:"temperature"`
	Tau         float64 `json:"tau"`
	PlainTokS   float64 `json:"plain_tok_s"`
	SpecTokS    float64 `json:"spec_tok_s"`
	Speedup     float64 `json:"speedup"`
	Prompts     int     `json:"prompts"`
}

func cmdBench(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	var mf modelFlags
	mf.register(fs)
	var sf sampleFlags
	sf.register(fs)
	draft := fs.String("draft", "", "DFlash draft folder, or 'oracle' (drafts the target's greedy continuation; ceiling of the engine)")
	depthsFlag := fs.String("depths", "", "draft depths to measure, e.g. 1-15 or 2,4,8; 0 is the draft's own policy (DFlash: adaptive, one depth controller kept across all prompts after one unmeasured pass, as a server keeps one; DFlash2: fixed 7) (default: oracle 1-15, a draft: 0)")
	promptsFile := fs.String("prompts", "", "file of prompts, one per line (default: random token ids)")
	maxPrompts := fs.Int("max-prompts", 8, "prompts to use from --prompts")
	n := fs.Int("n", 128, "tokens to decode per measurement")
	prefill := fs.Int("prefill", 512, "prompt length for the prefill measurement")
	reps := fs.Int("reps", 3, "repetitions; medians are reported")
	probe := fs.Bool("probe", true, "measure the memory bandwidth ceiling in the same run")
	asJSON := fs.Bool("json", false, "print one JSON object")
	verifyFlag := fs.String("verify", "2,4,8,16", "row counts n at which to measure the verify cost c(n)/c(1) (empty: skip)")
	verifyAt := fs.Int("verify-at", 256, "committed rows before the verify-cost forwards (at most what the cache holds; --prefill sizes it)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (read it with go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *n < 1 || *reps < 1 || *prefill < 1 {
		return usagef("-n, --reps and --prefill must be positive")
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	e, err := mf.open()
	if err != nil {
		return err
	}
	cfg := e.Target.Config()
	if !flagSet(fs, "prefill") {
		// The default prompt length must fit small models' contexts (stories260K has 512).
		*prefill = min(*prefill, maxSeq(cfg)/2)
	}
	capacity := min(max(*prefill, 64)+*n+64, maxSeq(cfg))
	if *prefill+1 > capacity {
		return usagef("--prefill %d does not fit the model's context of %d", *prefill, maxSeq(cfg))
	}
	rep := benchReport{Model: e.Name, Kernel: kernel.Path(), Threads: runtime.GOMAXPROCS(0), WeightBytes: e.Target.WeightBytes()}
	logf := func(format string, a ...any) {
		if !*asJSON {
			fmt.Fprintf(stderr, format+"\n", a...)
		}
	}

	prompts, err := benchPrompts(e, *promptsFile, *maxPrompts, *prefill)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 7))
	long := make([]int, *prefill)
	for i := range long {
		long[i] = rng.IntN(cfg.Vocab)
	}

	// Prefill: one cache, the whole prompt, rewound between repetitions.
	c := e.Target.NewCache(capacity)
	rep.PrefillTokens = *prefill
	rep.PrefillTokS = float64(*prefill) / median(*reps, func() time.Duration {
		_ = c.Rewind(0)
		t0 := time.Now()
		for off := 0; off < len(long); off += 512 {
			end := min(off+512, len(long))
			rows := model.LogitsNone
			if end == len(long) {
				rows = model.LogitsLast
			}
			if _, err := e.Target.Forward(c, model.Request{Tokens: long[off:end], Logits: rows}); err != nil {
				panic(err) // capacity was checked above; a failure here is our bug
			}
		}
		return time.Since(t0)
	}).Seconds()
	logf("prefill: %d tokens, %.1f tok/s", *prefill, rep.PrefillTokS)

	// Plain decoding: the reference every speculative figure is divided by.
	plain := func(p []int, o sample.Options) (float64, []int, error) {
		if o.Greedy() {
			var best []float64
			var cont []int
			for r := 0; r < *reps; r++ {
				rate, c, err := plainOnce(e, p, *n, capacity)
				if err != nil {
					return 0, nil, err
				}
				best, cont = append(best, rate), c
			}
			return medianF(best), cont, nil
		}
		var best []float64
		var cont []int
		for r := 0; r < *reps; r++ {
			cont = cont[:0]
			seq := runner.NewSequence(e.Target, capacity)
			st, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: p, Options: o, MaxTokens: *n, Stop: e.Stop},
				func(t runner.Token) error { cont = append(cont, t.ID); return nil })
			if err != nil {
				return 0, nil, err
			}
			best = append(best, st.DecodeRate())
		}
		return medianF(best), cont, nil
	}
	// Plain decoding against the bandwidth ceiling. The host's bandwidth drifts with other load,
	// so each repetition measures the probe right before its decode and the ratio is taken per
	// repetition; the report gives medians.
	var rates, probes, ratios []float64
	for r := 0; r < *reps; r++ {
		var pr float64
		if *probe {
			pr = kernel.ProbeBandwidth(1<<30, 500*time.Millisecond)
		}
		rate, _, err := plainOnce(e, prompts[0], *n, capacity)
		if err != nil {
			return err
		}
		rates = append(rates, rate)
		if pr > 0 {
			probes = append(probes, pr)
			ratios = append(ratios, rate*float64(rep.WeightBytes)/1e9/pr)
		}
	}
	rep.DecodeTokens = *n
	rep.DecodeTokS = medianF(rates)
	rep.DecodeGBs = rep.DecodeTokS * float64(rep.WeightBytes) / 1e9
	if len(probes) > 0 {
		rep.ProbeGBs = medianF(probes)
		rep.DecodeOfProbe = medianF(ratios)
		logf("bandwidth probe: %.1f GB/s (median of %d, each right before a decode)", rep.ProbeGBs, len(probes))
	}
	if len(probes) > 0 {
		logf("decode: %.1f tok/s, %.1f GB/s effective (%.0f%% of the probe, median of per-repetition ratios)", rep.DecodeTokS, rep.DecodeGBs, 100*rep.DecodeOfProbe)
	} else {
		logf("decode: %.1f tok/s, %.1f GB/s effective", rep.DecodeTokS, rep.DecodeGBs)
	}

	// Verify cost: a forward of n+1 rows against one of 1 row, at the same offset.
	if *verifyFlag != "" {
		counts, err := parseDepths(*verifyFlag)
		if err != nil {
			return usagef("--verify: %v", err)
		}
		if slices.Contains(counts, 0) {
			return usagef("--verify: row counts start at 1")
		}
		// Verify at a realistic offset: 256 committed rows by default (or what the cache allows).
		most := slices.Max(counts)
		base := max(0, min(*verifyAt, capacity-most))
		toks := make([]int, base+most)
		for i := range toks {
			toks[i] = rng.IntN(cfg.Vocab)
		}
		_ = c.Rewind(0)
		if base > 0 {
			if _, err := e.Target.Forward(c, model.Request{Tokens: toks[:base], Logits: model.LogitsNone}); err != nil {
				return err
			}
		}
		cost := func(rows int) time.Duration {
			return median(max(*reps, 5), func() time.Duration {
				t0 := time.Now()
				if _, err := e.Target.Forward(c, model.Request{Tokens: toks[base : base+rows], Logits: model.LogitsAll}); err != nil {
					panic(err)
				}
				d := time.Since(t0)
				_ = c.Rewind(base)
				return d
			})
		}
		one := cost(1)
		for _, k := range counts {
			r := float64(cost(k)) / float64(one)
			rep.VerifyCost = append(rep.VerifyCost, verifyCost{Rows: k, Ratio: r})
			logf("verify cost c(%d)/c(1): %.2f", k, r)
		}
	}

	if *draft != "" {
		if err := benchSpeculation(e, &rep, *draft, *depthsFlag, prompts, opts, *n, *reps, capacity, plain, logf); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchTable(stdout, rep)
	return nil
}

func benchSpeculation(e *engine.Engine, rep *benchReport, draft, depthsFlag string, prompts [][]int, opts sample.Options, n, reps, capacity int,
	plain func([]int, sample.Options) (float64, []int, error), logf func(string, ...any)) error {
	var depths []int
	var err error
	switch {
	case depthsFlag != "":
		if depths, err = parseDepths(depthsFlag); err != nil {
			return usagef("--depths: %v", err)
		}
	case draft == "oracle":
		depths, _ = parseDepths("1-15")
	default:
		depths = []int{0}
	}
	if draft == "oracle" && !opts.Greedy() {
		return usagef("--draft oracle drafts the greedy continuation: use --temp 0")
	}
	var dr *engine.Draft
	if draft != "oracle" {
		if dr, err = e.LoadDraft(draft); err != nil {
			return err
		}
	}
	for _, d := range depths {
		var tauSum, plainSum, specSum float64
		// One policy for every prompt and repetition, as `dflash serve` keeps one per model pair
		// (a fixed one has no state). An adaptive one first learns over one unmeasured pass: the
		// figure is the steady state a server reaches, not the first request of a cold process
		// (`dflash run`). The draft is loaded once; every run opens and closes its own session.
		var drafter runner.Drafter
		if dr != nil {
			drafter = runner.WithDepth(dr.Drafter, runner.Fixed(d))
			if d == 0 {
				drafter = runner.WithDepth(dr.Drafter, dr.Drafter.Depth().Fresh())
			}
		}
		speculate := func(p, cont []int) (runner.Stats, error) {
			dr := drafter
			if draft == "oracle" {
				dr = &runner.OracleDrafter{Tokens: append(append([]int(nil), p...), cont...), Limit: d, Vocab: e.Target.Config().Vocab}
			}
			return generate(context.Background(), runner.NewSequence(e.Target, capacity), dr, dr.Depth(), runner.Request{
				Prompt: p, Options: opts, MaxTokens: n, Stop: e.Stop,
			}, func(runner.Token) error { return nil })
		}
		if d == 0 && draft != "oracle" {
			for _, p := range prompts {
				if _, err := speculate(p, nil); err != nil {
					return err
				}
			}
		}
		for _, p := range prompts {
			pr, cont, err := plain(p, opts)
			if err != nil {
				return err
			}
			var rates []float64
			var tau float64
			for r := 0; r < reps; r++ {
				st, err := speculate(p, cont)
				if err != nil {
					return err
				}
				rates = append(rates, st.DecodeRate())
				tau = st.Tau()
			}
			tauSum += tau
			plainSum += pr
			specSum += medianF(rates)
		}
		k := float64(len(prompts))
		f := specFigures{Draft: draft, Depth: d, Temperature: opts.Temperature, Tau: tauSum / k, PlainTokS: plainSum / k, SpecTokS: specSum / k, Prompts: len(prompts)}
		f.Speedup = f.SpecTokS / f.PlainTokS
		rep.Speculation = append(rep.Speculation, f)
		logf("depth %2d: tau %.2f, plain %.1f tok/s, speculative %.1f tok/s, speedup %.2fx", d, f.Tau, f.PlainTokS, f.SpecTokS, f.Speedup)
	}
	return nil
}

// plainOnce decodes n tokens greedily after prompt on a fresh sequence and returns the decode
// rate and the continuation.
func plainOnce(e *engine.Engine, prompt []int, n, capacity int) (float64, []int, error) {
	var cont []int
	seq := runner.NewSequence(e.Target, capacity)
	st, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: prompt, MaxTokens: n, Stop: e.Stop},
		func(t runner.Token) error { cont = append(cont, t.ID); return nil })
	if err != nil {
		return 0, nil, err
	}
	return st.DecodeRate(), cont, nil
}

func printBenchTable(w io.Writer, r benchReport) {
	fmt.Fprintf(w, "model %s, kernel %s, %d threads, %.2f GB of weights\n", r.Model, r.Kernel, r.Threads, float64(r.WeightBytes)/1e9)
	if r.ProbeGBs > 0 {
		fmt.Fprintf(w, "memory bandwidth probe      %8.1f GB/s\n", r.ProbeGBs)
	}
	fmt.Fprintf(w, "prefill (%d tokens)        %8.1f tok/s\n", r.PrefillTokens, r.PrefillTokS)
	fmt.Fprintf(w, "decode (%d tokens)          %8.1f tok/s  %.1f GB/s effective", r.DecodeTokens, r.DecodeTokS, r.DecodeGBs)
	if r.ProbeGBs > 0 {
		fmt.Fprintf(w, "  %.0f%% of probe", 100*r.DecodeOfProbe)
	}
	fmt.Fprintln(w)
	for _, v := range r.VerifyCost {
		fmt.Fprintf(w, "verify cost c(%d)/c(1)       %8.2f\n", v.Rows, v.Ratio)
	}
	if len(r.Speculation) > 0 {
		fmt.Fprintf(w, "\n%-8s %6s %6s %12s %12s %8s\n", "draft", "depth", "tau", "plain tok/s", "spec tok/s", "speedup")
		for _, s := range r.Speculation {
			d := strconv.Itoa(s.Depth)
			if s.Depth == 0 {
				d = "auto"
			}
			name := s.Draft
			if len(name) > 8 {
				name = "…" + name[len(name)-7:]
			}
			fmt.Fprintf(w, "%-8s %6s %6.2f %12.1f %12.1f %7.2fx\n", name, d, s.Tau, s.PlainTokS, s.SpecTokS, s.Speedup)
		}
	}
}

// benchPrompts reads prompts from a file (one per line) or makes one of random ids.
func benchPrompts(e *engine.Engine, file string, maxN, fallbackLen int) ([][]int, error) {
	if file == "" {
		rng := rand.New(rand.NewPCG(11, 11))
		p := make([]int, min(fallbackLen, 32))
		for i := range p {
			p[i] = rng.IntN(e.Target.Config().Vocab)
		}
		return [][]int{p}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--prompts: %w", err)
	}
	defer f.Close()
	var out [][]int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(out) < maxN {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ids, err := e.EncodePrompt(line)
		if err != nil {
			return nil, err
		}
		out = append(out, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--prompts %s: %w", file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--prompts %s: no prompts", file)
	}
	return out, nil
}

func parseDepths(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if lo, hi, ok := strings.Cut(part, "-"); ok {
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b > 64 {
				return nil, fmt.Errorf("bad range %q", part)
			}
			for i := a; i <= b; i++ {
				out = append(out, i)
			}
			continue
		}
		v, err := strconv.Atoi(part)
		if err != nil || v < 0 || v > 64 {
			return nil, fmt.Errorf("bad depth %q", part)
		}
		out = append(out, v)
	}
	return out, nil
}

func maxSeq(c model.Config) int {
	if c.MaxSeq > 0 {
		return c.MaxSeq
	}
	return defaultContext
}

func median(reps int, f func() time.Duration) time.Duration {
	ds := make([]time.Duration, reps)
	for i := range ds {
		ds[i] = f()
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[reps/2]
}

func medianF(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
