package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/tokenizer/chat"
)

// headerParams sums the element counts of a folder's tensors from the safetensors headers, the
// vision tower's and the MTP head's left out as the engine serves neither.
func headerParams(t *testing.T, dir string) int64 {
	t.Helper()
	mh, err := safetensors.ReadModelHeader(dir)
	must(t, err)
	var n int64
	for _, name := range mh.Names() {
		if strings.HasPrefix(name, "model.visual.") || strings.HasPrefix(name, "mtp.") {
			continue
		}
		in, _ := mh.Info(name)
		e := int64(1)
		for _, s := range in.Shape {
			e *= int64(s)
		}
		n += e
	}
	return n
}

// A random Qwen3.5 folder in each layout is described from its config (the decoder under
// text_config in the published one), validated against its headers with the qwen35 loader's
// list, and loaded through qwen35.LoadHF: the engine's target computes exactly what the package's
// own load does.
func TestDescribeQwen35Folders(t *testing.T) {
	for _, c := range []struct {
		name     string
		f        testmodel.Qwen35Folder
		dtype    string
		textOnly bool
	}{
		{"causal", testmodel.Qwen35Folder{}, "F32", false},
		{"conditional", testmodel.Qwen35Folder{Conditional: true}, "BF16", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := testmodel.Qwen35(t, c.f)
			d, err := Describe(Options{Model: dir})
			must(t, err)
			if d.Family != FamilyQwen35 || d.Format != FormatSafetensors || d.DType != c.dtype || d.Context != 1024 || d.TextOnly != c.textOnly {
				t.Errorf("family %q format %q dtype %q context %d text-only %v; want %s %s %s 1024 %v",
					d.Family, d.Format, d.DType, d.Context, d.TextOnly, FamilyQwen35, FormatSafetensors, c.dtype, c.textOnly)
			}
			if want := headerParams(t, dir); d.Parameters != want {
				t.Errorf("parameters %d, want the %d elements of the folder's text tensors", d.Parameters, want)
			}
			if d.Tok != nil || d.Template.Kind != TemplateNone {
				t.Errorf("a folder without tokenizer has tokenizer %v, template %v", d.Tok, d.Template.Kind)
			}
			wantStop := []int{2}
			if c.f.Conditional {
				wantStop = nil // eos 248044 is outside the 97-token vocabulary
			}
			if !slices.Equal(d.Stop, wantStop) {
				t.Errorf("stop ids %v, want %v", d.Stop, wantStop)
			}
			must(t, d.Validate())
			e, err := d.Load(transformer.KeepDType)
			must(t, err)
			if _, ok := e.Target.(*qwen35.Model); !ok {
				t.Fatalf("loaded a %T, want a *qwen35.Model", e.Target)
			}
			got, want := e.Target.Config(), d.Config
			want.DType = got.DType
			if !slicesEqualConfig(got, want) {
				t.Errorf("loaded %+v, described %+v", got, want)
			}
			if label := map[kernel.DType]string{kernel.F32: "F32", kernel.BF16: "BF16"}[got.DType]; label != d.DType {
				t.Errorf("loaded dtype %v, described %s", got.DType, d.DType)
			}
			own, err := qwen35.LoadHF(dir, transformer.Options{})
			must(t, err)
			tokens := []int{5, 17, 3, 96, 40, 40, 1}
			a := forwardAll(t, e.Target, tokens)
			b := forwardAll(t, own, tokens)
			if !slices.Equal(a, b) {
				t.Error("the engine's target and qwen35.LoadHF's give different logits")
			}
		})
	}
}

func slicesEqualConfig(a, b model.Config) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

func forwardAll(t *testing.T, m model.Target, tokens []int) []float32 {
	t.Helper()
	r, err := m.Forward(m.NewCache(64), model.Request{Tokens: tokens, Logits: model.LogitsAll})
	must(t, err)
	return slices.Clone(r.Logits)
}

