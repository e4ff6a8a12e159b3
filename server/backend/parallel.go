package backend

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/model/nn"
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

// SequenceBytes estimates the memory one sequence of ctxLen positions holds: the target's keys
// and values in float32 for every layer, their head-major copies where attention reads them
// (heads of at most nn.FusedMaxHead elements: the keys, and the values too for llama2.c-sized
// heads of 16 or less), and as much again for each draft layer (drafts share the target's
// attention shape). A hybrid target's recurrent layers are counted as attention layers, which
// over-estimates them.
func SequenceBytes(d *engine.Description, ctxLen int) int64 {
	c := d.Config
	row := int64(c.KVHeads*c.HeadDim) * 4
	copies := int64(2)
	switch {
	case c.HeadDim <= 16:
		copies = 4
	case c.HeadDim <= nn.FusedMaxHead:
		copies = 3
	}
	layers := int64(c.Layers)
	for _, dr := range d.Drafts {
		layers += int64(dr.Layers)
	}
	return layers * int64(max(ctxLen, 1)) * row * copies
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
