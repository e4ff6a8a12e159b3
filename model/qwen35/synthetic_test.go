package qwen35

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
)

// TestSyntheticShapes: the named shapes are QWEN35.md's table, and a sequence's recurrent state
// for the 4B shape is the 24 x (2 MiB + 96 KiB) that section 4 computes.
func TestSyntheticShapes(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		layers, full, hidden, hv  int
		stateBytes, convBytesEach int
	}{
		{"qwen3.5-0.8b", 24, 6, 1024, 16, 16 * 128 * 128 * 4, 3 * 6144 * 4},
		{"qwen3.5-4b", 32, 8, 2560, 32, 32 * 128 * 128 * 4, 3 * 8192 * 4},
	} {
		cfg, err := SyntheticConfig(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Check(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Layers != tc.layers || cfg.count(Full) != tc.full || cfg.Hidden != tc.hidden || cfg.ValueHeads != tc.hv || cfg.RotaryDim != 64 {
			t.Errorf("%s: %+v", tc.name, cfg)
		}
		if s := cfg.ValueHeads * cfg.KeyDim * cfg.ValueDim * 4; s != tc.stateBytes {
			t.Errorf("%s: state %d bytes a layer, want %d", tc.name, s, tc.stateBytes)
		}
		if c := (cfg.ConvKernel - 1) * cfg.ConvChannels() * 4; c != tc.convBytesEach {
			t.Errorf("%s: conv window %d bytes a layer, want %d", tc.name, c, tc.convBytesEach)
		}
	}
	if _, err := SyntheticConfig("qwen3.5-9000b"); err == nil {
		t.Error("unknown synthetic name accepted")
	}
}

// TestSyntheticDecodes: a small synthetic hybrid (bf16 weights) decodes, and a verify forward of
// 5 rows gives each row bitwise the logits of one-row decoding.
func TestSyntheticDecodes(t *testing.T) {
	m := tinySynthetic(t)
	cfg := m.HybridConfig()
	toks := []int{5, 17, 250, 3, 99}
	res, err := m.Forward(m.NewCache(16), model.Request{Tokens: toks, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Clone(res.Logits)
	c := m.NewCache(16).(*cache.Hybrid)
	for i, tok := range toks {
		one := step(t, m, c, []int{tok})
		if !slices.Equal(one, all[i*cfg.Vocab:(i+1)*cfg.Vocab]) {
			t.Fatalf("row %d of the verify differs from decoding", i)
		}
	}
}

// TestForwardAllocatesNothing: once a cache and its snapshots exist, decode steps and recorded
// verify forwards allocate nothing (the workspace and the slots were sized up front).
func TestForwardAllocatesNothing(t *testing.T) {
	m := tinySynthetic(t)
	c := m.NewCache(512).(*cache.Hybrid)
	c.EnableSnapshots(8)
	verify, taps := []int{1, 2, 3, 4, 5, 6, 7, 8}, []int{1}
	step(t, m, c, verify) // grows logits to 8 rows once
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := m.Forward(c, model.Request{Tokens: verify[:1], Logits: model.LogitsLast, Taps: taps}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(c, model.Request{Tokens: verify, Logits: model.LogitsAll, Taps: taps}); err != nil {
			t.Fatal(err)
		}
		if err := c.RestoreRow(2); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per decode step and verify round", allocs)
	}
}

// tinySynthetic is a small synthetic hybrid of the 0.8B shape's kind with bf16 weights.
func tinySynthetic(tb testing.TB) *Model {
	tb.Helper()
	cfg, _ := SyntheticConfig("qwen3.5-0.8b")
	cfg.Layers, cfg.LayerTypes = 4, []LayerType{Linear, Full, Linear, Linear}
	cfg.Hidden, cfg.Intermediate, cfg.Vocab, cfg.MaxSeq = 64, 96, 300, 1024
	cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.RotaryDim = 4, 2, 32, 8
	cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim = 2, 4, 16, 16
	m, err := Synthetic(cfg, 3)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkForward times a decode step and a 16-row recorded verify with its restore, on a
// small synthetic hybrid (a sanity figure; dflash bench measures the real shapes).
func BenchmarkForward(b *testing.B) {
	m := tinySynthetic(b)
	for _, rows := range []int{1, 16} {
		b.Run(map[int]string{1: "decode", 16: "verify16"}[rows], func(b *testing.B) {
			c := m.NewCache(1024).(*cache.Hybrid)
			c.EnableSnapshots(16)
			toks := make([]int, rows)
			for i := range toks {
				toks[i] = i + 1
			}
			for b.Loop() {
				if c.Offset()+rows > 1000 {
					_ = c.Rewind(0)
				}
				if _, err := m.Forward(c, model.Request{Tokens: toks, Logits: model.LogitsAll}); err != nil {
					b.Fatal(err)
				}
				if rows > 1 {
					if err := c.RestoreRow(0); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestSequenceMemory: what a sequence holds beyond its K/V for the real shapes, at verify depth
// 15 (z-lab's Qwen3.5 drafts' block of 16) and the runner's default 4 checkpoints. One state is
// the linear layers' S [Hv][128][128] plus a conv window of 3 x C floats: 0.8B has 18 linear
// layers of 1 MiB + 72 KiB, 4B and 9B (the same linear shapes) 24 of 2 MiB + 96 KiB. The figures
// are what NewCache and the snapshot slots allocate (checked on a small model's cache).
func TestSequenceMemory(t *testing.T) {
	const mib = 1 << 20
	nine, _ := SyntheticConfig("qwen3.5-4b")
	nine.Hidden, nine.Intermediate, nine.TiedEmbeddings = 4096, 12288, false // QWEN35.md's 9B row
	for _, tc := range []struct {
		name  string
		state int64
	}{
		{"qwen3.5-0.8b", 18 * (1*mib + 72<<10)},
		{"qwen3.5-4b", 24 * (2*mib + 96<<10)},
		{"qwen3.5-9b", 24 * (2*mib + 96<<10)},
	} {
		cfg := nine
		if tc.name != "qwen3.5-9b" {
			cfg, _ = SyntheticConfig(tc.name)
		}
		m := cfg.Memory(15, 4)
		if m.State != tc.state || m.SnapshotBytes != 15*tc.state || m.CheckpointBytes != 4*tc.state {
			t.Errorf("%s: %+v, want a state of %d bytes, 15 snapshot slots and 4 checkpoints of it", tc.name, m, tc.state)
		}
		t.Logf("%s: state %.2f MiB, snapshots at depth 15 %.1f MiB, 4 checkpoints %.1f MiB, total %.1f MiB per sequence",
			tc.name, float64(m.State)/mib, float64(m.SnapshotBytes)/mib, float64(m.CheckpointBytes)/mib, float64(m.Total())/mib)
	}
	small := tinySynthetic(t)
	c := small.NewCache(64).(*cache.Hybrid)
	c.EnableSnapshots(16)
	cfg := small.HybridConfig()
	if m := cfg.Memory(15, 0); c.StateBytes() != m.State || c.SnapshotBytes() != m.SnapshotBytes {
		t.Errorf("the cache holds a state of %d and slots of %d bytes, Memory says %+v", c.StateBytes(), c.SnapshotBytes(), m)
	}
}

// TestSequenceBytes: SequenceBytes is what a sequence's buffers hold, measured from them: the
// cache's keys and values for the full-attention layer only (heads of 32 take the fused path,
// so a head-major key copy too), the live state, the snapshot slots a depth-7 verify enables and
// three saved checkpoints; at capacities inside and past MaxSeq (clamped), with and without the
// slots.
func TestSequenceBytes(t *testing.T) {
	m := tinySynthetic(t)
	cfg := m.HybridConfig()
	for _, capacity := range []int{1, 100, 1024, 5000} {
		for _, depth := range []int{0, 7} {
			c := m.NewCache(capacity).(*cache.Hybrid)
			if depth > 0 {
				c.EnableSnapshots(depth + 1)
			}
			kv, ok := c.KV.(interface{ Bytes() int64 })
			if !ok {
				t.Fatalf("the cache's %T does not measure its buffers", c.KV)
			}
			const checkpoints = 3
			var cps int64
			for range checkpoints {
				var cp cache.Checkpoint
				c.SaveCheckpoint(&cp)
				cps += cp.Bytes()
			}
			var live int64
			for l := range c.Conv {
				live += 4 * int64(cap(c.Conv[l])+cap(c.State[l]))
			}
			got := kv.Bytes() + live + c.SnapshotBytes() + cps
			if want := cfg.SequenceBytes(capacity, depth, checkpoints); got != want {
				t.Errorf("capacity %d, depth %d: the buffers hold %d bytes, SequenceBytes says %d", capacity, depth, got, want)
			}
			if got, want := kv.Bytes()+live, cfg.CacheBytes(capacity); got != want {
				t.Errorf("capacity %d: NewCache holds %d bytes, CacheBytes says %d", capacity, got, want)
			}
		}
	}
}

// BenchmarkDecodeNarrowHead times a decode step through four layers of the 0.8B shape (three
// Gated DeltaNet, one full attention) with a 1024-token vocabulary, so that the head does not
// hide the layers: the figure to profile the recurrence, conv and gates with
// (go test -bench DecodeNarrowHead -cpuprofile ...). Building the weights takes a few seconds.
func BenchmarkDecodeNarrowHead(b *testing.B) {
	cfg, _ := SyntheticConfig("qwen3.5-0.8b")
	cfg.Layers, cfg.LayerTypes = 4, []LayerType{Linear, Linear, Linear, Full}
	cfg.Vocab = 1024
	m, err := Synthetic(cfg, 3)
	if err != nil {
		b.Fatal(err)
	}
	c := m.NewCache(1024).(*cache.Hybrid)
	toks := []int{5}
	for b.Loop() {
		if c.Offset() >= 1000 {
			_ = c.Rewind(0)
		}
		if _, err := m.Forward(c, model.Request{Tokens: toks, Logits: model.LogitsLast}); err != nil {
			b.Fatal(err)
		}
	}
}
