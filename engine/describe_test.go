package engine

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// facts are the parts of a Description a listing shows and a run relies on.
type facts struct {
	format, family, dtype string
	params                int64
	context, vocab        int
	tokenizer             bool
	template              TemplateKind
	stop                  []int
	drafts                []string // Arch/BlockSize per draft
}

func factsOf(d *Description) facts {
	f := facts{format: d.Format, family: d.Family, dtype: d.DType, params: d.Parameters, context: d.Context,
		vocab: d.Config.Vocab, tokenizer: d.Tok != nil, template: d.Template.Kind, stop: d.Stop}
	for _, di := range d.Drafts {
		f.drafts = append(f.drafts, di.Arch+"/"+strconv.Itoa(di.BlockSize))
	}
	return f
}

func sameFacts(a, b facts) bool {
	return a.format == b.format && a.family == b.family && a.dtype == b.dtype && a.params == b.params &&
		a.context == b.context && a.vocab == b.vocab && a.tokenizer == b.tokenizer && a.template == b.template &&
		slices.Equal(a.stop, b.stop) && slices.Equal(a.drafts, b.drafts)
}

// Every kind of folder the tests can build, described from its files alone.
func TestDescribeFolders(t *testing.T) {
	stories := shareddata.Path(t, "stories260K/stories260K.bin")
	// The checkpoint alone, without tok512.bin beside it.
	bare := filepath.Join(t.TempDir(), "stories260K.bin")
	copyFile(t, stories, bare)
	storiesDraft := t.TempDir()
	storiesDraft2 := t.TempDir()
	{
		d, err := Describe(Options{Model: stories})
		must(t, err)
		must(t, dflash.WriteRandom(storiesDraft, dflash.ConfigFor(d.Config, 1, 8), 7, kernel.F32))
		must(t, dflash2.WriteRandom(storiesDraft2, mustLoad(t, d).Target.Config(), dflash2.ConfigFor(d.Config, 1, 4), 7, kernel.F32))
	}

	qwen := testmodel.Qwen3(t, `{"eos_token_id": [151645, 151643]}`)
	// The same folder without tokenizer_config.json: no template, but ChatML's tokens.
	noTemplate := t.TempDir()
	copyFiles(t, qwen, noTemplate, "config.json", "tokenizer.json", "model.safetensors")
	// And without any tokenizer: token ids only.
	noTokenizer := t.TempDir()
	copyFiles(t, qwen, noTokenizer, "config.json", "model.safetensors")
	llama := llamaFolder(t)

	// stories260K: 64 wide, 5 layers, 8 heads over 4 KV heads of 8, MLP 172, vocabulary 512,
	// tied head: 512*64 + 5*(64*64 + 2*64*32 + 64*64 + 3*64*172 + 2*64) + 64 = 260,032.
	// It ends a story on EOS 2 or on BOS 1 (see stopIDs).
	storiesFacts := facts{format: FormatLlama2C, family: "llama", dtype: "F32", params: 260032, context: 512, vocab: 512,
		tokenizer: true, template: TemplatePlain, stop: []int{1, 2}}
	withDraft := storiesFacts
	withDraft.drafts = []string{dflash.Arch + "/8"}
	withDraft2 := storiesFacts
	withDraft2.drafts = []string{dflash2.Arch + "/4"}
	// The tiny Qwen3 folder: 16 wide, 2 layers, 2 heads over 1 KV head of 8, MLP 32, tied:
	// 151936*16 + 2*(16*16 + 2*16*8 + 16*16 + 3*16*32 + 2*16) + 16 = 2,435,664.
	qwenFacts := facts{format: FormatSafetensors, family: "qwen3", dtype: "F32", params: 2435664, context: 512, vocab: 151936,
		tokenizer: true, template: TemplateModel, stop: []int{151643, 151645}}
	// Without tokenizer_config.json the template is ChatML; config.json's eos (151645) and the
	// tokenizer's <|endoftext|> (151643) still stop.
	noTemplateFacts := qwenFacts
	noTemplateFacts.template = TemplateChatML
	// Without a tokenizer only config.json's eos is known.
	noTokenizerFacts := qwenFacts
	noTokenizerFacts.tokenizer, noTokenizerFacts.template, noTokenizerFacts.stop = false, TemplateNone, []int{151645}

	cases := []struct {
		name string
		o    Options
		want facts
	}{
		{"llama2.c checkpoint", Options{Model: stories}, storiesFacts},
		{"checkpoint without tokenizer", Options{Model: bare}, facts{format: FormatLlama2C, family: "llama", dtype: "F32",
			params: 260032, context: 512, vocab: 512, template: TemplateNone, stop: []int{2}}},
		{"checkpoint with a DFlash draft", Options{Model: stories, Drafts: []string{storiesDraft}}, withDraft},
		{"checkpoint with a DFlash2 draft", Options{Model: stories, Drafts: []string{storiesDraft2}}, withDraft2},
		{"Qwen3 folder", Options{Model: qwen}, qwenFacts},
		{"Qwen3 folder named by its config.json", Options{Model: filepath.Join(qwen, "config.json")}, qwenFacts},
		{"Qwen3 folder without template", Options{Model: noTemplate}, noTemplateFacts},
		{"Qwen3 folder without tokenizer", Options{Model: noTokenizer}, noTokenizerFacts},
		// 1024 wide, 4 layers, 8 heads over 2 KV heads of 128, MLP 2048, vocabulary 1000, untied:
		// 2*1000*1024 + 4*(1024*1024 + 2*1024*256 + 1024*1024 + 3*1024*2048 + 2*1024) + 1024.
		{"Llama folder, config only", Options{Model: llama}, facts{format: FormatSafetensors, family: "llama", dtype: "BF16",
			params: 2*1000*1024 + 4*(1024*1024+2*1024*256+1024*1024+3*1024*2048+2*1024) + 1024, context: 8192, vocab: 1000,
			template: TemplateNone, stop: []int{7, 9}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Describe(c.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := factsOf(d); !sameFacts(got, c.want) {
				t.Errorf("facts\n got %+v\nwant %+v", got, c.want)
			}
			if st, _ := os.Stat(d.Path); !st.IsDir() && d.Size != st.Size() {
				t.Errorf("size %d, want the checkpoint's %d bytes", d.Size, st.Size())
			}
		})
	}
}

// The description's shape is the loaded target's: what listings say is what runs.
func TestDescriptionIsWhatLoads(t *testing.T) {
	for _, ref := range []string{shareddata.Path(t, "stories260K/stories260K.bin"), testmodel.Qwen3(t, "")} {
		d, err := Describe(Options{Model: ref})
		must(t, err)
		e := mustLoad(t, d)
		got, want := e.Target.Config(), d.Config
		if want.DType == 0 {
			want.DType = got.DType // a folder's tensors decide the dtype
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: loaded %+v, described %+v", ref, got, want)
		}
		if label := map[kernel.DType]string{kernel.F32: "F32", kernel.BF16: "BF16"}[got.DType]; label != d.DType {
			t.Errorf("%s: loaded dtype %v, described %s", ref, got.DType, d.DType)
		}
		if e.Tok != d.Tok || !slices.Equal(e.Stop, d.Stop) {
			t.Errorf("%s: the engine's tokenizer or stop ids are not the description's", ref)
		}
	}
}

// Describing reads no weights: a folder whose weights are garbage is described in full; Validate
// refuses it from the header, naming the file, and loading it fails.
func TestDescribeReadsNoWeights(t *testing.T) {
	qwen := testmodel.Qwen3(t, "")
	dir := t.TempDir()
	copyFiles(t, qwen, dir, "config.json", "tokenizer.json", "tokenizer_config.json")
	must(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("not safetensors"), 0o644))
	d, err := Describe(Options{Model: dir})
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if d.Template.Kind != TemplateModel || d.Tok == nil || d.Size != int64(len("not safetensors")) {
		t.Errorf("description %+v incomplete", d)
	}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "model.safetensors")) {
		t.Errorf("Validate of garbage weights: %v; want an error naming the file", err)
	}
	if _, err := d.Load(transformer.KeepDType); err == nil {
		t.Error("loading garbage weights succeeded")
	}
}

