package qwen35

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
)

// tiny describes a small random Qwen3.5 folder. Its shape exercises every mistake QWEN35.md
// section 8 lists: Hv != Hk (so j/(Hv/Hk) differs from j mod Hk), rd < hd (RoPE over all of hd
// differs), a 4-wide conv (a dropped conv state shows after 1 row), nonzero zero-centred norm
// weights and a plain DeltaNet norm away from 1 (w against 1+w), dk != dv (a transposed state
// misreads), and a q_proj whose queries and gates differ per head.
type tiny struct {
	conditional             bool // Qwen3_5ForConditionalGeneration layout
	hidden, inter, layers   int
	heads, kvHeads, headDim int
	rotary                  float64 // partial_rotary_factor
	hk, hv, dk, dv, conv    int
	vocab                   int
	theta, eps              float64
	tied                    bool
	layerTypes              []string // nil: written as full_attention_interval 4
	dtype                   safetensors.DType
	shards                  int
	weights                 map[string][]float64 // values exactly as stored
}

func tinyCausal() *tiny {
	return &tiny{hidden: 32, inter: 48, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotary: 0.5,
		hk: 2, hv: 4, dk: 8, dv: 6, conv: 4, vocab: 50, theta: 1e4, eps: 1e-6,
		layerTypes: []string{"linear_attention", "full_attention", "linear_attention", "linear_attention"},
		dtype:      safetensors.F32}
}

func tinyConditional() *tiny {
	t := tinyCausal()
	t.conditional, t.tied, t.layerTypes, t.shards = true, true, nil, 2
	return t
}

func (t *tiny) prefix() string {
	if t.conditional {
		return "model.language_model."
	}
	return "model."
}

func (t *tiny) isFull(i int) bool {
	if t.layerTypes != nil {
		return t.layerTypes[i] == "full_attention"
	}
	return (i+1)%4 == 0
}

// tensors lists every tensor of t's layout with its shape, in write order.
func (t *tiny) tensors() (names []string, shapes map[string][]int) {
	shapes = map[string][]int{}
	add := func(n string, s ...int) { names = append(names, n); shapes[n] = s }
	P, h := t.prefix(), t.hidden
	c := 2*t.hk*t.dk + t.hv*t.dv
	add(P+"embed_tokens.weight", t.vocab, h)
	add(P+"norm.weight", h)
	for i := 0; i < t.layers; i++ {
		p := fmt.Sprintf("%slayers.%d.", P, i)
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
		if t.isFull(i) {
			add(p+"self_attn.q_proj.weight", 2*t.heads*t.headDim, h)
			add(p+"self_attn.k_proj.weight", t.kvHeads*t.headDim, h)
			add(p+"self_attn.v_proj.weight", t.kvHeads*t.headDim, h)
			add(p+"self_attn.o_proj.weight", h, t.heads*t.headDim)
			add(p+"self_attn.q_norm.weight", t.headDim)
			add(p+"self_attn.k_norm.weight", t.headDim)
		} else {
			add(p+"linear_attn.in_proj_qkv.weight", c, h)
			add(p+"linear_attn.in_proj_z.weight", t.hv*t.dv, h)
			add(p+"linear_attn.in_proj_b.weight", t.hv, h)
			add(p+"linear_attn.in_proj_a.weight", t.hv, h)
			add(p+"linear_attn.conv1d.weight", c, 1, t.conv)
			add(p+"linear_attn.dt_bias", t.hv)
			add(p+"linear_attn.A_log", t.hv)
			add(p+"linear_attn.norm.weight", t.dv)
			add(p+"linear_attn.out_proj.weight", h, t.hv*t.dv)
		}
		add(p+"mlp.gate_proj.weight", t.inter, h)
		add(p+"mlp.up_proj.weight", t.inter, h)
		add(p+"mlp.down_proj.weight", h, t.inter)
	}
	if !t.tied {
		add("lm_head.weight", t.vocab, h)
	}
	if t.conditional {
		// The vision tower and the MTP head are in the file but never read.
		add("model.visual.patch_embed.proj.weight", 8, 3)
		add("mtp.fc.weight", h, 2*h)
	}
	return names, shapes
}

