package qwen35

import (
	"fmt"
	"testing"
	"time"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// timedStack wraps a forward's Stack and adds the time of each phase to its section: the
// Open, Join and Close of linear and of full-attention layers, the embedding and the head.
type timedStack struct {
	f   *forward
	sec [secs]time.Duration
}

const (
	secEmbed = iota
	secOpenLin
	secJoinLin
	secCloseLin
	secOpenFull
	secJoinFull
	secCloseFull
	secHead
	secs
)

var secNames = [secs]string{"embed", "open-lin", "join-lin", "close-lin", "open-full", "join-full", "close-full", "head"}

func (t *timedStack) lin(l int) bool { return t.f.m.layers[l].Type == Linear }

func (t *timedStack) Embed(p *nn.Part) {
	t0 := time.Now()
	t.f.Embed(p)
	t.sec[secEmbed] += time.Since(t0)
}

// layer adds the time since t0 to layer l's section: lin for a linear layer, full otherwise.
func (t *timedStack) layer(l int, lin, full int, t0 time.Time) {
	if t.lin(l) {
		t.sec[lin] += time.Since(t0)
	} else {
		t.sec[full] += time.Since(t0)
	}
}

func (t *timedStack) Open(p *nn.Part, l int) {
	t0 := time.Now()
	t.f.Open(p, l)
	t.layer(l, secOpenLin, secOpenFull, t0)
}

func (t *timedStack) Join(l int) {
	t0 := time.Now()
	t.f.Join(l)
	t.layer(l, secJoinLin, secJoinFull, t0)
}

func (t *timedStack) Close(p *nn.Part, l int) {
	t0 := time.Now()
	t.f.Close(p, l)
	t.layer(l, secCloseLin, secCloseFull, t0)
}

func (t *timedStack) Head(p *nn.Part) {
	t0 := time.Now()
	t.f.Head(p)
	t.sec[secHead] += time.Since(t0)
}

// BenchmarkDecodeBreakdown accounts for a decode step of the real 0.8B shape: the time of each
// phase per token, the time of the same step's weight products alone (in the forward's order,
// nothing between them), and what the bandwidth probe says streaming the weights should take.
// Building the weights takes a while; run it alone:
//
//	DFLASH_KERNEL=avx512 go test ./model/qwen35/ -run '^$' -bench DecodeBreakdown -benchtime 32x
func BenchmarkDecodeBreakdown(b *testing.B) {
	cfg, _ := SyntheticConfig("qwen3.5-0.8b")
	m, err := Synthetic(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	c := m.NewCache(1024).(*cache.Hybrid)
	prompt := make([]int, 64)
	for i := range prompt {
		prompt[i] = i + 7
	}
	if _, err := m.Forward(c, model.Request{Tokens: prompt, Logits: model.LogitsLast}); err != nil {
		b.Fatal(err)
	}
	ts := &timedStack{f: &m.fwd}
	plain := m.phases
	timed := nn.NewPhases(ts, m.ws.Workspace, cfg.Layers)
	tok := []int{5}
	decode := func() {
		if c.Offset() >= 1000 {
			_ = c.Rewind(0)
		}
		if _, err := m.Forward(c, model.Request{Tokens: tok, Logits: model.LogitsLast}); err != nil {
			b.Fatal(err)
		}
	}
	// The products of one decode step, alone.
	h := cfg.Hidden
	x := make([]float32, h)
	for i := range x {
		x[i] = float32(i%7) * 0.01
	}
	big := make([]float32, max(cfg.Intermediate, 2*cfg.Heads*cfg.HeadDim, cfg.ConvChannels(), cfg.Vocab))
	y2 := make([]float32, len(big))
	xw := make([]float32, max(cfg.Intermediate, cfg.ValueHeads*cfg.ValueDim, cfg.Heads*cfg.HeadDim))
	var tHead time.Duration
	products := func() {
		for i := range m.layers {
			l := &m.layers[i]
			if d := l.DeltaNet; d != nil {
				_ = kernel.MatMulEach(x, 1, kernel.Product{M: d.QKV, Y: big}, kernel.Product{M: d.Z, Y: y2[:d.Z.N]},
					kernel.Product{M: d.B, Y: y2[d.Z.N : d.Z.N+d.B.N]}, kernel.Product{M: d.A, Y: y2[d.Z.N+d.B.N : d.Z.N+d.B.N+d.A.N]})
				d.Out.MatMul(y2[:h], xw[:d.Out.K], 1)
			} else {
				a := l.Attn
				_ = kernel.MatMulEach(x, 1, kernel.Product{M: a.Q, Y: big}, kernel.Product{M: a.K, Y: y2[:a.K.N]}, kernel.Product{M: a.V, Y: y2[a.K.N : a.K.N+a.V.N]})
				a.O.MatMul(y2[:h], xw[:a.O.K], 1)
			}
			_ = kernel.MatMulEach(x, 1, kernel.Product{M: l.Gate, Y: big[:l.Gate.N]}, kernel.Product{M: l.Up, Y: y2[:l.Up.N]})
			l.Down.MatMul(y2[:h], xw[:l.Down.K], 1)
		}
		th := time.Now()
		m.head.MatMul(big[:m.head.N], x, 1)
		tHead += time.Since(th)
	}
	for range 4 {
		decode()
		products()
	}
	probe := kernel.ProbeBandwidth(1<<30, 500*time.Millisecond)
	tHead = 0
	var tFwd, tTimed, tProd time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		decode()
		t1 := time.Now()
		m.phases = timed
		decode()
		m.phases = plain
		t2 := time.Now()
		products()
		t3 := time.Now()
		tFwd += t1.Sub(t0)
		tTimed += t2.Sub(t1)
		tProd += t3.Sub(t2)
		n++
	}
	probe2 := kernel.ProbeBandwidth(1<<30, 500*time.Millisecond)
	per := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	bytes := float64(m.WeightBytes())
	msg := fmt.Sprintf("weights %.2f GB; probe %.1f / %.1f GB/s -> %.2f ms at the probe's mean\n", bytes/1e9, probe, probe2, bytes/((probe+probe2)/2*1e9)*1e3)
	msg += fmt.Sprintf("decode %.2f ms (%.1f tok/s), timed decode %.2f ms, products alone %.2f ms (%.1f GB/s)\n",
		per(tFwd), 1e3/per(tFwd), per(tTimed), per(tProd), bytes/(per(tProd)*1e6))
	msg += fmt.Sprintf("  head product alone %.3f ms (%.1f GB/s), the layers' products %.3f ms (%.1f GB/s)\n", per(tHead), float64(m.head.Bytes())/(per(tHead)*1e6),
		per(tProd)-per(tHead), (bytes-float64(m.head.Bytes()))/((per(tProd)-per(tHead))*1e6))
	var sum time.Duration
	for i, d := range ts.sec {
		msg += fmt.Sprintf("  %-10s %6.3f ms\n", secNames[i], per(d))
		sum += d
	}
	msg += fmt.Sprintf("  %-10s %6.3f ms\n", "sum", per(sum))
	fmt.Print(msg)
	b.ReportMetric(per(tFwd), "ms/token")
	b.ReportMetric(per(tProd), "ms-products/token")
}