// HybridTensors is qwen35.LoadHF's list exactly, in both layouts: a folder of those tensors
// loads, and one missing any of them does not.
func TestHybridTensorsAreWhatTheLoaderReads(t *testing.T) {
	for _, conditional := range []bool{false, true} {
		t.Run(fmt.Sprint("conditional=", conditional), func(t *testing.T) {
			dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: conditional})
			qc, cond, err := qwen35.LoadConfig(dir)
			must(t, err)
			if cond != conditional {
				t.Fatalf("layout conditional=%v, wrote %v", cond, conditional)
			}
			want := HybridTensors(qc, conditional)
			if err := os.Remove(filepath.Join(dir, safetensors.IndexFile)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			write := func(skip string) {
				for _, m := range mustGlob(t, filepath.Join(dir, "*.safetensors")) {
					must(t, os.Remove(m))
				}
				var ts []safetensors.WriteTensor
				for _, w := range want {
					if w.Name == skip {
						continue
					}
					n := 1
					for _, d := range w.Shape {
						n *= d
					}
					ts = append(ts, safetensors.WriteTensor{Name: w.Name, DType: safetensors.F32, Shape: w.Shape, Data: make([]byte, 4*n)})
				}
				must(t, safetensors.Write(filepath.Join(dir, safetensors.SingleFile), ts, nil))
			}
			write("")
			must(t, checkWeights(dir, want))
			if _, err := qwen35.LoadHF(dir, transformer.Options{}); err != nil {
				t.Fatalf("the loader refuses a folder of exactly HybridTensors: %v", err)
			}
			for _, w := range want {
				write(w.Name)
				if _, err := qwen35.LoadHF(dir, transformer.Options{}); err == nil {
					t.Errorf("the loader does not need %s, which HybridTensors lists", w.Name)
				}
				if err := checkWeights(dir, want); err == nil {
					t.Errorf("checkWeights passed without %s", w.Name)
				}
			}
		})
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	must(t, err)
	return m
}

// The parameter count of the real Qwen3.5-0.8B shape (QWEN35.md section 2), counted by hand from
// section 3's table: 18 DeltaNet layers and 6 full-attention ones, a tied head.
func TestHybridParamCountQwen35_08B(t *testing.T) {
	qc, err := qwen35.SyntheticConfig("qwen3.5-0.8b")
	must(t, err)
	const V, H, I, hd, nh, nkv, Hk, Hv, dk, dv, K = 248320, 1024, 3584, 256, 8, 2, 16, 16, 128, 128, 4
	C := 2*Hk*dk + Hv*dv
	common := 2*H + 3*H*I // two zero-centred norms and the gated MLP
	linear := C*H + Hv*dv*H + 2*Hv*H + C*K + 2*Hv + dv + H*Hv*dv
	full := 2*nh*hd*H + 2*nkv*hd*H + H*nh*hd + 2*hd
	want := int64(V*H + 18*(common+linear) + 6*(common+full) + H)
	if got := HybridParamCount(qc); got != want {
		t.Errorf("HybridParamCount(qwen3.5-0.8b) = %d, want %d", got, want)
	}
	d, err := Describe(Options{Synthetic: "qwen3.5-0.8b"})
	must(t, err)
	if d.Parameters != want || d.Family != FamilyQwen35 {
		t.Errorf("synthetic qwen3.5-0.8b: parameters %d family %q, want %d %s", d.Parameters, d.Family, want, FamilyQwen35)
	}
}

// A Qwen3.5 mixture-of-experts config is refused at Describe, saying so, whether it is told by
// its architecture or by num_experts, and even when its fields are not a dense decoder's.
func TestDescribeRefusesQwen35MoE(t *testing.T) {
	cases := map[string]func(top, text map[string]any){
		"architecture": func(top, text map[string]any) {
			top["architectures"] = []string{"Qwen3_5MoeForConditionalGeneration"}
		},
		"num_experts": func(top, text map[string]any) { text["num_experts"] = 256 },
		"expert widths only": func(top, text map[string]any) {
			top["architectures"] = []string{"Qwen3_5MoeForConditionalGeneration"}
			delete(text, "intermediate_size")
			text["moe_intermediate_size"] = 16
		},
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Config: mut})
			_, err := Describe(Options{Model: dir})
			if err == nil || !strings.Contains(err.Error(), "mixture-of-experts models are not supported yet") {
				t.Errorf("Describe of a MoE config: %v; want a refusal saying MoE is not supported yet", err)
			}
		})
	}
}

// Validate names the tensor that does not fit the config, in either layout's names.
func TestValidateQwen35NamesTheTensor(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Config: func(top, text map[string]any) {
		text["linear_value_head_dim"] = 8 // the tensors were written for 6
	}})
	d, err := Describe(Options{Model: dir})
	must(t, err)
	err = d.Validate()
	if err == nil || !strings.Contains(err.Error(), "model.language_model.layers.0.linear_attn.in_proj_qkv.weight") {
		t.Errorf("Validate: %v; want the first misshaped tensor named", err)
	}
}

