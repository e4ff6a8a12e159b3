package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/llama2c"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/tokenizer"
)

// Formats a model reference can resolve to.
const (
	FormatSafetensors = "safetensors" // a Hugging Face folder
	FormatLlama2C     = "llama2.c"    // a llama2.c checkpoint file
	FormatSynthetic   = "synthetic"   // random weights of a named shape, no files
	// FormatGGUF (gguf.go): a single .gguf file.
)

// Description is what a model reference means, told from its configuration alone: every file of
// the model except its weights is read here, once, and everything that lists, shows, validates
// or opens a model (dflash run, bench, tokenize, the server's listings and /api/show) takes its
// facts from here instead of reading a config itself. Building one is cheap whatever the size of
// the model; Load then reads the weights and nothing else of the target.
//
// Today a reference is a Hugging Face folder (Qwen3, Llama, or a Qwen3.5 hybrid in either layout:
// see qwen35.go) or a llama2.c checkpoint. The other references the engine is to accept resolve
// to the same Description: a GGUF file (shape, tokenizer, template and stop ids from its
// metadata), an ollama store name or a Hugging Face hub id (a path, then one of the above).
type Description struct {
	Ref    string // the reference as given
	Path   string // the file or folder it resolved to ("" for a synthetic model)
	Name   string // the file or folder name, a default request name
	Format string // FormatSafetensors, FormatLlama2C or FormatSynthetic
	Family string // "qwen3", "llama", "qwen35"

	// Config is the target's shape exactly as its loader builds it. DType is the file's for a
	// checkpoint and unset for a folder, whose tensors decide it when loaded.
	Config model.Config
	// Parameters counts the target's weights (see ParamCount).
	Parameters int64
	// DType labels the stored weights as ollama lists a quantization: "BF16", "F16", "F32",
	// "Q4_K_M".
	DType string
	// TensorTypes counts a GGUF file's tensors per stored type ("Q4_K": 120, "F32": 57); nil
	// for other formats, whose tensors share DType.
	TensorTypes map[string]int
	// Context is the longest sequence the model supports (config.json's
	// max_position_embeddings, the checkpoint's seq_len).
	Context int
	// Size is the bytes of weights on disk; ModifiedAt the model file's or folder's time.
	Size       int64
	ModifiedAt time.Time

	// TokenizerPath is where Tok was read from, "" when the model has no tokenizer (Tok nil:
	// prompts are token ids only).
	TokenizerPath string
	Tok           tokenizer.Tokenizer
	// Template is the chat template and the fallback chosen when the folder has none.
	Template Template
	// Params are default request options by ollama's option names ("temperature", "stop",
	// "num_ctx", ...): an ollama manifest's params layer (ApplyOllama); a request's own options
	// override them. nil for every other model.
	Params map[string]any
	// Stop lists the ids that end generation: the tokenizer's EOS, generation_config.json's
	// eos_token_id and config.json's, and the chat template's end-of-turn token.
	Stop []int
	// Generation is generation_config.json (Present false when absent): its sampling defaults.
	Generation *hf.GenerationConfig
	// Drafts are the drafts named for this model, each checked to fit it.
	Drafts []DraftInfo
	// TextOnly says the folder has a vision tower that is not loaded: say TextOnlyNotice.
	TextOnly bool
	// Pooling is how embeddings pool the rows' final-normed states: what a sentence-transformers
	// folder's modules.json names (readPooling), else the mean.
	Pooling runner.Pooling

	hf     *hf.Config     // config.json as parsed, for the loader (nil unless a folder)
	seed   uint64         // synthetic weights' seed
	hybrid *qwen35.Config // a Qwen3.5 shape, whose layers model.Config cannot describe
	// conditional: a Qwen3.5 folder in the published layout (tensors under model.language_model.)
	conditional bool
}

// DraftInfo describes a draft without its weights: what it is and that it fits the target.
type DraftInfo struct {
	Dir  string // its folder, or its draft GGUF file
	Name string // the folder's name, or the file's without its extension
	Arch string // dflash.Arch or dflash2.Arch
	// BlockSize is B: at most B-1 tokens are drafted a round.
	BlockSize int
	Layers    int
	// Heads, KVHeads and HeadDim are the draft's attention shape, which its cache is laid out
	// for (nn.Attention.NewKV); a draft need not share its target's.
	Heads, KVHeads, HeadDim int

	tensors []TensorShape // what the draft's loader reads, for Validate
}

