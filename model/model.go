// Package model defines what the runner needs from a model — targets that decode and verify,
// drafts that propose blocks — and the registry that maps a Hugging Face architecture name to
// its loader. Model families live in subpackages. A model knows nothing of speculation: it runs
// forwards over the rows it is given and reports what was asked (logits, layer taps).
package model

import (
	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
)

// Config is the shape of a decoder-only target, whatever file it came from.
type Config struct {
	Arch         string // e.g. "Qwen3ForCausalLM", "LlamaForCausalLM", "llama2c"
	Layers       int
	Hidden       int
	Intermediate int
	Heads        int
	KVHeads      int
	HeadDim      int
	Vocab        int
	MaxSeq       int // context length the model supports
	RMSEps       float32
	RopeTheta    float64
	BOS          int   // -1 if none
	EOS          []int // end-of-sequence ids (may be empty)
	DType        kernel.DType
	// TiedEmbeddings says the output head is the token embedding (Qwen3 0.6B-4B, llama2.c
	// checkpoints with a shared classifier).
	TiedEmbeddings bool
}

// LogitRows says which rows of a forward need logits.
type LogitRows int

const (
	LogitsNone LogitRows = iota // prefill of context only
	LogitsLast                  // plain decoding: only the last row
	LogitsAll                   // verification: every row
)

// Request is one forward: Tokens are processed at positions c.Offset().. and appended to the cache.
type Request struct {
	Tokens []int
	Logits LogitRows
	// Taps lists 0-based decoder layers whose output (after the residual add, before the final
	// norm; Hugging Face hidden_states[id+1]) is returned for every row.
	Taps []int
	// Hidden asks for every row's last hidden state after the final norm (what the output head
	// reads; Hugging Face's last_hidden_state), for embeddings. A target that does not implement
	// it returns no Hidden, which callers must check.
	Hidden bool
}

// Result holds what a forward computed. Its slices belong to the model's workspace and stay
// valid until the next Forward on the same model; callers copy what they keep.
type Result struct {
	Logits []float32   // rows-with-logits x Vocab (1 row for LogitsLast)
	Taps   [][]float32 // one per Request.Taps entry, len(Tokens) x Hidden
	Hidden []float32   // len(Tokens) x Hidden when Request.Hidden, else nil
}

// Target is a causal language model the runner decodes with.
//
// Caches that cannot rewind. A target with recurrent layers (model/qwen35) makes caches for which
// cache.CanRewind is false: their Rewind goes only to the current offset or to 0 (a new
// sequence) and fails with cache.ErrNoRewind otherwise. Such a cache implements
// cache.RowSnapshots, and the runner keeps the first k+1 rows of a verify forward through it:
// EnableSnapshots(rows) once per sequence, with rows = 1 + the most drafts a round; then every
// Forward of at most that many rows records the state after each of its rows, and RestoreRow(k)
// right after it leaves the cache bitwise as if only rows 0..k had been forwarded, one by one.
// A forward of more rows (a prompt) records nothing and can only be kept whole. Prompt-prefix
// reuse on such a cache needs state checkpoints of its own; Rewind(keep) with 0 < keep < Offset
// is an error, never a silent reset.
type Target interface {
	Config() Config
	// NewCache allocates state for up to capacity positions.
	NewCache(capacity int) cache.Cache
	// Forward runs the rows of r at positions c.Offset()... and commits them to c. On error the
	// cache is unchanged. A row's results never depend on the other rows of the forward.
	Forward(c cache.Cache, r Request) (Result, error)
	// Embed writes token's raw embedding row (no scaling) into dst[:Hidden].
	Embed(dst []float32, token int)
	// Head is the raw output head, [Vocab][Hidden] (the embedding when tied), without final norm.
	Head() *kernel.Matrix
	// WeightBytes is the number of weight bytes one decode step streams.
	WeightBytes() int64
}

// BatchItem is one sequence's share of a batched forward: its cache and the rows to run on it.
type BatchItem struct {
	Cache cache.Cache
	Request
}

// BatchTarget is a target that runs the rows of several sequences in one forward: the weight
// products run once over the stacked rows of every item, attention per item against its own
// cache. ForwardBatch(items) gives each item the Result, bit for bit, that Forward(item.Cache,
// item.Request) alone would, and commits each item's rows to its cache; the items' caches must be
// distinct and every item must ask the same Taps. On error no cache is changed. The Results alias
// the target's workspace as Forward's do (valid until the next forward).
type BatchTarget interface {
	Target
	ForwardBatch(items []BatchItem) ([]Result, error)
}