// thinkingTemplate is written here for the test, after the behaviour of Qwen3.5's template (not
// its text): with thinking on, which is its default, the generation prompt opens a <think>
// block for the model to fill; with enable_thinking false it writes an empty block, so the model
// answers at once.
const thinkingTemplate = "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}" +
	"{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}" +
	"{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"

// The chat path on a Qwen3.5 folder. No Qwen3.5 tokenizer is in the shared test data, so the
// folder carries the Qwen3 tokenizer (the same family's ChatML tokens) and a template of ours
// that switches thinking as Qwen3.5's does.
func TestQwen35ChatTemplate(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Tokenizer: true, ChatTemplate: thinkingTemplate})
	d, err := Describe(Options{Model: dir})
	must(t, err)
	if d.Tok == nil || d.Template.Kind != TemplateModel || d.Template.Source != thinkingTemplate {
		t.Fatalf("tokenizer %v, template kind %v: want the folder's own", d.Tok, d.Template.Kind)
	}
	// config.json's eos (248044, inside Qwen3.5's vocabulary) and the template's end of turn.
	imEnd, ok := d.Tok.TokenID("<|im_end|>")
	if !ok || !slices.Contains(d.Stop, imEnd) || !slices.Contains(d.Stop, 248044) {
		t.Errorf("stop ids %v: want <|im_end|> (%d) and config.json's 248044", d.Stop, imEnd)
	}
	msgs := []chat.Message{{Role: "user", Content: "hi"}}
	off, on := false, true
	for _, c := range []struct {
		think *bool
		want  string
	}{
		{nil, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"},
		{&on, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"},
		{&off, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
	} {
		got, err := d.Template.Render(msgs, chat.Options{AddGenerationPrompt: true, EnableThinking: c.think})
		must(t, err)
		if got != c.want {
			t.Errorf("enable_thinking %v: rendered %q, want %q", c.think, got, c.want)
		}
	}
	must(t, d.Validate())
	e, err := d.Load(transformer.KeepDType)
	must(t, err)
	ids, err := e.EncodePrompt("<|im_start|>user\nhi<|im_end|>")
	must(t, err)
	if want := []int{151644, 872, 198, 6023, 151645}; !slices.Equal(ids, want) {
		t.Errorf("prompt ids %v, want %v", ids, want)
	}
}

// A Qwen3.5 folder whose tokenizer_config.json carries the fuller template of
// tokenizer/chat/testdata (ours, after Qwen3.5's behaviour: thinking on and off, reasoning kept
// after the last query, XML tool calls, grouped tool results) renders a tool loop, and the
// rendered prompt encodes, through the Qwen3 tokenizer (no Qwen3.5 tokenizer.json is in the
// shared test data, so the ids are Qwen3's, not Qwen3.5's), with every ChatML, think and tool
// marker as the one special token it names.
func TestQwen35ToolLoopPrompt(t *testing.T) {
	src, err := os.ReadFile("../tokenizer/chat/testdata/qwen35-like.jinja")
	must(t, err)
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Tokenizer: true, ChatTemplate: string(src)})
	d, err := Describe(Options{Model: dir})
	must(t, err)
	msgs := []chat.Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ReasoningContent: "Need it.", ToolCalls: []chat.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Content: "sunny"},
	}
	off := false
	text, err := d.Template.Render(msgs, chat.Options{AddGenerationPrompt: true, EnableThinking: &off})
	must(t, err)
	must(t, d.Validate())
	e, err := d.Load(transformer.KeepDType)
	must(t, err)
	ids, err := e.EncodePrompt(text)
	must(t, err)
	// Two user turns, one assistant turn and the generation prompt open a turn each; the think
	// block appears twice (the kept reasoning, the empty one thinking off writes).
	for marker, want := range map[string]int{
		"<|im_start|>": 4, "<|im_end|>": 3, "<think>": 2, "</think>": 2,
		"<tool_call>": 1, "</tool_call>": 1, "<tool_response>": 1, "</tool_response>": 1,
	} {
		id, ok := d.Tok.TokenID(marker)
		if !ok {
			t.Fatalf("the tokenizer has no %s", marker)
		}
		if got := countOf(ids, id); got != want {
			t.Errorf("%s (id %d) appears %d times in the encoded prompt, want %d", marker, id, got, want)
		}
	}
	if !strings.HasSuffix(text, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("prompt ends %q, want the empty think block of thinking off", text[max(0, len(text)-40):])
	}
}

func countOf(ids []int, id int) int {
	n := 0
	for _, v := range ids {
		if v == id {
			n++
		}
	}
	return n
}