// Describe resolves o.Model (or o.Synthetic) and reads what it means, without its weights. A
// model whose configuration the engine could not run (an unknown architecture, a tokenizer
// larger than the vocabulary, a draft that does not fit) is refused here, with the part named.
func Describe(o Options) (*Description, error) {
	if o.Synthetic != "" {
		return describeSynthetic(o)
	}
	if o.Model == "" {
		return nil, errors.New("no model given (a Hugging Face folder or a llama2.c checkpoint)")
	}
	path := o.Model
	if filepath.Base(path) == "config.json" {
		path = filepath.Dir(path) // a folder named by its config, as model.Load accepts
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", o.Model, err)
	}
	d := &Description{
		Ref: o.Model, Path: path, Name: filepath.Base(strings.TrimSuffix(path, "/")),
		ModifiedAt: st.ModTime().UTC(), Generation: &hf.GenerationConfig{BOSTokenID: -1},
	}
	tc := &hf.TokenizerConfig{}
	if st.IsDir() {
		if tc, err = d.readFolder(); err != nil {
			return nil, err
		}
	} else if isGGUF(path) {
		if tc, err = d.readGGUF(st.Size()); err != nil {
			return nil, err
		}
	} else if err := d.readCheckpoint(st.Size()); err != nil {
		return nil, err
	}
	d.Family = family(d.Config.Arch, d.Family)
	d.Parameters = d.paramCount()
	d.Context = d.Config.MaxSeq

	if o.Tokenizer != "" {
		d.TokenizerPath, d.Tok = o.Tokenizer, nil // an override replaces a GGUF's own vocabulary
	} else if d.Tok == nil {
		d.TokenizerPath = FindTokenizer(d.Path, d.Config.Vocab)
	}
	if d.Tok == nil && d.TokenizerPath != "" {
		if d.Tok, err = d.loadTokenizer(tc); err != nil {
			return nil, err
		}
	}
	if d.Tok != nil && d.Tok.Vocab() > d.Config.Vocab {
		return nil, fmt.Errorf("tokenizer %s has %d tokens but model %s has a vocabulary of %d", d.TokenizerPath, d.Tok.Vocab(), d.Path, d.Config.Vocab)
	}
	if d.Template, err = chooseTemplate(tc, d.Tok); err != nil {
		return nil, fmt.Errorf("load chat config %s: %w", filepath.Join(d.Path, "tokenizer_config.json"), err)
	}
	d.Stop = stopIDs(d, tc)
	for _, dir := range o.Drafts {
		di, err := DescribeDraft(dir, d.Config)
		if err != nil {
			return nil, err
		}
		d.Drafts = append(d.Drafts, di)
	}
	return d, nil
}

// readFolder reads a Hugging Face folder's config.json and generation_config.json, returning its
// tokenizer_config.json for the tokenizer and template to share.
func (d *Description) readFolder() (*hf.TokenizerConfig, error) {
	hc, err := hf.LoadConfig(d.Path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, hybridConfigError(d.Path, err))
	}
	// Qwen3 and Llama share one loader; a family with its own (Qwen3.5's hybrid) is chosen here
	// by architecture, so Load never has to look at config.json again.
	if isHybrid(hc) {
		if err := d.readHybrid(hc); err != nil {
			return nil, err
		}
	} else if d.Config, err = transformer.HFConfig(hc); err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, err)
	}
	d.hf, d.Format, d.Family, d.DType = hc, FormatSafetensors, hc.ModelType, dtypeLabel(hc.TorchDtype)
	d.Size = weightBytes(d.Path)
	if d.Pooling, err = readPooling(d.Path); err != nil {
		return nil, err
	}
	if d.Generation, err = hf.LoadGenerationConfig(d.Path); err != nil {
		return nil, err
	}
	return hf.LoadTokenizerConfig(d.Path)
}

// readCheckpoint reads a llama2.c checkpoint's header.
func (d *Description) readCheckpoint(size int64) error {
	lc, err := llama2c.ReadConfig(d.Path)
	if err != nil {
		return fmt.Errorf("load %s: %w", d.Path, err)
	}
	if d.Config, err = transformer.Llama2CConfig(lc); err != nil {
		return fmt.Errorf("load %s: %w", d.Path, err)
	}
	d.Format, d.DType, d.Size = FormatLlama2C, dtypeLabel(""), size
	return nil
}

