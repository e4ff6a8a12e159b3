package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/tokenizer"
)

// Sequence is one training sequence: token ids from position 0 and the first position whose
// token may serve as an anchor (the first generated token for target data, 1 for raw text).
type Sequence struct {
	Tokens []int `json:"tokens"`
	Start  int   `json:"start"`
}

// Data is a set of training sequences with a description of where they came from.
type Data struct {
	Source    string     `json:"source"` // e.g. "target greedy continuations of prompts.txt"
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
	Seed      uint64 // which lines become prompts
	Progress  io.Writer
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
	if err := c.Rewind(0); err != nil {
		return nil, fmt.Errorf("greedy: %w", err)
	}
	eos := t.Config().EOS
	out := append([]int(nil), prompt...)
	next := prompt
	for i := 0; i < n; i++ {
		res, err := t.Forward(c, model.Request{Tokens: next, Logits: model.LogitsLast})
		if err != nil {
			return nil, fmt.Errorf("greedy at %d: %w", len(out), err)
		}
		tok := argmax(res.Logits)
		out = append(out, tok)
		if slices.Contains(eos, tok) {
			break
		}
		next = out[len(out)-1:]
	}
	return out, nil
}

// GenerateTargetData builds the distillation set: for o.N prompts drawn from promptsFile, the
// target's greedy continuation of o.Length tokens. The result is cached in cacheFile (when not
// empty) and a later call with the same cache file, target shape and options reuses it.
func GenerateTargetData(ctx context.Context, t model.Target, tok tokenizer.Tokenizer, promptsFile, cacheFile string, o DataOptions) (*Data, error) {
	o.defaults()
	cfg := t.Config()
	source := fmt.Sprintf("target %s L%d H%d V%d greedy continuations (%d tokens) of %d prompts of %d..%d tokens (lower %v, seed %d) from %s",
		cfg.Arch, cfg.Layers, cfg.Hidden, cfg.Vocab, o.Length, o.N, o.PromptMin, o.PromptMax, o.Lower, o.Seed, filepathBase(promptsFile))
	if cacheFile != "" {
		d, err := LoadData(cacheFile)
		if err == nil && d.Source == source {
			return d, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
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
	d := &Data{Source: source}
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seq, err := Greedy(t, c, p, o.Length)
		if err != nil {
			return nil, fmt.Errorf("target data: prompt %d: %w", i, err)
		}
		d.Sequences = append(d.Sequences, Sequence{Tokens: seq, Start: len(p)})
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