// draw is the random value of element i of tensor name: zero-centred norms near 0, the plain
// DeltaNet norm near 1, decay parameters in the range of trained ones, matrices N(0, 0.25).
func draw(r *rand.Rand, name string) float64 {
	switch {
	case strings.HasSuffix(name, "linear_attn.norm.weight"):
		return 1 + 0.3*r.NormFloat64()
	case strings.HasSuffix(name, "norm.weight"):
		return 0.3 * r.NormFloat64()
	case strings.HasSuffix(name, "A_log"):
		return -1 + 0.5*r.NormFloat64()
	case strings.HasSuffix(name, "dt_bias"):
		return 0.5 * r.NormFloat64()
	case strings.HasSuffix(name, "conv1d.weight"):
		return 0.5 * r.NormFloat64()
	}
	return 0.25 * r.NormFloat64()
}

// write puts config.json and the safetensors files (t.shards of them, with an index, when > 1)
// into a fresh folder; mutate may change the tensors and cfg the config before writing.
func (t *tiny) write(tb testing.TB, seed uint64, mutate func(*[]safetensors.WriteTensor), cfgMut func(top, text map[string]any)) string {
	tb.Helper()
	dir := tb.TempDir()
	r := rand.New(rand.NewPCG(seed, 35))
	names, shapes := t.tensors()
	t.weights = map[string][]float64{}
	var out []safetensors.WriteTensor
	for _, name := range names {
		shape := shapes[name]
		n := 1
		for _, d := range shape {
			n *= d
		}
		stored := make([]float64, n)
		wt := safetensors.WriteTensor{Name: name, DType: t.dtype, Shape: shape}
		switch t.dtype {
		case safetensors.BF16, safetensors.F16:
			bits := make([]uint16, n)
			for i := range bits {
				v := float32(draw(r, name))
				if t.dtype == safetensors.BF16 {
					bits[i] = kernel.F32ToBF16(v)
					stored[i] = float64(kernel.BF16ToF32(bits[i]))
				} else {
					bits[i] = safetensors.F16FromF32(v)
					stored[i] = float64(safetensors.F32FromF16(bits[i]))
				}
			}
			wt.Data = safetensors.BF16Bytes(bits)
			if t.dtype == safetensors.F16 {
				wt.Data = safetensors.F16Bytes(bits)
			}
		default:
			vals := make([]float32, n)
			for i := range vals {
				vals[i] = float32(draw(r, name))
				stored[i] = float64(vals[i])
			}
			wt.Data = safetensors.F32Bytes(vals)
		}
		t.weights[name] = stored
		out = append(out, wt)
	}
	if mutate != nil {
		mutate(&out)
	}
	if t.shards <= 1 {
		if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "pt"}); err != nil {
			tb.Fatal(err)
		}
	} else {
		weightMap := map[string]string{}
		for s := 0; s < t.shards; s++ {
			file := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, t.shards)
			var part []safetensors.WriteTensor
			for i := s; i < len(out); i += t.shards {
				part = append(part, out[i])
				weightMap[out[i].Name] = file
			}
			if err := safetensors.Write(filepath.Join(dir, file), part, map[string]string{"format": "pt"}); err != nil {
				tb.Fatal(err)
			}
		}
		idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
		if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	text := map[string]any{
		"model_type": "qwen3_5_text", "vocab_size": t.vocab, "hidden_size": t.hidden,
		"intermediate_size": t.inter, "num_hidden_layers": t.layers, "num_attention_heads": t.heads,
		"num_key_value_heads": t.kvHeads, "head_dim": t.headDim, "linear_num_key_heads": t.hk,
		"linear_num_value_heads": t.hv, "linear_key_head_dim": t.dk, "linear_value_head_dim": t.dv,
		"linear_conv_kernel_dim": t.conv, "rms_norm_eps": t.eps, "hidden_act": "silu",
		"max_position_embeddings": 256, "attn_output_gate": true, "mamba_ssm_dtype": "float32",
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": t.theta,
			"partial_rotary_factor": t.rotary, "mrope_section": []int{2, 1, 1}, "mrope_interleaved": true},
		"eos_token_id": 2,
	}
	if t.layerTypes != nil {
		text["layer_types"] = t.layerTypes
	} else {
		text["full_attention_interval"] = 4
	}
	top := text
	if t.conditional {
		top = map[string]any{"architectures": []string{ArchConditional}, "model_type": "qwen3_5",
			"text_config": text, "vision_config": map[string]any{"depth": 1}, "image_token_id": 248056,
			"tie_word_embeddings": t.tied}
	} else {
		text["architectures"] = []string{ArchCausalLM}
		text["tie_word_embeddings"] = t.tied
	}
	if cfgMut != nil {
		cfgMut(top, text)
	}
	js, _ := json.Marshal(top)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// reference is an independent forward in float64 with plain loops, written from QWEN35.md's
