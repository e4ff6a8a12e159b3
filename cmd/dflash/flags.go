package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/sample"
)

// cliStderr is standard error as a command sees it. It records that the flag package refused the
// arguments, which it has already reported, so cli exits 2 without saying it again.
type cliStderr struct {
	io.Writer
	flagError bool
}

// lastWrite passes writes on and keeps the last one: the flag package writes its error message
// in one write just before it calls Usage, which thus learns what went wrong.
type lastWrite struct {
	w    io.Writer
	last string
}

func (l *lastWrite) Write(p []byte) (int, error) {
	l.last = string(p)
	return l.w.Write(p)
}

// newFlags returns a command's flag set. Asked for help (-h) it lists every flag; given a flag it
// does not define it suggests the closest defined one instead of the whole list.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dflash "+name, flag.ContinueOnError)
	out := &lastWrite{w: stderr}
	fs.SetOutput(out)
	fs.Usage = func() {
		failure := strings.TrimSpace(out.last)
		defer func() { out.last = "" }()
		if failure == "" {
			fmt.Fprintf(stderr, "usage of dflash %s:\n", name)
			fs.PrintDefaults()
			return
		}
		if se, ok := stderr.(*cliStderr); ok {
			se.flagError = true
		}
		if bad, ok := strings.CutPrefix(failure, "flag provided but not defined: -"); ok {
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			if s, ok := closest(bad, names); ok {
				fmt.Fprintf(stderr, "Did you mean --%s?\n", s)
			}
		}
		fmt.Fprintf(stderr, "Run 'dflash %s -h' for its flags.\n", name)
	}
	return fs
}

// closest returns the candidate nearest to word by edit distance (a transposition counting as one
// edit, the commonest typo), if any is near enough to be what was meant: within one edit for
// short words, two for words of five letters or more, or a word that one of them begins (a
// truncated or extended name like "temperature" for "temp"). Ties go to the earlier candidate.
func closest(word string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(word, c)
		if len(word) >= 3 && len(c) >= 3 && (strings.HasPrefix(c, word) || strings.HasPrefix(word, c)) {
			d = min(d, 1)
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := 1
	if len(word) >= 5 {
		limit = 2
	}
	return best, bestD >= 0 && bestD <= limit
}

// editDistance is the optimal-string-alignment distance between a and b (bytes): insertions,
// deletions, substitutions and transpositions of adjacent bytes, each costing one.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// modelFlags are the flags that say which model to open and how.
type modelFlags struct {
	model, synthetic, tokenizer, dtype, kernel string
	kvCache                                    string // --kv-cache: auto, f32 or bf16
	seed                                       uint64
	threads                                    int
	stderr                                     io.Writer // the flag set's output: where progress goes
}

// kvCacheUsage is the --kv-cache flag's help, shared by the commands that open targets.
const kvCacheUsage = "element type of the target's key/value cache: auto (bf16 for bf16 and quantized weights, f32 for f32 ones), f32 or bf16 (heads of 64 or fewer elements always cache f32)"

// setKVCache applies a --kv-cache value to the caches made from now on.
func setKVCache(s string) error {
	k, err := nn.ParseCacheKind(s)
	if err != nil {
		return usagef("--kv-cache: %v", err)
	}
	nn.SetCacheKind(k)
	return nil
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	m.stderr = fs.Output()
	fs.StringVar(&m.model, "model", "", "model: a Hugging Face folder, a llama2.c checkpoint file, an ollama name (qwen3:0.6b) or a Hugging Face id (Qwen/Qwen3-0.6B[@revision], see dflash pull)")
	fs.StringVar(&m.synthetic, "synthetic", "", "random bf16 weights of a real shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3.5-0.8b or qwen3.5-4b")
	fs.StringVar(&m.tokenizer, "tokenizer", "", "tokenizer file or folder (default: found with the model)")
	fs.StringVar(&m.dtype, "dtype", "", "weight dtype for the kernels: f32 or bf16 (default: as stored)")
	fs.StringVar(&m.kernel, "kernel", "", "kernel path: "+strings.Join(kernel.Paths(), ", ")+" (default: fastest; env DFLASH_KERNEL)")
	fs.StringVar(&m.kvCache, "kv-cache", "auto", kvCacheUsage)
	fs.Uint64Var(&m.seed, "weights-seed", 1, "seed of synthetic weights")
	fs.IntVar(&m.threads, "threads", 0, "threads one matrix product or multi-row forward may use (default: all cores)")
}

func (m *modelFlags) open() (*engine.Engine, error) {
	if m.kernel != "" {
		if err := kernel.SetPath(m.kernel); err != nil {
			return nil, usagef("--kernel: %v", err)
		}
	}
	if m.kvCache != "" { // a modelFlags built in code (perplexity's base) leaves the kind as set
		if err := setKVCache(m.kvCache); err != nil {
			return nil, err
		}
	}
	if m.threads < 0 {
		return nil, usagef("--threads %d: must be >= 0", m.threads)
	}
	if m.threads > 0 {
		kernel.SetMaxThreads(m.threads)
	}
	if (m.model == "") == (m.synthetic == "") {
		return nil, usagef("give exactly one of --model PATH or --synthetic NAME")
	}
	o := engine.Options{Model: m.model, Synthetic: m.synthetic, Tokenizer: m.tokenizer, Seed: m.seed}
	switch m.dtype {
	case "":
	case "f32":
		o.Compute = transformer.ForceF32
	case "bf16":
		o.Compute = transformer.ForceBF16
	default:
		return nil, usagef("--dtype %q: want f32 or bf16", m.dtype)
	}
	if tty := terminalStderr(m.stderr); tty != nil {
		what := "loading " + m.model
		if m.synthetic != "" {
			what = "building random " + m.synthetic + " weights"
		}
		defer startProgress(tty, what, progressDelay, 100*time.Millisecond)()
	}
	return engine.Open(o)
}

// sampleFlags are the sampling options of a request.
type sampleFlags struct {
	o sample.Options
}

func (s *sampleFlags) register(fs *flag.FlagSet) {
	fs.Var((*f32Value)(&s.o.Temperature), "temp", "temperature; 0 decodes greedily")
	fs.IntVar(&s.o.TopK, "top-k", 0, "keep the k most probable tokens (0: off)")
	fs.Var((*f32Value)(&s.o.TopP), "top-p", "nucleus sampling mass (0 or 1: off)")
	fs.Var((*f32Value)(&s.o.MinP), "min-p", "drop tokens below min-p times the top probability (0: off)")
	fs.Var((*f32Value)(&s.o.RepeatPenalty), "repeat-penalty", "penalty for tokens in the recent window (1: off)")
	fs.Var((*f32Value)(&s.o.PresencePenalty), "presence-penalty", "subtracted once from tokens in the window")
	fs.Var((*f32Value)(&s.o.FrequencyPenalty), "frequency-penalty", "subtracted per occurrence in the window")
	fs.IntVar(&s.o.PenaltyWindow, "repeat-last-n", 0, "penalty window in tokens (0: 64, -1: all)")
	fs.Uint64Var(&s.o.Seed, "seed", 0, "sampling seed (the same seed reproduces the same output)")
	fs.BoolVar(&s.o.Coupled, "coupled", false, "coupled sampling: the same seed gives the same tokens with and without a draft, at any depth (Gumbel-max race; same distribution, slightly lower acceptance than rejection sampling)")
}

func (s *sampleFlags) options() (sample.Options, error) {
	if err := s.o.Validate(); err != nil {
		return s.o, usagef("%v", err)
	}
	return s.o, nil
}

type f32Value float32

func (f *f32Value) String() string { return strconv.FormatFloat(float64(*f), 'g', -1, 32) }
func (f *f32Value) Set(s string) error {
	v, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return fmt.Errorf("not a number: %q", s)
	}
	*f = f32Value(v)
	return nil
}

