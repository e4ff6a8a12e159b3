package nn

import (
	"fmt"
	"sync/atomic"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
)

// CacheKind is the element type targets' key/value caches store (SetCacheKind).
type CacheKind int32

const (
	// CacheAuto caches bf16 keys and values for targets whose products do not run in f32
	// (bf16 and quantized weights: their keys and values carry no more precision than bf16
	// holds that the rest of the forward keeps), and f32 for f32 targets (llama2.c
	// checkpoints, whose greedy ids are checked against run.c's). ollama and llama.cpp cache
	// f16 by default.
	CacheAuto CacheKind = iota
	CacheF32
	CacheBF16
)

var cacheKind atomic.Int32

// SetCacheKind sets the kind of the target caches made from now on and returns the previous
// one. Caches already made keep theirs. Drafts always cache f32: their caches are small and
// their reads a small share of a round.
func SetCacheKind(k CacheKind) CacheKind { return CacheKind(cacheKind.Swap(int32(k))) }

// CacheBF16For reports whether a target whose products run in weights caches bf16 keys and
// values under the current kind. Shapes that read head-major copies cache f32 whatever it says
// (Attention.CacheBF16).
func CacheBF16For(weights kernel.DType) bool {
	switch CacheKind(cacheKind.Load()) {
	case CacheF32:
		return false
	case CacheBF16:
		return true
	}
	return weights != kernel.F32
}

// ParseCacheKind reads a --kv-cache value: auto, f32 or bf16.
func ParseCacheKind(s string) (CacheKind, error) {
	switch s {
	case "", "auto":
		return CacheAuto, nil
	case "f32":
		return CacheF32, nil
	case "bf16":
		return CacheBF16, nil
	}
	return CacheAuto, fmt.Errorf("key/value cache type %q: want auto, f32 or bf16", s)
}

func (k CacheKind) String() string {
	switch k {
	case CacheF32:
		return "f32"
	case CacheBF16:
		return "bf16"
	}
	return "auto"
}

// CacheElem names the element type of a target cache's keys and values ("bf16" or "f32"; a
// hybrid cache's full-attention layers), or "" for a cache with no key/value rows.
func CacheElem(c cache.Cache) string {
	if h, ok := c.(*cache.Hybrid); ok {
		c = h.KV
	}
	kv, ok := AsKV(c)
	switch {
	case !ok:
		return ""
	case kv.BF16():
		return "bf16"
	}
	return "f32"
}