// equations and not from this package's code: it returns every layer's output (taps) and the
// logits of every row of tokens, decoded from an empty state.
func (t *tiny) reference(tokens []int) (taps [][][]float64, logits [][]float64) {
	w := t.weights
	P, h := t.prefix(), t.hidden
	c := 2*t.hk*t.dk + t.hv*t.dv
	rms := func(x, wt []float64, centred bool) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		k := 1 / math.Sqrt(ss/float64(len(x))+t.eps)
		out := make([]float64, len(x))
		for i := range x {
			g := wt[i]
			if centred {
				g = 1 + wt[i]
			}
			out[i] = x[i] * k * g
		}
		return out
	}
	matvec := func(name string, x []float64) []float64 {
		m := w[name]
		out := make([]float64, len(m)/len(x))
		for j := range out {
			for i, v := range x {
				out[j] += m[j*len(x)+i] * v
			}
		}
		return out
	}
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	silu := func(x float64) float64 { return x * sig(x) }
	rd := int(float64(t.headDim) * t.rotary)
	rope := func(v []float64, pos int) {
		for i := 0; i < rd/2; i++ {
			f := math.Pow(t.theta, -float64(2*i)/float64(rd))
			cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
			a, b := v[i], v[i+rd/2]
			v[i], v[i+rd/2] = a*cs-b*sn, b*cs+a*sn
		}
	}
	// Per layer: keys and values so far (full), or the raw conv inputs so far and S (linear).
	keys := make([][][]float64, t.layers)
	vals := make([][][]float64, t.layers)
	convIn := make([][][]float64, t.layers)
	S := make([][][][]float64, t.layers) // [layer][value head][dk][dv]
	for l := range S {
		S[l] = make([][][]float64, t.hv)
		for j := range S[l] {
			S[l][j] = make([][]float64, t.dk)
			for i := range S[l][j] {
				S[l][j][i] = make([]float64, t.dv)
			}
		}
	}
	taps = make([][][]float64, t.layers)
	head := "lm_head.weight"
	if t.tied {
		head = P + "embed_tokens.weight"
	}
	for pos, tok := range tokens {
		x := append([]float64(nil), w[P+"embed_tokens.weight"][tok*h:(tok+1)*h]...)
		for l := 0; l < t.layers; l++ {
			p := fmt.Sprintf("%slayers.%d.", P, l)
			xn := rms(x, w[p+"input_layernorm.weight"], true)
			var mixed []float64
			if t.isFull(l) {
				qg := matvec(p+"self_attn.q_proj.weight", xn)
				k := matvec(p+"self_attn.k_proj.weight", xn)
				v := matvec(p+"self_attn.v_proj.weight", xn)
				d := t.headDim
				for g := 0; g < t.kvHeads; g++ {
					copy(k[g*d:(g+1)*d], rms(k[g*d:(g+1)*d], w[p+"self_attn.k_norm.weight"], true))
					rope(k[g*d:(g+1)*d], pos)
				}
				keys[l] = append(keys[l], k)
				vals[l] = append(vals[l], v)
				att := make([]float64, t.heads*d)
				for hh := 0; hh < t.heads; hh++ {
					q := rms(qg[2*hh*d:(2*hh+1)*d], w[p+"self_attn.q_norm.weight"], true)
					rope(q, pos)
					gate := qg[(2*hh+1)*d : (2*hh+2)*d]
					g := hh / (t.heads / t.kvHeads)
					sc := make([]float64, pos+1)
					mx := math.Inf(-1)
					for s := range sc {
						for e := 0; e < d; e++ {
							sc[s] += q[e] * keys[l][s][g*d+e]
						}
						sc[s] /= math.Sqrt(float64(d))
						mx = math.Max(mx, sc[s])
					}
					var sum float64
					for s := range sc {
						sc[s] = math.Exp(sc[s] - mx)
						sum += sc[s]
					}
					for e := 0; e < d; e++ {
						var o float64
						for s := range sc {
							o += sc[s] / sum * vals[l][s][g*d+e]
						}
						att[hh*d+e] = o * sig(gate[e])
					}
				}
				mixed = matvec(p+"self_attn.o_proj.weight", att)
			} else {
				m := matvec(p+"linear_attn.in_proj_qkv.weight", xn)
				z := matvec(p+"linear_attn.in_proj_z.weight", xn)
				b := matvec(p+"linear_attn.in_proj_b.weight", xn)
				a := matvec(p+"linear_attn.in_proj_a.weight", xn)
				convIn[l] = append(convIn[l], m)
				cw := w[p+"linear_attn.conv1d.weight"]
				mc := make([]float64, c)
				for ch := 0; ch < c; ch++ {
					var acc float64
					for j := 0; j < t.conv; j++ {
						if s := pos - t.conv + 1 + j; s >= 0 {
							acc += cw[ch*t.conv+j] * convIn[l][s][ch]
						}
					}
					mc[ch] = silu(acc)
				}
				unit := func(v []float64, scale float64) []float64 {
					var ss float64
					for _, e := range v {
						ss += e * e
					}
					out := make([]float64, len(v))
					for i, e := range v {
						out[i] = e / math.Sqrt(ss+1e-6) * scale
					}
					return out
				}
				y := make([]float64, t.hv*t.dv)
				for j := 0; j < t.hv; j++ {
					kh := j / (t.hv / t.hk)
					q := unit(mc[kh*t.dk:(kh+1)*t.dk], 1/math.Sqrt(float64(t.dk)))
					k := unit(mc[t.hk*t.dk+kh*t.dk:t.hk*t.dk+(kh+1)*t.dk], 1)
					v := mc[2*t.hk*t.dk+j*t.dv : 2*t.hk*t.dk+(j+1)*t.dv]
					beta := sig(b[j])
					g := -math.Exp(w[p+"linear_attn.A_log"][j]) * math.Log1p(math.Exp(a[j]+w[p+"linear_attn.dt_bias"][j]))
					st := S[l][j]
					for i := range st {
						for e := range st[i] {
							st[i][e] *= math.Exp(g)
						}
					}
					u := make([]float64, t.dv)
					for e := range u {
						var pred float64
						for i := range st {
							pred += st[i][e] * k[i]
						}
						u[e] = beta * (v[e] - pred)
					}
					o := make([]float64, t.dv)
					for i := range st {
						for e := range st[i] {
							st[i][e] += k[i] * u[e]
						}
					}
					for e := range o {
						for i := range st {
							o[e] += st[i][e] * q[i]
						}
					}
					on := rms(o, w[p+"linear_attn.norm.weight"], false)
					for e := range on {
						y[j*t.dv+e] = on[e] * silu(z[j*t.dv+e])
					}
				}
				mixed = matvec(p+"linear_attn.out_proj.weight", y)
			}
			for i := range x {
				x[i] += mixed[i]
			}
			xn = rms(x, w[p+"post_attention_layernorm.weight"], true)
			g := matvec(p+"mlp.gate_proj.weight", xn)
			u := matvec(p+"mlp.up_proj.weight", xn)
			for i := range g {
				g[i] = silu(g[i]) * u[i]
			}
			down := matvec(p+"mlp.down_proj.weight", g)
			for i := range x {
				x[i] += down[i]
			}
			taps[l] = append(taps[l], append([]float64(nil), x...))
		}
		logits = append(logits, matvec(head, rms(x, w[P+"norm.weight"], true)))
	}
	return taps, logits
}
