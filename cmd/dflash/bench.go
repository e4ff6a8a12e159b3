package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// benchReport is what `dflash bench` measures, printed as a table or (--json) one object.
// Every ratio in it comes from figures measured in the same run.
type benchReport struct {
	Model   string `json:"model"`
	Kernel  string `json:"kernel"`
	AMX     string `json:"amx"` // kernel.AMXStatus: whether the amx path runs here, or why not
	Threads int    `json:"threads"`
	// Quantization labels the stored weights ("Q4_K_M", "BF16"); Compute is the dtype most
	// weight elements are kept and multiplied in ("Q4_K", "bf16").
	Quantization  string        `json:"quantization,omitempty"`
	Compute       string        `json:"compute"`
	KVCache       string        `json:"kv_cache"` // element type of the target's key/value cache
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
	// Recurrent is set for a hybrid target: what one sequence holds beyond its K/V cache.
	Recurrent *recurrentMemory `json:"recurrent_memory,omitempty"`
	// Pool counts the run's split products and those run on one thread after a stall (a worker
	// thread descheduled: another process took a core), so a reader can tell a figure measured
	// on a busy machine (kernel.PoolCounts).
	Pool poolFigures `json:"thread_pool"`
}

// poolFigures is kernel.PoolCounts over one bench run.
type poolFigures struct {
	Split   int64 `json:"split"`
	Unsplit int64 `json:"unsplit_after_stall"`
	Stalls  int64 `json:"stalls"`
}