// A DFlash draft for a Qwen3.5 target is described and checked against the hybrid description
// (taps below the layer count, hidden width, vocabulary, mask id 248070 inside it); loading it
// is refused until the runner can speculate on caches that cannot rewind.
func TestQwen35Drafts(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Vocab: 248320})
	d, err := Describe(Options{Model: dir})
	must(t, err)
	fit := dflash.ConfigFor(d.Config, 1, 8)
	fit.MaskID, fit.TargetLayers = 248070, []int{2}
	good := t.TempDir()
	must(t, dflash.WriteRandom(good, fit, 7, kernel.F32))
	d2, err := Describe(Options{Model: dir, Drafts: []string{good}})
	must(t, err)
	if len(d2.Drafts) != 1 || d2.Drafts[0].Arch != dflash.Arch || d2.Drafts[0].BlockSize != 8 {
		t.Fatalf("drafts %+v: want the DFlash draft of block 8", d2.Drafts)
	}
	if dr := d2.Drafts[0]; dr.Heads != fit.Heads || dr.KVHeads != fit.KVHeads || dr.HeadDim != fit.HeadDim || dr.Layers != fit.Layers {
		t.Errorf("draft described with %d layers, heads %d/%d of %d; its config has %d, %d/%d of %d", dr.Layers, dr.Heads, dr.KVHeads, dr.HeadDim, fit.Layers, fit.Heads, fit.KVHeads, fit.HeadDim)
	}
	// Hybrid is the shape the loader builds, and a copy.
	hc := d2.Hybrid()
	if hc == nil || !slices.Equal(hc.LayerTypes, []qwen35.LayerType{qwen35.Linear, qwen35.Full, qwen35.Linear, qwen35.Linear}) || hc.ConvKernel != 4 {
		t.Fatalf("Hybrid() = %+v, want the folder's 4 layers (full attention second) and conv kernel 4", hc)
	}
	hc.LayerTypes[0] = qwen35.Full
	if d2.Hybrid().LayerTypes[0] != qwen35.Linear {
		t.Error("editing Hybrid()'s layer types changed the description's")
	}
	if dense, err := Describe(Options{Synthetic: "qwen3-0.6b"}); err != nil || dense.Hybrid() != nil {
		t.Errorf("a dense target's Hybrid() = %v (err %v), want nil", dense.Hybrid(), err)
	}
	must(t, d2.Validate())
	for name, c := range map[string]struct {
		edit func(*dflash.Config)
		want string
	}{
		"tap past the last layer": {func(c *dflash.Config) { c.TargetLayers = []int{4} }, "target_layer_ids[0] = 4"},
		"mask outside vocab":      {func(c *dflash.Config) { c.MaskID = 248320 }, "mask_token_id 248320"},
		"hidden":                  {func(c *dflash.Config) { c.Hidden = 64 }, "hidden_size 64"},
		"vocab":                   {func(c *dflash.Config) { c.Vocab = 151936 }, "vocab_size 151936"},
	} {
		bad := fit
		c.edit(&bad)
		bdir := t.TempDir()
		must(t, dflash.WriteRandom(bdir, bad, 7, kernel.F32))
		if _, err := Describe(Options{Model: dir, Drafts: []string{bdir}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", name, err, c.want)
		}
	}
	// The hybrid cache snapshots rows, so drafts attach and speculation is exact.
	must(t, d2.CheckSpeculation())
	e, err := d2.Load(transformer.KeepDType)
	must(t, err)
	draft, err := e.OpenDraft(d2.Drafts[0])
	must(t, err)
	prompt := []int{5, 17, 3, 60, 2}
	decode := func(s runner.Session, depth runner.Depth) []int {
		var out []int
		_, err := runner.Generate(context.Background(), runner.NewSequence(e.Target, 128), runner.Request{Prompt: prompt, MaxTokens: 24, Session: s, Depth: depth},
			func(tok runner.Token) error { out = append(out, tok.ID); return nil })
		must(t, err)
		return out
	}
	want := decode(nil, runner.Depth{})
	s := draft.Drafter.Open(128)
	if got := decode(s, runner.Fixed(7)); !slices.Equal(got, want) {
		t.Errorf("speculative on a hybrid target:\n got %v\nwant %v", got, want)
	}
	must(t, s.Close())
	dense, err := Describe(Options{Model: testmodel.Qwen3(t, "")})
	must(t, err)
	must(t, dense.CheckSpeculation())
}
