package backend

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/runner"
)

// MaxAutoParallel caps the generations a model decodes together when --parallel is not given.
// On a CPU a decode step is bound by reading the weights, so a few sequences ride almost free;
// past a handful the step becomes bound by compute and attention, and each stream slows down.
const MaxAutoParallel = 4

// AutoParallel is how many generations a model decodes together by default: as many sequences
// as half the available memory holds (seqBytes each, SequenceBytes), at most MaxAutoParallel and
// at least 1. With the available memory unknown (avail <= 0) it is 1. Sequences are allocated
// as generations need them, so the memory is taken only when that many run at once.
func AutoParallel(seqBytes, avail int64) int {
	if avail <= 0 || seqBytes <= 0 {
		return 1
	}
	return int(min(max(avail/2/seqBytes, 1), MaxAutoParallel))
}

// SequenceBytes estimates the memory one sequence of ctxLen positions holds.
//
// For a dense target: the target's keys and values for every layer (bf16 where the target caches
// bf16, engine.Description.KVAttention, else float32), their head-major
// copies where attention reads them (heads of at most nn.FusedMaxHead elements: the keys, and
// the values too for llama2.c-sized heads of 16 or less), and as much again for each draft layer
// (drafts share the target's attention shape).
//
// For a hybrid (Qwen3.5) target it is exact, hybridSequenceBytes.
func SequenceBytes(d *engine.Description, ctxLen int) int64 {
	if hc := d.Hybrid(); hc != nil {
		h := *hc
		h.DType = d.CacheDType() // the cache's kind follows the weights a folder's tensors decide
		return hybridSequenceBytes(&h, d.Drafts, ctxLen)
	}
	c := d.Config
	row := int64(c.KVHeads*c.HeadDim) * 4
	copies := int64(2)
	switch {
	case c.HeadDim <= 16:
		copies = 4
	case c.HeadDim <= nn.FusedMaxHead:
		copies = 3
	}
	target := int64(c.Layers) * int64(max(ctxLen, 1)) * row * copies
	if a := d.KVAttention(); a.CacheBF16() {
		target = a.KVBytes(c.Layers, max(ctxLen, 1)) // bf16 rows, no copies
	}
	var layers int64
	for _, dr := range d.Drafts {
		layers += int64(dr.Layers)
	}
	return target + layers*int64(max(ctxLen, 1))*row*copies
}

// hybridSequenceBytes is exactly what a Qwen3.5 sequence of ctxLen positions allocates at most
// on the server, each part counted by the function its allocation follows: the target's cache
// (keys and values for the full-attention layers only, the live recurrent state of the linear
// ones; qwen35.Config.CacheBytes), runner.DefaultCheckpoints.Max prompt checkpoints of one state
// each, and with a draft (the first one, the one the server opens) the snapshot slots of its
// deepest verify (BlockSize-1 states: runner.Session.Limit drafts a round, the last row's state
// being the live one) and its own key/value cache for ctxLen positions plus one block
// (runner.NewBlockSession), laid out for the draft's attention shape.
func hybridSequenceBytes(hc *qwen35.Config, drafts []engine.DraftInfo, ctxLen int) int64 {
	depth, draft := 0, int64(0)
	if len(drafts) > 0 {
		dr := drafts[0]
		depth = max(dr.BlockSize-1, 0)
		draft = nn.NewAttention(dr.Heads, dr.KVHeads, dr.HeadDim).KVBytes(dr.Layers, max(ctxLen+dr.BlockSize, 1))
	}
	return hc.SequenceBytes(ctxLen, depth, runner.DefaultCheckpoints.Max) + draft
}

// memAvailable is the kernel's estimate of the memory available to a new process
// (/proc/meminfo MemAvailable), in bytes, or 0 where it cannot be read.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
