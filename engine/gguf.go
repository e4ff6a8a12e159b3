package engine

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
)

// FormatGGUF is a single GGUF file: shape, tokenizer, chat template and weights all inside it.
const FormatGGUF = "gguf"

// isGGUF says whether a model file is a GGUF: named .gguf, as llama.cpp users name them, or
// starting with the magic "GGUF", as ollama's content-addressed blobs (sha256-...) do. No
// llama2.c checkpoint starts so: read as its header's dim, the magic is over a billion.
func isGGUF(path string) bool {
	if strings.EqualFold(filepath.Ext(path), ".gguf") {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "GGUF"
}

// FileType is llama.cpp's llama_ftype, stored as general.file_type: the file's predominant
// tensor type, which is what listings show as its quantization.
type FileType uint32

// The file types dflash writes or labels (llama.cpp's numbering; 4-6 and others were removed
// or are types dflash does not run, labelled by tensor type instead).
const (
	FileTypeF32   FileType = 0
	FileTypeF16   FileType = 1
	FileTypeQ4_0  FileType = 2
	FileTypeQ8_0  FileType = 7
	FileTypeQ4_KS FileType = 14
	FileTypeQ4_KM FileType = 15
	FileTypeQ5_KS FileType = 16
	FileTypeQ5_KM FileType = 17
	FileTypeQ6_K  FileType = 18
	FileTypeBF16  FileType = 32
)

var fileTypeLabels = map[FileType]string{
	FileTypeF32: "F32", FileTypeF16: "F16", FileTypeQ4_0: "Q4_0", 3: "Q4_1", FileTypeQ8_0: "Q8_0",
	8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L",
	FileTypeQ4_KS: "Q4_K_S", FileTypeQ4_KM: "Q4_K_M", FileTypeQ5_KS: "Q5_K_S", FileTypeQ5_KM: "Q5_K_M",
	FileTypeQ6_K: "Q6_K", FileTypeBF16: "BF16",
}

// String is the label ollama lists for the file type ("Q4_K_M"), or "FT<n>" for an unknown one.
func (t FileType) String() string {
	if s, ok := fileTypeLabels[t]; ok {
		return s
	}
	return fmt.Sprintf("FT%d", uint32(t))
}

// ggufDType labels a file's quantization: general.file_type when present, else the type that
// holds the most elements among its matrices.
func ggufDType(f *gguf.File) string {
	if ft, err := f.Metadata.Uint("general.file_type"); err == nil && ft <= 1<<31 {
		return FileType(ft).String()
	}
	counts := map[quant.Type]uint64{}
	for _, t := range f.Tensors() {
		if len(t.Shape) == 2 {
			counts[t.Type] += t.Elements()
		}
	}
	best, n := quant.F32, uint64(0)
	for _, typ := range slices.Sorted(func(yield func(quant.Type) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		if counts[typ] > n {
			best, n = typ, counts[typ]
		}
	}
	return best.String()
}

// readGGUF reads a GGUF file's metadata and tensor infos (not its tensor data): the shape, the
// tokenizer from tokenizer.ggml.*, the chat template. It returns the template and special-token
// spellings as a tokenizer config, so the template and stop ids are chosen as for a folder.
func (d *Description) readGGUF(size int64) (*hf.TokenizerConfig, error) {
	f, err := gguf.Open(d.Path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, err)
	}
	defer f.Close()
	if a, _ := f.Architecture(); a == dflash.GGUFArch {
		return nil, fmt.Errorf("load %s: a DFlash draft GGUF, not a model: give it as --draft with its target", d.Path)
	}
	if d.Config, err = transformer.GGUFConfig(f); err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, err)
	}
	d.Format, d.DType, d.Size = FormatGGUF, ggufDType(f), size
	d.TensorTypes = map[string]int{}
	for _, t := range f.Tensors() {
		d.TensorTypes[t.Type.String()]++
	}
	d.Family, _ = f.Architecture()
	tc := &hf.TokenizerConfig{}
	if !f.Metadata.Has("tokenizer.ggml.model") {
		return tc, nil // a bare model: token ids only, unless --tokenizer names one
	}
	g, err := f.Tokenizer()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, err)
	}
	if d.Tok, err = tokenizer.FromGGUF(g); err != nil {
		return nil, fmt.Errorf("load %s: %w", d.Path, err)
	}
	d.TokenizerPath = d.Path
	tc.Present, tc.ChatTemplate = true, g.ChatTemplate
	if g.BOS >= 0 {
		tc.BOSToken = g.Tokens[g.BOS]
	}
	if g.EOS >= 0 {
		tc.EOSToken = g.Tokens[g.EOS]
	}
	tc.AddBOSToken = g.AddBOS
	return tc, nil
}

// validateGGUF checks the tensor infos Load reads, as Validate does for safetensors headers:
// presence, shape, and a type dflash runs, naming the first tensor at fault.
func (d *Description) validateGGUF() error {
	f, err := gguf.Open(d.Path)
	if err != nil {
		return fmt.Errorf("load %s: %w", d.Path, err)
	}
	defer f.Close()
	var first string
	bad := 0
	for _, w := range transformer.GGUFTensors(d.Config) {
		in, ok := f.Tensor(w.Name)
		var msg string
		switch {
		case !ok:
			msg = fmt.Sprintf("tensor %s is missing (want shape %v)", w.Name, w.Shape)
		case !slices.Equal(in.Shape, w.Shape):
			msg = fmt.Sprintf("tensor %s has shape %v, want %v", w.Name, in.Shape, w.Shape)
		case in.Type.Check() != nil:
			msg = fmt.Sprintf("tensor %s: %v", w.Name, in.Type.Check())
		default:
			continue
		}
		if bad == 0 {
			first = msg
		}
		bad++
	}
	switch bad {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("model %s: %s", d.Path, first)
	}
	return fmt.Errorf("model %s: %s (and %d more tensors wrong)", d.Path, first, bad-1)
}
