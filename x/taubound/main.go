// Command taubound measures how many tokens per round an ideal PARALLEL draft could win on a
// target: the ceiling a DFlash-style draft, which proposes every block position from the context
// alone in one forward, works under. The result is written down in
// docs/design/parallel-draft-ceiling.md.
//
// Method. At temperature T > 0 a parallel draft's proposal for block position j cannot depend on
// the token sampled at position j-1: its block is a product distribution Q = q_1 x ... x q_D
// (the runner draws each draft token from its own q_j). For each held-out context c the command
// estimates the "ideal marginal drafter", q_j = the marginal law of the target's token at
// position j after c, from M target continuations of D tokens sampled through the engine's
// sampler (sample.Sampler.Distribution: temperature, top-p; what the engine samples from). The
// estimate is the average of the target's conditional distributions p_j(. | c, y_<j) along the
// continuations, not a histogram of the sampled tokens: unbiased, far less noisy, exact at j = 1.
// Then, on fresh draws, it simulates R speculative rounds per context as the engine verifies
// them: x_j ~ q_j independently, the target's p_j(. | c, x_<j) from one forward over the drafted
// prefix (as verification runs it), accept with min(1, p_j(x_j)/q_j(x_j)), stop at the first
// rejection; tau = accepted + 1. P(first k accepted) is reported Rao-Blackwellised (each round
// contributes the product of its accept probabilities) and by the engine's own coin
// (sample.Sampler.Accept); tau at depth d is 1 + sum_{k<=d} P(first k accepted), so one depth-D
// simulation gives every smaller depth. The same rounds are run with the Gumbel coupling of
// --coupled (sample.Sampler.Race with the same arrival times for draft and target; a draft is
// kept while it equals the target's winner). More product drafters show whether the marginal is
// the right product: the marginal estimated from M/4 continuations (convergence of the
// estimate), the one-hot mode of each marginal (a greedy parallel draft), the marginal raised to
// each --powers value, and the soft-target draft optimum: what a draft distilled on the target's
// temperature-1 probabilities along T-sampled continuations converges to (their average),
// proposed as the runner proposes from a draft's logits (temperature and top-p applied).
//
// Bound. Whatever the verification rule, if the output is distributed as the target's P and the
// drafts as Q, the event "the first k drafts are accepted" implies X_1..k = Y_1..k for a coupling
// of X ~ Q and Y ~ P, so P(first k accepted) <= sum_y min(P(y), Q(y)) over k-token sequences
// (one minus the total variation). The command estimates that overlap for the marginal Q as
// E_{y~P} min(1, Q(y)/P(y)) on B further target continuations: the tau no verification scheme
// (block verification, tree search, any coupling) could exceed with the marginal drafter. It is
// a bound for that Q only. For every product q_1 x q_2 whatever, P(first 2 accepted) <=
// sigma_max(sqrt(p_1(a) p_2(b|a))) (min <= sqrt, and sqrt q_1, sqrt q_2 are unit vectors),
// computed without sampling (one forward per probable first token) and bounded from above by
// the Collatz-Wielandt ratio of power iteration: rigorous, but loose.
//
// Contexts are built as BENCHMARKS.md section 5 builds held-out prompts (the first six words of
// random lines of the validation corpus, lower-cased for stories260K) followed by a random
// number of target-sampled tokens (0..--extra, sampled at the measured temperature), so that
// rounds start at spread positions. With --draft the shipped draft's tau on the same contexts is
// measured through the runner (fixed depths, --draft-n tokens from each context, rejection and
// coupled sampling), for comparison.
//
// Example (the figures in the design note):
//
//	go run ./x/taubound --model defaultmodel/files/target --draft defaultmodel/files/draft \
//	    --contexts 24 --m 1024 --b 256 --r 128 --temps 0.8,1 --top-ps 0.95,1
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "taubound:", err)
		os.Exit(1)
	}
}