// A draft that does not fit its target is refused by the description, naming the field, before
// either's weights are read.
func TestDescribeRefusesUnfitDraft(t *testing.T) {
	stories := shareddata.Path(t, "stories260K/stories260K.bin")
	d, err := Describe(Options{Model: stories})
	must(t, err)
	cfg := dflash.ConfigFor(d.Config, 1, 8)
	cfg.Vocab = 600 // not the target's 512
	dir := t.TempDir()
	must(t, dflash.WriteRandom(dir, cfg, 7, kernel.F32))
	if _, err := Describe(Options{Model: stories, Drafts: []string{dir}}); err == nil || !strings.Contains(err.Error(), "vocab_size 600") {
		t.Errorf("unfit draft: %v; want an error naming vocab_size 600", err)
	}
}

func TestTemplateRenderPlain(t *testing.T) {
	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello."}, {Role: "user", Content: "Story?"}}
	plain := plainTemplate // as chooseTemplate gives it
	want := "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Story?\n\nAssistant:"
	if got, err := plain.Render(msgs, chat.Options{AddGenerationPrompt: true}); err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	if got, _ := plain.Render(msgs[:1], chat.Options{}); got != "System: Be brief." {
		t.Errorf("without generation prompt: got %q", got)
	}
	if got, _ := plain.Render(nil, chat.Options{AddGenerationPrompt: true}); got != "Assistant:" {
		t.Errorf("no messages: got %q, want just the prompt", got)
	}
	if _, err := (Template{}).Render(msgs, chat.Options{}); err == nil {
		t.Error("a model without a tokenizer rendered a chat")
	}
}

func TestParameterSize(t *testing.T) {
	cases := []struct {
		n    int64
		want string
	}{{260032, "260K"}, {15_200_000, "15.2M"}, {596_049_920, "596M"}, {1_720_574_976, "1.7B"}, {999, "999"}}
	for _, c := range cases {
		if got := ParameterSize(c.n); got != c.want {
			t.Errorf("ParameterSize(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// llamaFolder writes a Llama-shaped config.json (and generation_config.json) with no weights and
// no tokenizer: describing it must not need them.
func llamaFolder(t *testing.T) string {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
		"hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8,
		"num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 8192,
		"tie_word_embeddings": false, "torch_dtype": "bfloat16", "eos_token_id": 9}`), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [7, 9]}`), 0o644))
	return dir
}

func mustLoad(t *testing.T, d *Description) *Engine {
	t.Helper()
	e, err := d.Load(transformer.KeepDType)
	must(t, err)
	return e
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, data, 0o644))
}