// parseIDs reads "1,2,3" (spaces allowed) into token ids, each checked against the vocabulary.
func parseIDs(s string, vocab int) ([]int, error) {
	var ids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token id %q is not an integer", f)
		}
		if v < 0 || v >= vocab {
			return nil, fmt.Errorf("token id %d outside the vocabulary [0, %d)", v, vocab)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no token ids in %q", s)
	}
	return ids, nil
}

func joinIDs(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	return b.String()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// applyModelDefaults takes the model's default options (an ollama manifest's params layer, by
// ollama's option names) for every sampling flag, --stop and --ctx the command line left unset:
// the command line overrides the model, the model the flags' defaults. A default of the wrong type
// or out of range is refused naming the params layer.
func applyModelDefaults(fs *flag.FlagSet, o *sample.Options, stops *stringsFlag, ctxLen *int, params map[string]any) error {
	if len(params) == 0 {
		return nil
	}
	bad := func(key string, v any) error {
		return fmt.Errorf("the model's params layer: %s = %v: wrong type", key, v)
	}
	num := func(key, flagName string, dst *float32) error {
		v, ok := params[key]
		if !ok || flagSet(fs, flagName) {
			return nil
		}
		f, ok := v.(float64)
		if !ok {
			return bad(key, v)
		}
		*dst = float32(f)
		return nil
	}
	integer := func(key, flagName string, dst *int) error {
		v, ok := params[key]
		if !ok || flagSet(fs, flagName) {
			return nil
		}
		f, ok := v.(float64)
		if !ok || f != float64(int(f)) {
			return bad(key, v)
		}
		*dst = int(f)
		return nil
	}
	window := -2 // unset
	for _, err := range []error{
		num("temperature", "temp", &o.Temperature),
		integer("top_k", "top-k", &o.TopK),
		num("top_p", "top-p", &o.TopP),
		num("min_p", "min-p", &o.MinP),
		num("repeat_penalty", "repeat-penalty", &o.RepeatPenalty),
		num("presence_penalty", "presence-penalty", &o.PresencePenalty),
		num("frequency_penalty", "frequency-penalty", &o.FrequencyPenalty),
		integer("repeat_last_n", "repeat-last-n", &window),
		integer("num_ctx", "ctx", ctxLen),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case window == 0:
		// ollama's repeat_last_n 0 is a window of no tokens: every penalty off.
		o.RepeatPenalty, o.PresencePenalty, o.FrequencyPenalty = 1, 0, 0
	case window != -2:
		o.PenaltyWindow = window
	}
	if v, ok := params["seed"]; ok && !flagSet(fs, "seed") {
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return bad("seed", v)
		}
		o.Seed = uint64(int64(f))
	}
	if v, ok := params["stop"]; ok && len(*stops) == 0 {
		list, ok := v.([]any)
		if !ok {
			return bad("stop", v)
		}
		for _, s := range list {
			str, ok := s.(string)
			if !ok {
				return bad("stop", v)
			}
			if str != "" {
				*stops = append(*stops, str)
			}
		}
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("the model's params layer: %w", err)
	}
	return nil
}