func floats(s string) ([]float32, error) {
	var out []float32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
		if err != nil {
			return nil, err
		}
		out = append(out, float32(v))
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func run() error {
	modelPath := flag.String("model", "", "target (a folder or a llama2.c checkpoint)")
	draftPath := flag.String("draft", "", "shipped draft to measure on the same contexts (optional)")
	corpus := flag.String("corpus", "../shared/data/corpora/tinystories_val_800K.txt", "held-out corpus: prompts are the first six words of random lines")
	lower := flag.Bool("lower", false, "lower-case the prompts (stories260K)")
	nCtx := flag.Int("contexts", 32, "held-out contexts")
	extra := flag.Int("extra", 96, "at most this many target-sampled tokens after each prompt (uniform in 0..extra)")
	D := flag.Int("depth", 15, "block depth D")
	M := flag.Int("m", 512, "target continuations behind the marginals")
	B := flag.Int("b", 128, "target continuations for the overlap bound")
	R := flag.Int("r", 128, "simulated rounds per drafter and context")
	chunk := flag.Int("chunk", 256, "branches forked at once while sampling")
	temps := flag.String("temps", "0,0.8,1", "temperatures")
	topPs := flag.String("top-ps", "0.95,1", "top-p values (1: off)")
	seed := flag.Uint64("seed", 1, "seed of the prompts and every draw")
	depthsFlag := flag.String("depths", "4,7,15", "depths tau is reported at")
	powersFlag := flag.String("powers", "1.5,2,3,0.5", "extra product drafters: the marginal raised to these powers, normalised (empty: none)")
	draftN := flag.Int("draft-n", 48, "tokens the shipped draft generates from each context")
	flag.Parse()
	if *modelPath == "" {
		return fmt.Errorf("--model is required")
	}
	tlist, err := floats(*temps)
	if err != nil {
		return fmt.Errorf("--temps: %w", err)
	}
	plist, err := floats(*topPs)
	if err != nil {
		return fmt.Errorf("--top-ps: %w", err)
	}
	depths, err := ints(*depthsFlag)
	if err != nil {
		return fmt.Errorf("--depths: %w", err)
	}
	var powers []float64
	if *powersFlag != "" {
		ps, err := floats(*powersFlag)
		if err != nil {
			return fmt.Errorf("--powers: %w", err)
		}
		for _, p := range ps {
			powers = append(powers, float64(p))
		}
	}
	e, err := engine.Open(engine.Options{Model: *modelPath})
	if err != nil {
		return err
	}
	var drafter runner.Drafter
	if *draftPath != "" {
		d, err := e.LoadDraft(*draftPath)
		if err != nil {
			return err
		}
		drafter = d.Drafter
	}
	prompts, err := heldOut(e, *corpus, *nCtx, *lower, *seed)
	if err != nil {
		return err
	}
	cfgT := e.Target.Config()
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	capacity := min(longest+*extra+*D+*draftN+32, cfgT.MaxSeq)
	fmt.Printf("# taubound %s: %d contexts, D=%d, M=%d, B=%d, R=%d, seed %d; %s\n\n", e.Name, len(prompts), *D, *M, *B, *R, *seed, uptime())
	for _, T := range tlist {
		for _, tp := range plist {
			if T == 0 && tp != plist[0] {
				continue // top-p changes nothing at T = 0
			}
			o := sample.Options{Temperature: T, TopP: tp}
			if err := measure(e, drafter, prompts, o, capacity, *extra, Config{D: *D, M: *M, B: *B, R: *R, Chunk: *chunk, Options: o, Powers: powers}, depths, *draftN, *seed); err != nil {
				return err
			}
		}
	}
	return nil
}

// heldOut picks n prompts as BENCHMARKS.md section 5 does: the first six words of random lines
// of at least six words.
func heldOut(e *engine.Engine, path string, n int, lower bool, seed uint64) ([][]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if w := strings.Fields(sc.Text()); len(w) > 5 {
			lines = append(lines, strings.Join(w[:6], " "))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	var out [][]int
	for i := 0; i < n && len(lines) > 0; i++ {
		l := lines[rng.IntN(len(lines))]
		if lower {
			l = strings.ToLower(l)
		}
		ids, err := e.EncodePrompt(l)
		if err != nil {
			return nil, err
		}
		out = append(out, ids)
	}
	return out, nil
}

func uptime() string {
	b, err := exec.Command("uptime").Output()
	if err != nil {
		return "uptime: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

func measure(e *engine.Engine, drafter runner.Drafter, prompts [][]int, o sample.Options, capacity, extra int, cfg Config, depths []int, draftN int, seed uint64) error {
	t0 := time.Now()
	br := newEngineBranches(e.Target, o, capacity)
	rng := rand.New(rand.NewPCG(seed, 6))
	var results []ContextResult
	var ctxs [][]int
	var ctxLen float64
	for i, p := range prompts {
		// The context: the prompt and a random number of target tokens sampled at o.
		k := rng.IntN(extra + 1)
		ctx := append([]int(nil), p...)
		if k > 0 {
			co := o
			co.Seed = contextSeed(seed^0xc0ffee, i)
			seq := runner.NewSequence(e.Target, capacity)
			_, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: p, Options: co, MaxTokens: k, Stop: e.Stop},
				func(t runner.Token) error { ctx = append(ctx, t.ID); return nil })
			if err != nil {
				return err
			}
		}
		ctxLen += float64(len(ctx))
		ctxs = append(ctxs, ctx)
		if err := br.SetContext(ctx); err != nil {
			return err
		}
		r, err := EstimateContext(br, cfg, e.Target.Config().Vocab, contextSeed(seed, i))
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	el := time.Since(t0)
	topP := "off"
	if o.TopP > 0 && o.TopP < 1 {
		topP = fmt.Sprint(o.TopP)
	}
	fmt.Printf("## T = %g, top-p %s (%d contexts, mean length %.0f; %.1f s; %s)\n\n", o.Temperature, topP, len(results), ctxLen/float64(len(results)), el.Seconds(), uptime())
	hdr := "| estimate |"
	sep := "|---|"
	for _, d := range depths {
		hdr += fmt.Sprintf(" tau d=%d |", d)
		sep += "---|"
	}
	for k := 1; k <= 4 && k <= cfg.D; k++ {
		hdr += fmt.Sprintf(" P(acc>=%d) |", k)
		sep += "---|"
	}
	fmt.Println(hdr)
	fmt.Println(sep)
	row := func(name string, get func(ContextResult) []float64) {
		line := "| " + name + " |"
		for _, d := range depths {
			var xs []float64
			for _, r := range results {
				xs = append(xs, Tau(get(r), d))
			}
			line += " " + summarize(xs).String() + " |"
		}
		for k := 1; k <= 4 && k <= cfg.D; k++ {
			var xs []float64
			for _, r := range results {
				xs = append(xs, get(r)[k-1])
			}
			line += fmt.Sprintf(" %.3f |", summarize(xs).Mean)
		}
		fmt.Println(line)
	}
	for v := 0; v < len(results[0].Reject); v++ {
		v := v
		row("rejection, "+drafterName(cfg, v), func(r ContextResult) []float64 { return r.Reject[v] })
	}
	row("rejection, marginal, engine coin", func(r ContextResult) []float64 { return r.RejectFlip[Marginal] })
	row("coupled, marginal", func(r ContextResult) []float64 { return r.Coupled })
	row("BOUND: overlap of the marginal product", func(r ContextResult) []float64 { return r.Overlap })
	if cfg.D >= 2 {
		var pb, ex, tail []float64
		for _, r := range results {
			pb, ex, tail = append(pb, r.PairBound), append(ex, r.Exact2), append(tail, r.Tail)
		}
		fmt.Printf("\nP(acc>=2), no sampling: marginal drafter under rejection %s; BOUND for ANY product drafter and any verification %s (so tau <= 2 + (d-1) x bound); p_1 mass left out %.4f\n\n",
			summarize(ex), summarize(pb), summarize(tail).Mean)
	}
	if drafter != nil {
		t1 := time.Now()
		for _, coupled := range []bool{false, true} {
			if coupled && o.Greedy() {
				continue
			}
			name := "rejection"
			if coupled {
				name = "coupled"
			}
			line := fmt.Sprintf("| shipped draft, %s, %d tokens from each context |", name, draftN)
			for _, d := range depths {
				var xs []float64
				for i, ctx := range ctxs {
					so := o
					so.Seed = contextSeed(seed^0xd1a, i)
					so.Coupled = coupled
					dr := runner.WithDepth(drafter, runner.Fixed(d))
					s := dr.Open(capacity)
					st, err := runner.Generate(context.Background(), runner.NewSequence(e.Target, capacity),
						runner.Request{Prompt: ctx, Options: so, MaxTokens: draftN, Stop: e.Stop, Session: s, Depth: dr.Depth()},
						func(runner.Token) error { return nil })
					if cerr := s.Close(); cerr != nil && err == nil {
						err = cerr
					}
					if err != nil {
						return err
					}
					if st.Rounds > 0 {
						xs = append(xs, st.Tau())
					}
				}
				line += " " + summarize(xs).String() + " |"
			}
			fmt.Println(line)
		}
		fmt.Printf("\n(shipped draft: %.1f s)\n", time.Since(t1).Seconds())
	}
	fmt.Println()
	return nil
}