func describeSynthetic(o Options) (*Description, error) {
	var hybrid *qwen35.Config
	cfg, err := transformer.SyntheticConfig(o.Synthetic)
	if err != nil {
		qc, qerr := qwen35.SyntheticConfig(o.Synthetic)
		if qerr != nil {
			return nil, fmt.Errorf("%w; %w", err, qerr)
		}
		cfg, hybrid = qc.Config, &qc
	}
	// Synthetic models are driven by token ids only: no tokenizer, no template, no stop ids.
	d := &Description{
		Ref: o.Synthetic, Name: "synthetic-" + o.Synthetic, Format: FormatSynthetic, Config: cfg,
		Family: family(cfg.Arch, ""), DType: "BF16", Context: cfg.MaxSeq,
		Generation: &hf.GenerationConfig{BOSTokenID: -1}, seed: o.Seed, hybrid: hybrid,
	}
	d.Parameters = d.paramCount()
	for _, dir := range o.Drafts {
		di, err := DescribeDraft(dir, d.Config)
		if err != nil {
			return nil, err
		}
		d.Drafts = append(d.Drafts, di)
	}
	return d, nil
}

// loadTokenizer reads the tokenizer; one inside the model folder takes the special-token facts of
// the folder's configs as read for this description, instead of reading them again.
func (d *Description) loadTokenizer(tc *hf.TokenizerConfig) (tokenizer.Tokenizer, error) {
	if d.hf != nil && d.TokenizerPath == d.Path {
		return tokenizer.LoadWith(d.TokenizerPath, tokenizer.SpecialsFrom(tc, d.Generation))
	}
	return tokenizer.Load(d.TokenizerPath)
}

// stopIDs gathers the ids that end generation, each once, sorted, inside the vocabulary.
func stopIDs(d *Description, tc *hf.TokenizerConfig) []int {
	vocab := d.Config.Vocab
	var stop []int
	add := func(ids ...int) {
		for _, id := range ids {
			if id >= 0 && id < vocab && !slices.Contains(stop, id) {
				stop = append(stop, id)
			}
		}
	}
	add(d.Config.EOS...)
	add(d.Generation.EOSTokenIDs...)
	if tok := d.Tok; tok != nil {
		add(tok.EOS()...)
		if _, spm := tok.(*tokenizer.Llama2c); d.Config.Arch == transformer.ArchLlama2C || (d.Format == FormatGGUF && spm) {
			// llama2.c models are trained on stories each preceded by BOS and followed by
			// nothing, so they end a story by predicting BOS; run.c stops there too. A GGUF of one
			// has the llama2.c vocabulary, and other SentencePiece models predict BOS only where a
			// document would end.
			add(tok.BOS())
		}
		if tc.EOSToken != "" {
			if id, ok := tok.TokenID(tc.EOSToken); ok {
				add(id)
			}
		}
		if d.Template.Kind == TemplateModel {
			// The end-of-turn token of ChatML templates ends a reply even where the folder's
			// eos lists forget it.
			if id, ok := tok.TokenID("<|im_end|>"); ok {
				add(id)
			}
		}
	}
	slices.Sort(stop)
	return stop
}

// DescribeDraft reads a DFlash or DFlash2 draft's config.json (told apart by it), from its folder
// or from a draft GGUF (dflash.GGUFArch), and checks that the draft fits target, as loading it
// would, without its weights.
func DescribeDraft(dir string, target model.Config) (DraftInfo, error) {
	hc, err := dflash.LoadConfig(dir)
	if err != nil {
		return DraftInfo{}, fmt.Errorf("draft %s: %w", dir, err)
	}
	name := filepath.Base(strings.TrimSuffix(dir, "/"))
	if dflash.IsFile(dir) {
		name = strings.TrimSuffix(name, filepath.Ext(name))
	}
	di := DraftInfo{Dir: dir, Name: name}
	if dflash2.Detect(hc) {
		c, err := dflash2.FitConfig(hc, target)
		if err != nil {
			return DraftInfo{}, fmt.Errorf("draft %s: config.json: %w", dir, err)
		}
		di.Arch, di.BlockSize, di.Layers, di.tensors = dflash2.Arch, c.BlockSize, c.Layers, draftTensors(c.Tensors())
		di.Heads, di.KVHeads, di.HeadDim = c.Heads, c.KVHeads, c.HeadDim
		return di, nil
	}
	c, err := dflash.FitConfig(hc, target)
	if err != nil {
		return DraftInfo{}, fmt.Errorf("draft %s: config.json: %w", dir, err)
	}
	di.Arch, di.BlockSize, di.Layers, di.tensors = dflash.Arch, c.BlockSize, c.Layers, draftTensors(c.Tensors())
	di.Heads, di.KVHeads, di.HeadDim = c.Heads, c.KVHeads, c.HeadDim
	return di, nil
}

func draftTensors(ts []dflash.TensorShape) []TensorShape {
	out := make([]TensorShape, len(ts))
	for i, t := range ts {
		out[i] = TensorShape{t.Name, t.Shape}
	}
	return out
}

// family names a model family as ollama lists it: config.json's model_type when it has one, else
// the architecture's.
func family(arch, modelType string) string {
	switch {
	case strings.HasPrefix(arch, "Qwen3_5"):
		return FamilyQwen35
	case modelType != "":
		return modelType
	case arch == transformer.ArchLlama2C || strings.HasPrefix(arch, "Llama"):
		return "llama"
	case strings.HasPrefix(arch, "Qwen3"):
		return "qwen3"
	}
	return strings.ToLower(arch)
}

// dtypeLabel maps config.json's torch_dtype to the label listings show; transformers' default
// (absent) is float32, and llama2.c checkpoints are float32.
func dtypeLabel(torchDtype string) string {
	switch torchDtype {
	case "bfloat16":
		return "BF16"
	case "float16":
		return "F16"
	case "float32", "":
		return "F32"
	}
	return strings.ToUpper(torchDtype)
}

// CacheDType is the dtype the target's products run in when it is loaded as stored, as far as
// the key/value cache's kind (nn.CacheBF16For) depends on it: F32 for F32 and F16 weights (F16
// widens at load), BF16 for bf16 and quantized ones. Config.DType cannot say it: a folder's
// tensors decide it only when loaded.
func (d *Description) CacheDType() kernel.DType {
	switch d.DType {
	case "F32", "F16", "":
		return kernel.F32
	}
	return kernel.BF16
}

// KVAttention is the attention shape whose cache a dense target makes when loaded as stored
// (nn.Attention.NewKV, KVBytes): bf16 where nn.CacheBF16For(CacheDType) says so under the
// process's --kv-cache kind.
func (d *Description) KVAttention() nn.Attention {
	c := d.Config
	a := nn.NewAttention(c.Heads, c.KVHeads, c.HeadDim)
	a.BF16Cache = nn.CacheBF16For(d.CacheDType())
	return a
}

// weightBytes sums the safetensors files of a model folder: the weights on disk.
func weightBytes(dir string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var n int64
	for _, p := range m {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// ParamCount counts the parameters of a Llama/Qwen3-shaped decoder: embeddings, per layer the
// attention and gated MLP projections and two norms (Qwen3's small q/k norms are left out), the
// final norm and an untied head.
func ParamCount(c model.Config) int64 {
	headDim := c.HeadDim
	if headDim == 0 && c.Heads > 0 {
		headDim = c.Hidden / c.Heads
	}
	kv := c.KVHeads
	if kv == 0 {
		kv = c.Heads
	}
	h, v := int64(c.Hidden), int64(c.Vocab)
	q, k := int64(c.Heads*headDim), int64(kv*headDim)
	layer := h*q + 2*h*k + q*h + 3*h*int64(c.Intermediate) + 2*h
	n := v*h + int64(c.Layers)*layer + h
	if !c.TiedEmbeddings {
		n += v * h
	}
	return n
}

// ParameterSize prints a parameter count as ollama lists it: "260K", "596M", "1.7B".
func ParameterSize(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.1fB", f/1e9)
	case f >= 1e8:
		return fmt.Sprintf("%.0fM", f/1e6)
	case f >= 1e6:
		return fmt.Sprintf("%.1fM", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.0fK", f/1e3)
	}
	return fmt.Sprintf("%d", n)
}