// recurrentMemory is a hybrid target's per-sequence state memory, measured on the bench's cache:
// the live recurrent state, the snapshot slots a verify of depth Depth needs (cache.Hybrid) and
// the default prompt checkpoints (runner.DefaultCheckpoints), in bytes.
type recurrentMemory struct {
	StateBytes      int64 `json:"state_bytes"`
	Depth           int   `json:"snapshot_depth"`
	SnapshotBytes   int64 `json:"snapshot_bytes"`
	Checkpoints     int   `json:"checkpoints"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
}

// verifyCost is c(n)/c(1): the time of one target forward over n rows (a verification of n-1
// drafts) divided by that of a one-row decode step at the same offset.
type verifyCost struct {
	Rows  int     `json:"rows"`
	Ratio float64 `json:"ratio"`
	Ms    float64 `json:"ms"` // the n-row forward's median time: a ratio alone hides a faster c(1)
}

type specFigures struct {
	Draft       string  `json:"draft"`
	Depth       int     `json:"depth"` // 0: the draft's own policy (adaptive for DFlash)
	Temperature float32 `json:"temperature"`
	Coupled     bool    `json:"coupled,omitempty"` // --coupled: both runs sample by the coupled race
	Tau         float64 `json:"tau"`
	PlainTokS   float64 `json:"plain_tok_s"`
	SpecTokS    float64 `json:"spec_tok_s"`
	Speedup     float64 `json:"speedup"`
	Prompts     int     `json:"prompts"`
	// Simulation, when set, says the figure is a simulation and of what: proposals replaced by
	// the target's continuation cut at lengths drawn from a histogram (--acceptance).
	Simulation string `json:"simulation,omitempty"`
	// Where a round's time goes, over every measured speculative run at this depth: what makes
	// the speedup fall short of tau. A plain step costs 1000/PlainTokS ms.
	DraftMsPerRound  float64 `json:"draft_ms_per_round"`
	VerifyMsPerRound float64 `json:"verify_ms_per_round"`
}

func cmdBench(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	var mf modelFlags
	mf.register(fs)
	var sf sampleFlags
	sf.register(fs)
	draft := fs.String("draft", "", "DFlash draft (a folder, a draft GGUF from dflash convert, or a Hugging Face id), 'oracle' (drafts the target's greedy continuation; ceiling of the engine), or synthetic:NAME (random weights of a published draft's shape: "+strings.Join(dflash.SyntheticNames(), ", ")+"; synthetic: alone fits a --synthetic target)")
	acceptance := fs.String("acceptance", "", "simulate a trained draft: every round runs the draft at full cost, then proposes the target's greedy continuation cut at an acceptance drawn from this histogram (JSON or text: counts of rounds accepting 0, 1, ... drafts); temperature 0 only")
	acceptanceOut := fs.String("acceptance-out", "", "write the measured acceptance histogram of the speculative runs (one depth) to this file, in the form --acceptance reads")
	depthsFlag := fs.String("depths", "", "draft depths to measure, e.g. 1-15 or 2,4,8; 0 is the draft's own policy (DFlash: adaptive, one depth controller kept across all prompts after one unmeasured pass, as a server keeps one; DFlash2: fixed 7; the oracle: adaptive up to 15, without the unmeasured pass) (default: oracle 1-15, a draft: 0)")
	promptsFile := fs.String("prompts", "", "file of prompts, one per line (default: random token ids)")
	maxPrompts := fs.Int("max-prompts", 8, "prompts to use from --prompts")
	n := fs.Int("n", 128, "tokens to decode per measurement")
	prefill := fs.Int("prefill", 512, "prompt length for the prefill measurement")
	reps := fs.Int("reps", 3, "repetitions; medians are reported")
	probe := fs.Bool("probe", true, "measure the memory bandwidth ceiling in the same run")
	asJSON := fs.Bool("json", false, "print one JSON object")
	verifyFlag := fs.String("verify", "2,4,8,16", "row counts n at which to measure the verify cost c(n)/c(1) (empty: skip)")
	traceFile := fs.String("trace", "", "write one JSON line per speculative decode round to this file (see dflash run --trace), each labelled with its depth, prompt and repetition")
	decodeAt := fs.Int("decode-at", 0, "prompt length of the decode measurement against the probe (0: the first prompt, 32 random tokens without --prompts); decoding at a long context also reads the key/value cache, which the effective GB/s does not count")
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
	if *decodeAt < 0 || *decodeAt+*n+1 > maxSeq(cfg) {
		return usagef("--decode-at %d with -n %d does not fit the model's context of %d", *decodeAt, *n, maxSeq(cfg))
	}
	capacity := min(max(*prefill, 64, *decodeAt)+*n+64, maxSeq(cfg))
	if *prefill+1 > capacity {
		return usagef("--prefill %d does not fit the model's context of %d", *prefill, maxSeq(cfg))
	}
	rep := benchReport{Model: e.Name, Kernel: kernel.Path(), AMX: kernel.AMXStatus(), Threads: runtime.GOMAXPROCS(0), WeightBytes: e.Target.WeightBytes(),
		Quantization: e.Desc.DType, Compute: cfg.DType.String(), KVCache: nn.CacheElem(e.Target.NewCache(1))}
	split0, unsplit0, stalls0 := kernel.PoolCounts()
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
	if h, ok := c.(*cache.Hybrid); ok {
		// Depth 15: z-lab's drafts' block of 16. The slots are allocated here to be counted,
		// then dropped (the verify cost below enables what it needs).
		const depth = 15
		h.EnableSnapshots(depth + 1)
		cps := runner.DefaultCheckpoints.Max
		rep.Recurrent = &recurrentMemory{StateBytes: h.StateBytes(), Depth: depth, SnapshotBytes: h.SnapshotBytes(),
			Checkpoints: cps, CheckpointBytes: int64(cps) * h.StateBytes()}
		h.EnableSnapshots(0)
		r := rep.Recurrent
		logf("recurrent memory per sequence: state %.1f MiB, snapshot slots for depth %d %.1f MiB, %d checkpoints %.1f MiB (beyond the K/V cache)",
			mib(r.StateBytes), depth, mib(r.SnapshotBytes), cps, mib(r.CheckpointBytes))
	}
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
	decodePrompt := prompts[0]
	if *decodeAt > 0 {
		decodePrompt = make([]int, *decodeAt)
		for i := range decodePrompt {
			decodePrompt[i] = rng.IntN(cfg.Vocab)
		}
	}
	var rates, probes, ratios []float64
	for r := 0; r < *reps; r++ {
		var pr float64
		if *probe {
			pr = kernel.ProbeBandwidth(1<<30, 500*time.Millisecond)
		}
		rate, _, err := plainOnce(e, decodePrompt, *n, capacity)
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
		// A cache that cannot rewind (a hybrid target's) records the per-row states a verify
		// keeps, so its cost includes the snapshot copies; it returns to base by prefilling again.
		settle := func() error {
			if cache.CanRewind(c) && c.Offset() >= base {
				return c.Rewind(base)
			}
			if err := c.Rewind(0); err != nil {
				return err
			}
			if base > 0 {
				if _, err := e.Target.Forward(c, model.Request{Tokens: toks[:base], Logits: model.LogitsNone}); err != nil {
					return err
				}
			}
			return nil
		}
		if s, ok := c.(cache.RowSnapshots); ok {
			s.EnableSnapshots(most)
		}
		_ = c.Rewind(0)
		if err := settle(); err != nil {
			return err
		}
		cost := func(rows int) time.Duration {
			return median(max(*reps, 5), func() time.Duration {
				t0 := time.Now()
				if _, err := e.Target.Forward(c, model.Request{Tokens: toks[base : base+rows], Logits: model.LogitsAll}); err != nil {
					panic(err)
				}
				d := time.Since(t0)
				if err := settle(); err != nil {
					panic(err)
				}
				return d
			})
		}
		one := cost(1)
		for _, k := range counts {
			ck := cost(k)
			r := float64(ck) / float64(one)
			rep.VerifyCost = append(rep.VerifyCost, verifyCost{Rows: k, Ratio: r, Ms: ck.Seconds() * 1e3})
			logf("verify cost c(%d)/c(1): %.2f (%.1f ms, c(1) %.1f ms, at %d committed rows)", k, r, ck.Seconds()*1e3, one.Seconds()*1e3, base)
		}
	}

	if (*acceptance != "" || *acceptanceOut != "") && *draft == "" {
		return usagef("--acceptance and --acceptance-out need --draft")
	}
	if *draft != "" {
		var trace *runner.TraceWriter
		if *traceFile != "" {
			f, err := os.Create(*traceFile)
			if err != nil {
				return fmt.Errorf("bench: --trace: %w", err)
			}
			w := bufio.NewWriter(f)
			trace = runner.NewTraceWriter(w)
			defer func() {
				if err := errors.Join(trace.Err(), w.Flush(), f.Close()); err != nil {
					fmt.Fprintf(stderr, "warning: --trace %s: %v\n", *traceFile, err)
				}
			}()
		}
		sim := simulation{out: *acceptanceOut, synthetic: mf.synthetic}
		if *acceptance != "" {
			data, err := os.ReadFile(*acceptance)
			if err != nil {
				return fmt.Errorf("--acceptance: %w", err)
			}
			if sim.accept, err = runner.ParseAcceptance(data); err != nil {
				return fmt.Errorf("--acceptance %s: %w", *acceptance, err)
			}
			sim.file = *acceptance
		}
		if err := benchSpeculation(e, &rep, *draft, *depthsFlag, prompts, opts, *n, *reps, capacity, plain, logf, trace, sim); err != nil {
			return err
		}
	}
	split1, unsplit1, stalls1 := kernel.PoolCounts()
	rep.Pool = poolFigures{Split: split1 - split0, Unsplit: unsplit1 - unsplit0, Stalls: stalls1 - stalls0}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchTable(stdout, rep)
	return nil
}

// simulation is what --acceptance and --acceptance-out ask of the speculative measurement.
type simulation struct {
	accept    *runner.Acceptance // nil: real proposals
	file      string             // where accept came from
	out       string             // --acceptance-out
	synthetic string             // the --synthetic target's name, which "synthetic:" alone means
}

// loadBenchDraft opens a draft folder or builds a synthetic one ("synthetic:NAME").
func loadBenchDraft(e *engine.Engine, draft, targetName string, logf func(string, ...any)) (runner.Drafter, error) {
	name, ok := strings.CutPrefix(draft, "synthetic:")
	if !ok {
		dr, err := e.LoadDraft(draft)
		if err != nil {
			return nil, err
		}
		return dr.Drafter, nil
	}
	if name == "" {
		if targetName == "" {
			return nil, usagef("--draft synthetic: needs a name (%s) unless the target is --synthetic", strings.Join(dflash.SyntheticNames(), ", "))
		}
		name = targetName
	}
	t0 := time.Now()
	d, err := dflash.Synthetic(name, e.Target, 2)
	if err != nil {
		return nil, err
	}
	c := d.Config()
	logf("synthetic draft %s (random bf16 weights): %d layers, hidden %d, %d heads / %d KV heads of %d, intermediate %d, block %d, taps %v, %.2f GB; built in %v",
		name, c.Layers, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, c.Intermediate, c.BlockSize, c.TargetLayers, float64(d.WeightBytes())/1e9, time.Since(t0).Round(time.Millisecond))
	return runner.NewBlockDrafter(d), nil
}

func benchSpeculation(e *engine.Engine, rep *benchReport, draft, depthsFlag string, prompts [][]int, opts sample.Options, n, reps, capacity int,
	plain func([]int, sample.Options) (float64, []int, error), logf func(string, ...any), trace *runner.TraceWriter, sim simulation) error {
	var depths []int
	var err error
	switch {
	case depthsFlag != "":
		if depths, err = parseDepths(depthsFlag); err != nil {
			return usagef("--depths: %v", err)
		}
	case draft == "oracle":
		depths, _ = parseDepths("1-15")
	case sim.accept == nil:
		depths = []int{0}
	}
	if draft == "oracle" && !opts.Greedy() {
		return usagef("--draft oracle drafts the greedy continuation: use --temp 0")
	}
	if sim.accept != nil && (draft == "oracle" || !opts.Greedy()) {
		return usagef("--acceptance simulates a draft at temperature 0: give a draft (not oracle) and --temp 0")
	}
	var base runner.Drafter
	if draft != "oracle" {
		if base, err = loadBenchDraft(e, draft, sim.synthetic, logf); err != nil {
			return err
		}
	}
	if name, ok := strings.CutPrefix(draft, "synthetic:"); ok && name == "" {
		draft += sim.synthetic // the figures name the draft that was built
	}
	if sim.accept != nil {
		logf("SIMULATION: every round runs the draft at full cost, then proposes the target's own continuation cut at an acceptance drawn from %s (histogram tau %.2f)", sim.file, sim.accept.Tau())
		if depths == nil {
			// The histogram was measured on full blocks: draft B-1 by default.
			s := base.Open(capacity)
			depths = []int{s.Limit()}
			if err := s.Close(); err != nil {
				return err
			}
		}
	}
	if sim.out != "" && len(depths) != 1 {
		return usagef("--acceptance-out records one depth's histogram: give one --depths")
	}
	var measured runner.Stats
	for _, d := range depths {
		var tauSum, plainSum, specSum float64
		var atDepth runner.Stats
		// One policy for every prompt and repetition, as `dflash serve` keeps one per model pair
		// (a fixed one has no state). An adaptive one first learns over one unmeasured pass: the
		// figure is the steady state a server reaches, not the first request of a cold process
		// (`dflash run`). The draft is loaded once; every run opens and closes its own session.
		var drafter runner.Drafter
		oracleAuto := runner.Adaptive(nil)
		if base != nil {
			drafter = runner.WithDepth(base, runner.Fixed(d))
			if d == 0 {
				drafter = runner.WithDepth(base, base.Depth().Fresh())
			}
		}
		speculate := func(p, cont []int) (runner.Stats, error) {
			dr := drafter
			known := append(append([]int(nil), p...), cont...)
			switch {
			case draft == "oracle":
				o := &runner.OracleDrafter{Tokens: known, Limit: d, Vocab: e.Target.Config().Vocab}
				dr = o
				if d == 0 {
					// Depth 0 is the depth controller up to 15 (one kept across prompts, like a
					// draft's), to set auto against the oracle's fixed depths.
					o.Limit = 15
					dr = runner.WithDepth(o, oracleAuto)
				}
			case sim.accept != nil:
				dr = &runner.SimulatedDrafter{Inner: drafter, Tokens: known, Accept: sim.accept, Vocab: e.Target.Config().Vocab, Seed: 5}
			}
			req := runner.Request{Prompt: p, Options: opts, MaxTokens: n, Stop: e.Stop}
			if trace != nil {
				req.Trace = trace.Round
			}
			return generate(context.Background(), runner.NewSequence(e.Target, capacity), dr, dr.Depth(), req, func(runner.Token) error { return nil })
		}
		if d == 0 && draft != "oracle" {
			for i, p := range prompts {
				if trace != nil {
					trace.Run = fmt.Sprintf("depth %d prompt %d warm-up", d, i)
				}
				var cont []int
				if sim.accept != nil {
					// The warm-up pass needs the continuation the simulation proposes from.
					if _, cont, err = plainOnce(e, p, n, capacity); err != nil {
						return err
					}
				}
				if _, err := speculate(p, cont); err != nil {
					return err
				}
			}
		}
		for i, p := range prompts {
			pr, cont, err := plain(p, opts)
			if err != nil {
				return err
			}
			var rates []float64
			var tau float64
			for r := 0; r < reps; r++ {
				if trace != nil {
					trace.Run = fmt.Sprintf("depth %d prompt %d rep %d", d, i, r)
				}
				st, err := speculate(p, cont)
				if err != nil {
					return err
				}
				rates = append(rates, st.DecodeRate())
				tau = st.Tau()
				measured.Add(st)
				atDepth.Add(st)
			}
			tauSum += tau
			plainSum += pr
			specSum += medianF(rates)
		}
		k := float64(len(prompts))
		f := specFigures{Draft: draft, Depth: d, Temperature: opts.Temperature, Coupled: opts.Race(), Tau: tauSum / k, PlainTokS: plainSum / k, SpecTokS: specSum / k, Prompts: len(prompts)}
		f.Speedup = f.SpecTokS / f.PlainTokS
		if atDepth.Rounds > 0 {
			f.DraftMsPerRound = atDepth.DraftTime.Seconds() * 1000 / float64(atDepth.Rounds)
			f.VerifyMsPerRound = atDepth.VerifyTime.Seconds() * 1000 / float64(atDepth.Rounds)
		}
		what := ""
		if sim.accept != nil {
			f.Simulation = fmt.Sprintf("acceptance drawn from %s (histogram tau %.2f)", sim.file, sim.accept.Tau())
			what = " (SIMULATION)"
		}
		rep.Speculation = append(rep.Speculation, f)
		logf("depth %2d: tau %.2f, plain %.1f tok/s, speculative %.1f tok/s, speedup %.2fx%s; per round: draft %.1f ms, verify %.1f ms (a plain step: %.1f ms)",
			d, f.Tau, f.PlainTokS, f.SpecTokS, f.Speedup, what, f.DraftMsPerRound, f.VerifyMsPerRound, 1000/f.PlainTokS)
	}
	if sim.out != "" {
		if err := writeAcceptance(sim.out, draft, depths[0], opts.Temperature, measured); err != nil {
			return err
		}
		logf("acceptance histogram of %d rounds written to %s", measured.Rounds, sim.out)
	}
	return nil
}

// writeAcceptance writes a run's histogram of accepted drafts per round in the JSON form that
// --acceptance reads, with where it came from.
func writeAcceptance(path, draft string, depth int, temp float32, st runner.Stats) error {
	obj := struct {
		Note   string  `json:"note"`
		Tau    float64 `json:"tau"`
		Counts []int   `json:"counts"`
	}{
		Note:   fmt.Sprintf("measured by dflash bench: draft %s, depth %d, temperature %g; counts[k] = rounds that accepted exactly k drafts", draft, depth, temp),
		Tau:    st.Tau(),
		Counts: runner.AcceptanceOf(st),
	}
	data, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("--acceptance-out: %w", err)
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
	fmt.Fprintf(w, "model %s (%s, computed in %s, %s key/value cache), kernel %s, %d threads, %.2f GB of weights\n", r.Model, r.Quantization, r.Compute, r.KVCache, r.Kernel, r.Threads, float64(r.WeightBytes)/1e9)
	if r.AMX != "" {
		fmt.Fprintf(w, "AMX: %s\n", r.AMX)
	}
	if p := r.Pool; p.Split+p.Unsplit > 0 {
		fmt.Fprintf(w, "thread pool: %d products split, %d on one thread after %d stalls", p.Split, p.Unsplit, p.Stalls)
		if p.Unsplit > p.Split/20 {
			fmt.Fprint(w, " (a core was often taken by another process: figures are low)")
		}
		fmt.Fprintln(w)
	}
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
		fmt.Fprintf(w, "verify cost c(%d)/c(1)       %8.2f  %.1f ms\n", v.Rows, v.Ratio, v.Ms)
	}
	for _, s := range r.Speculation {
		if s.Simulation != "" {
			fmt.Fprintf(w, "\nSIMULATION: the draft runs at full cost every round; its proposals are replaced by the\ntarget's continuation, %s\n", s.Simulation)
			break
		}
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

// mib is bytes in MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }
