package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/tokenizer"
)

// Sequence is one training sequence: token ids from position 0 and the first position whose
// token may serve as an anchor (the first generated token for target data, 1 for raw text).
type Sequence struct {
	Tokens []int `json:"tokens"`
	Start  int   `json:"start"`
	// Temp is the temperature the continuation was sampled at (0: the target's greedy tokens).
	Temp float64 `json:"temp,omitempty"`
	// SoftIDs and SoftP are the soft targets (Data.SoftTopK = K of them per position): for every
	// position j in [Start, len(Tokens)), entries (j-Start)*K .. (j-Start+1)*K-1 are the target's
	// K most probable tokens at j given Tokens[:j] and their probabilities at temperature 1,
	// descending (soft.go says why temperature 1). They are not renormalised, so their sum says
	// how much of the distribution the K candidates hold. Memory: 8*K bytes per generated token
	// (64 bytes at K = 8, 12.8 KB for a 200-token continuation, 38 MB for 3,000 of them); the
	// JSON cache takes about twice that (26.5 MB for 1,000 such continuations of stories260K).
	SoftIDs []int32   `json:"soft_ids,omitempty"`
	SoftP   []float32 `json:"soft_p,omitempty"`
}

// Data is a set of training sequences with a description of where they came from.
type Data struct {
	Source string `json:"source"` // e.g. "target greedy continuations of prompts.txt"
	// Recipe is how target data was made (nil for raw text and for caches written before it was
	// recorded); a cache is reused only for the same recipe.
	Recipe    *Recipe    `json:"recipe,omitempty"`
	SoftTopK  int        `json:"soft_top_k,omitempty"` // soft targets per position (0: none)
	Sequences []Sequence `json:"sequences"`
}

// Tokens is the number of tokens over all sequences.
func (d *Data) Tokens() int {
	n := 0
	for _, s := range d.Sequences {
		n += len(s.Tokens)
	}
	return n
}

// DataOptions says how prompts are drawn from a text file.
type DataOptions struct {
	N         int // sequences to produce
	Length    int // generated tokens per sequence (target data) or tokens per chunk (raw text)
	PromptMin int // prompt length range in tokens, BOS excluded (default 4..24)
	PromptMax int
	Lower     bool   // lower-case the text first (stories260K was trained on lower-cased text)
	Seed      uint64 // which lines become prompts, and the seeds of sampled continuations
	// Temps are the temperatures of the target's continuations: sequence i is sampled at
	// Temps[i % len(Temps)], so a list splits the sequences evenly across temperatures (empty or
	// 0: greedy). Drafts meet sampled text at inference; trained on greedy text only, they
	// never see the contexts a sampled request reaches.
	Temps []float64
	TopP  float64 // nucleus of the sampled continuations (0 or 1: off)
	// SoftTopK is how many of the target's next-token candidates are kept per position as soft
	// targets (0: none).
	SoftTopK int
	// Regenerate makes GenerateTargetData rebuild a cache file made with another recipe instead
	// of refusing it.
	Regenerate bool
	Progress   io.Writer
}

func (o *DataOptions) defaults() {
	if o.N <= 0 {
		o.N = 1000
	}
	if o.Length <= 0 {
		o.Length = 128
	}
	if o.PromptMin <= 0 {
		o.PromptMin = 4
	}
	if o.PromptMax < o.PromptMin {
		o.PromptMax = max(o.PromptMin, 24)
	}
}

// readLines returns the non-empty lines of a text file (TinyStories: paragraphs).
func readLines(path string, lower bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read prompts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		if lower {
			s = strings.ToLower(s)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read prompts %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read prompts %s: no text", path)
	}
	return out, nil
}

// Prompts draws o.N prompts from the lines of a text file: a random line's first k tokens, k in
// [PromptMin, PromptMax], preceded by BOS when the tokenizer adds one.
func Prompts(tok tokenizer.Tokenizer, path string, o DataOptions) ([][]int, error) {
	o.defaults()
	lines, err := readLines(path, o.Lower)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x70726f6d707473))
	out := make([][]int, 0, o.N)
	for tries := 0; len(out) < o.N && tries < 20*o.N; tries++ {
		ids := tok.Encode(lines[rng.IntN(len(lines))])
		k := o.PromptMin + rng.IntN(o.PromptMax-o.PromptMin+1)
		if len(ids) < k {
			continue
		}
		p := make([]int, 0, k+1)
		if tok.AddBOS() && tok.BOS() >= 0 {
			p = append(p, tok.BOS())
		}
		out = append(out, append(p, ids[:k]...))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("prompts from %s: no line has %d tokens", path, o.PromptMin)
	}
	return out, nil
}

// Greedy returns prompt followed by up to n greedy target tokens, stopping after an end token
// (which is kept: the draft should learn to predict it). c is rewound to 0 and reused; it must
// hold len(prompt)+n rows.
func Greedy(t model.Target, c cache.Cache, prompt []int, n int) ([]int, error) {
	seq, err := continuation(t, c, prompt, n, nil, 0)
	return seq.Tokens, err
}

// continuation is Greedy with a sampler (nil: greedy) and soft targets: the K most probable
// next tokens at every generated position (K = softK, 0: none), from the same logits that chose
// the token.
func continuation(t model.Target, c cache.Cache, prompt []int, n int, smp *sample.Sampler, softK int) (Sequence, error) {
	seq := Sequence{Start: len(prompt)}
	if err := c.Rewind(0); err != nil {
		return seq, fmt.Errorf("continuation: %w", err)
	}
	eos := t.Config().EOS
	out := append([]int(nil), prompt...)
	next := prompt
	var soft softScratch
	for i := 0; i < n; i++ {
		res, err := t.Forward(c, model.Request{Tokens: next, Logits: model.LogitsLast})
		if err != nil {
			return seq, fmt.Errorf("continuation at %d: %w", len(out), err)
		}
		if softK > 0 {
			seq.SoftIDs, seq.SoftP = soft.append(seq.SoftIDs, seq.SoftP, res.Logits, softK)
		}
		var tok int
		if smp == nil {
			tok = argmax(res.Logits)
		} else {
			tok = smp.Sample(res.Logits, nil)
		}
		out = append(out, tok)
		if slices.Contains(eos, tok) {
			break
		}
		next = out[len(out)-1:]
	}
	seq.Tokens = out
	return seq, nil
}

// Recipe is everything that decides target data: two runs with equal recipes produce the same
// sequences, and a cache is reused only for its own recipe.
type Recipe struct {
	Version   int       `json:"version"` // of the generation procedure (continuationSeed, soft targets)
	Target    string    `json:"target"`  // the target's shape
	Prompts   string    `json:"prompts"` // base name of the prompt file
	N         int       `json:"n"`
	Length    int       `json:"length"`
	PromptMin int       `json:"prompt_min"`
	PromptMax int       `json:"prompt_max"`
	Lower     bool      `json:"lower"`
	Seed      uint64    `json:"seed"`
	Temps     []float64 `json:"temps"`
	TopP      float64   `json:"top_p"`
	SoftTopK  int       `json:"soft_top_k"`
}

const recipeVersion = 1

// recipe is o's recipe for target t and promptsFile (o with defaults).
func (o DataOptions) recipe(cfg model.Config, promptsFile string) Recipe {
	temps := slices.Clone(o.Temps)
	if len(temps) == 0 {
		temps = []float64{0}
	}
	topP := o.TopP
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	return Recipe{Version: recipeVersion, Target: fmt.Sprintf("%s L%d H%d V%d", cfg.Arch, cfg.Layers, cfg.Hidden, cfg.Vocab),
		Prompts: filepathBase(promptsFile), N: o.N, Length: o.Length, PromptMin: o.PromptMin, PromptMax: o.PromptMax,
		Lower: o.Lower, Seed: o.Seed, Temps: temps, TopP: topP, SoftTopK: o.SoftTopK}
}

// greedyOnly reports whether r makes the data every run made before recipes were recorded.
func (r Recipe) greedyOnly() bool {
	return r.SoftTopK == 0 && !slices.ContainsFunc(r.Temps, func(t float64) bool { return t > 0 })
}

// source describes r in a line. For greedy-only data it is the description caches and
// checkpoints carried before recipes, so those stay valid.
func (r Recipe) source() string {
	if r.greedyOnly() {
		return fmt.Sprintf("target %s greedy continuations (%d tokens) of %d prompts of %d..%d tokens (lower %v, seed %d) from %s",
			r.Target, r.Length, r.N, r.PromptMin, r.PromptMax, r.Lower, r.Seed, r.Prompts)
	}
	return fmt.Sprintf("target %s continuations (%d tokens) sampled at temperatures %v top-p %g, %d soft targets per token, of %d prompts of %d..%d tokens (lower %v, seed %d, v%d) from %s",
		r.Target, r.Length, r.Temps, r.TopP, r.SoftTopK, r.N, r.PromptMin, r.PromptMax, r.Lower, r.Seed, r.Version, r.Prompts)
}

// diff lists the fields where r (a cache's) and want (this run's) differ.
func (r Recipe) diff(want Recipe) []string {
	var out []string
	f := func(name string, have, want any) {
		if a, b := fmt.Sprint(have), fmt.Sprint(want); a != b {
			out = append(out, fmt.Sprintf("%s %s (cached) vs %s (asked)", name, a, b))
		}
	}
	f("version", r.Version, want.Version)
	f("target", r.Target, want.Target)
	f("prompts", r.Prompts, want.Prompts)
	f("n", r.N, want.N)
	f("length", r.Length, want.Length)
	f("prompt lengths", [2]int{r.PromptMin, r.PromptMax}, [2]int{want.PromptMin, want.PromptMax})
	f("lower", r.Lower, want.Lower)
	f("seed", r.Seed, want.Seed)
	f("temps", r.Temps, want.Temps)
	f("top-p", r.TopP, want.TopP)
	f("soft top-k", r.SoftTopK, want.SoftTopK)
	return out
}

// continuationSeed is the sampler seed of sequence i: each sequence's draws depend only on
// (seed, i), so a subset or a resumed build reproduces them, and neighbouring sequences (or
// seeds) start unrelated streams.
func continuationSeed(seed uint64, i int) uint64 {
	return splitmix.Mix(splitmix.Mix(seed^0x636f6e74696e7565) + uint64(i))
}

// DataMismatchError is GenerateTargetData's refusal of a cache file made with another recipe.
type DataMismatchError struct {
	File string
	Diff []string // the differing fields, or the two descriptions for a cache without a recipe
}

func (e *DataMismatchError) Error() string {
	return fmt.Sprintf("data cache %s was made differently: %s; delete it (or regenerate: --regen-data, DataOptions.Regenerate) to build this run's data",
		e.File, strings.Join(e.Diff, "; "))
}

// GenerateTargetData builds the distillation set: for o.N prompts drawn from promptsFile, the
// target's continuation of o.Length tokens, greedy or sampled at o.Temps (sequence i with the
// seed continuationSeed(o.Seed, i)), with o.SoftTopK soft targets per generated token. The
// result is cached in cacheFile (when not empty) with its recipe; a later call with the same
// recipe reuses it, and one with another recipe is refused with a DataMismatchError (rebuilt
// when o.Regenerate): a silent rebuild would discard hours of generation, and a checkpoint
// trained on the old data cannot continue on the new.
func GenerateTargetData(ctx context.Context, t model.Target, tok tokenizer.Tokenizer, promptsFile, cacheFile string, o DataOptions) (*Data, error) {
	o.defaults()
	cfg := t.Config()
	r := o.recipe(cfg, promptsFile)
	for _, temp := range r.Temps {
		if !(temp >= 0) || math.IsInf(temp, 0) {
			return nil, fmt.Errorf("target data: temperature %g, want a finite value >= 0", temp)
		}
	}
	if o.SoftTopK < 0 || o.SoftTopK > cfg.Vocab {
		return nil, fmt.Errorf("target data: %d soft targets per token, want 0..%d (the vocabulary)", o.SoftTopK, cfg.Vocab)
	}
	source := r.source()
	if cacheFile != "" && !o.Regenerate {
		d, err := LoadData(cacheFile)
		switch {
		case err == nil && d.Recipe != nil:
			if diff := d.Recipe.diff(r); len(diff) > 0 {
				return nil, &DataMismatchError{File: cacheFile, Diff: diff}
			}
			return d, nil
		case err == nil && d.Source == source:
			return d, nil // written before recipes, by the same (greedy) procedure
		case err == nil:
			return nil, &DataMismatchError{File: cacheFile, Diff: []string{fmt.Sprintf("%q (cached) vs %q (asked)", d.Source, source)}}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	prompts, err := Prompts(tok, promptsFile, o)
	if err != nil {
		return nil, err
	}
	capacity := 0
	for _, p := range prompts {
		capacity = max(capacity, len(p)+o.Length)
	}
	if cfg.MaxSeq > 0 && capacity > cfg.MaxSeq {
		return nil, fmt.Errorf("target data: prompt + %d tokens needs %d positions, the target has %d", o.Length, capacity, cfg.MaxSeq)
	}
	c := t.NewCache(capacity)
	d := &Data{Source: source, Recipe: &r, SoftTopK: o.SoftTopK}
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		temp := r.Temps[i%len(r.Temps)]
		var smp *sample.Sampler
		if temp > 0 {
			smp = sample.New(sample.Options{Temperature: float32(temp), TopP: float32(r.TopP), Seed: continuationSeed(o.Seed, i)}, cfg.Vocab)
		}
		seq, err := continuation(t, c, p, o.Length, smp, o.SoftTopK)
		if err != nil {
			return nil, fmt.Errorf("target data: prompt %d: %w", i, err)
		}
		seq.Temp = temp
		d.Sequences = append(d.Sequences, seq)
		if o.Progress != nil && ((i+1)%100 == 0 || i+1 == len(prompts)) {
			fmt.Fprintf(o.Progress, "data %d/%d sequences, %d tokens\n", i+1, len(prompts), d.Tokens())
		}
	}
	if cacheFile != "" {
		if err := d.Save(cacheFile); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// RawTextData cuts the text of path into o.N chunks of o.Length tokens (BOS first when the
// tokenizer adds one): the cheaper option, which teaches the text rather than the target.
func RawTextData(tok tokenizer.Tokenizer, path string, o DataOptions) (*Data, error) {
	o.defaults()
	lines, err := readLines(path, o.Lower)
	if err != nil {
		return nil, err
	}
	d := &Data{Source: "raw text of " + filepathBase(path)}
	var cur []int
	flush := func() {
		if len(cur) > 2 {
			d.Sequences = append(d.Sequences, Sequence{Tokens: cur, Start: 1})
		}
		cur = nil
	}
	for _, line := range lines {
		if len(d.Sequences) >= o.N {
			break
		}
		if cur == nil && tok.AddBOS() && tok.BOS() >= 0 {
			cur = append(cur, tok.BOS())
		}
		for _, id := range tok.Encode(line) {
			cur = append(cur, id)
			if len(cur) >= o.Length {
				flush()
				if len(d.Sequences) >= o.N {
					break
				}
				if tok.AddBOS() && tok.BOS() >= 0 {
					cur = append(cur, tok.BOS())
				}
			}
		}
	}
	if len(d.Sequences) < o.N {
		flush()
	}
	if len(d.Sequences) == 0 {
		return nil, fmt.Errorf("raw text %s: no sequences", path)
	}
	return d, nil
}

// Save writes d as JSON through an atomic rename.
func (d *Data) Save(path string) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("save data %s: %w", path, err)
	}
	return writeAtomic(path, b)
}

// LoadData reads a file written by Save.
func LoadData(path string) (*Data, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load data: %w", err)
	}
	var d Data
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("load data %s: %w", path, err)
	}
	return &d, nil
}

func filepathBase(p string) string { return filepath.Base(p) }
