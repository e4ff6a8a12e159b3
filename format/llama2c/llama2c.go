// Package llama2c owns reading llama2.c checkpoints: the legacy header (version 0) and the
// version-1 export ("ak42" magic, 256-byte header), both fp32. It validates the header and the file
// length before reading weights and hands them out as float32 slices in llama2.c's layouts
// (row-major [out][in] matrices, per layer).
//
// It never panics on a file it was given and never guesses: a header that does not describe the
// file's exact length is an error saying how many bytes were expected and found. The int8 export
// (version 2) is not supported.
package llama2c

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"unsafe"
)

// Magic is the first uint32 of a version-1+ export: "ak42" read little-endian.
const Magic = 0x616b3432

const (
	legacyHeaderBytes = 7 * 4
	v1HeaderBytes     = 256
)

// Config is the model shape from the header.
type Config struct {
	Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, SeqLen int
	SharedClassifier                                      bool // classifier tied to the token embedding
	Version                                               int  // 0 for the legacy header, 1 for "ak42" v1
}

// HeadSize is Dim / Heads.
func (c Config) HeadSize() int { return c.Dim / c.Heads }

// KVDim is the width of the key and value projections: KVHeads * HeadSize.
func (c Config) KVDim() int { return c.KVHeads * c.HeadSize() }

// Checkpoint holds the weights. Matrices are row-major [out][in]; per-layer slices are indexed by
// layer. All slices share one backing array read from the file.
type Checkpoint struct {
	Config         Config
	TokenEmbedding []float32   // [Vocab*Dim]
	RMSAtt         [][]float32 // [L][Dim]
	WQ             [][]float32 // [L][Dim*Dim]
	WK, WV         [][]float32 // [L][KVDim*Dim]
	WO             [][]float32 // [L][Dim*Dim]
	RMSFFN         [][]float32 // [L][Dim]
	W1, W3         [][]float32 // [L][HiddenDim*Dim]
	W2             [][]float32 // [L][Dim*HiddenDim]
	RMSFinal       []float32   // [Dim]
	WCls           []float32   // [Vocab*Dim]; the same slice as TokenEmbedding when shared
}

// Load reads a legacy or version-1 checkpoint.
func Load(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama2c: %w", err)
	}
	defer f.Close()
	cfg, hdr, lay, err := readHeader(f)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", path, err)
	}
	if lay.total > math.MaxInt/4 {
		return nil, fmt.Errorf("llama2c %s: %d weights do not fit in memory on this platform", path, lay.total)
	}
	w := make([]float32, int(lay.total))
	if len(w) > 0 {
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))
		if _, err := f.ReadAt(buf, int64(hdr)); err != nil {
			return nil, fmt.Errorf("llama2c %s: reading weights: %w", path, err)
		}
		if !hostLittle {
			for i := range w {
				w[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		}
	}
	return assemble(cfg, w), nil
}

// readHeader parses the header of f and checks that it describes a file of exactly f's length,
// returning the header's byte length and the weights' layout.
func readHeader(f *os.File) (Config, int, weightLayout, error) {
	st, err := f.Stat()
	if err != nil {
		return Config{}, 0, weightLayout{}, err
	}
	size := st.Size()
	var head [v1HeaderBytes]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return Config{}, 0, weightLayout{}, err
	}
	cfg, hdr, err := parseHeader(head[:n])
	if err != nil {
		return Config{}, 0, weightLayout{}, err
	}
	lay, err := layout(cfg)
	if err != nil {
		return Config{}, 0, weightLayout{}, err
	}
	want := int64(hdr) + 4*lay.total
	if size != want {
		what := "truncated"
		if size > want {
			what = "trailing data"
		}
		return Config{}, 0, weightLayout{}, fmt.Errorf("%s: the header (%+v) implies %d bytes, file has %d", what, cfg, want, size)
	}
	return cfg, hdr, lay, nil
}

var hostLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// parseHeader decodes and validates the header, returning the byte length of the header.
func parseHeader(b []byte) (Config, int, error) {
	if len(b) < 4 {
		return Config{}, 0, fmt.Errorf("file is %d bytes, too short for a header (truncated)", len(b))
	}
	i32 := func(off int) int { return int(int32(binary.LittleEndian.Uint32(b[off:]))) }
	var c Config
	hdr := legacyHeaderBytes
	var params int
	if binary.LittleEndian.Uint32(b) == Magic {
		if len(b) < v1HeaderBytes {
			return Config{}, 0, fmt.Errorf("truncated: version header needs %d bytes, file has %d", v1HeaderBytes, len(b))
		}
		c.Version = i32(4)
		if c.Version != 1 {
			return Config{}, 0, fmt.Errorf("export version %d is not supported (only fp32 version 1 and the legacy format)", c.Version)
		}
		params = 8
		hdr = v1HeaderBytes
		switch b[36] {
		case 0:
		case 1:
			c.SharedClassifier = true
		default:
			return Config{}, 0, fmt.Errorf("shared_classifier flag %d is neither 0 nor 1", b[36])
		}
	} else if len(b) < legacyHeaderBytes {
		return Config{}, 0, fmt.Errorf("truncated: legacy header needs %d bytes, file has %d", legacyHeaderBytes, len(b))
	}
	c.Dim, c.HiddenDim, c.Layers = i32(params), i32(params+4), i32(params+8)
	c.Heads, c.KVHeads, c.Vocab, c.SeqLen = i32(params+12), i32(params+16), i32(params+20), i32(params+24)
	if c.Version == 0 {
		// The legacy format signals an untied classifier with a negative vocab_size.
		c.SharedClassifier = c.Vocab > 0
		if c.Vocab < 0 {
			c.Vocab = -c.Vocab
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"hidden_dim", c.HiddenDim}, {"n_layers", c.Layers}, {"n_heads", c.Heads},
		{"n_kv_heads", c.KVHeads}, {"vocab_size", c.Vocab}, {"seq_len", c.SeqLen}} {
		if f.v <= 0 {
			return Config{}, 0, fmt.Errorf("header %s %d must be positive (not a llama2.c checkpoint?)", f.name, f.v)
		}
	}
	if c.Dim%c.Heads != 0 {
		return Config{}, 0, fmt.Errorf("header n_heads %d does not divide dim %d", c.Heads, c.Dim)
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, 0, fmt.Errorf("header n_kv_heads %d does not divide n_heads %d", c.KVHeads, c.Heads)
	}
	if c.HeadSize()%2 != 0 {
		return Config{}, 0, fmt.Errorf("header head size %d (dim %d / n_heads %d) must be even for RoPE", c.HeadSize(), c.Dim, c.Heads)
	}
	return c, hdr, nil
}

// span is a run of float32 weights inside the file's weight region.
type span struct{ off, n int64 }

type weightLayout struct {
	tok, rmsAtt, wq, wk, wv, wo, rmsFFN, w1, w2, w3, rmsFinal, cls span // per-layer spans cover all layers
	total                                                          int64
}

// layout places every array in file order; sizes are computed with overflow checks because the
// header values come from the file.
func layout(c Config) (weightLayout, error) {
	var l weightLayout
	var off int64
	overflow := false
	mul := func(xs ...int) int64 {
		p := int64(1)
		for _, x := range xs {
			// headroom of 16 keeps the later sums and the x4 byte count from overflowing
			if p > math.MaxInt64/16/int64(x) {
				overflow = true
				return 0
			}
			p *= int64(x)
		}
		return p
	}
	put := func(n int64) span {
		s := span{off, n}
		if off > math.MaxInt64/8-n {
			overflow = true
		}
		off += n
		return s
	}
	L, d, h, kv, v := c.Layers, c.Dim, c.HiddenDim, c.KVDim(), c.Vocab
	switch c.Version {
	case 0:
		l.tok = put(mul(v, d))
		l.rmsAtt = put(mul(L, d))
		l.wq = put(mul(L, d, d))
		l.wk = put(mul(L, kv, d))
		l.wv = put(mul(L, kv, d))
		l.wo = put(mul(L, d, d))
		l.rmsFFN = put(mul(L, d))
		l.w1 = put(mul(L, h, d))
		l.w2 = put(mul(L, d, h))
		l.w3 = put(mul(L, h, d))
		l.rmsFinal = put(int64(d))
		put(mul(2, c.SeqLen, c.HeadSize()/2)) // unused freq_cis_real and freq_cis_imag
	case 1:
		// export.py version1_export: all norms first, then the embedding and the matrices.
		l.rmsAtt = put(mul(L, d))
		l.rmsFFN = put(mul(L, d))
		l.rmsFinal = put(int64(d))
		l.tok = put(mul(v, d))
		l.wq = put(mul(L, d, d))
		l.wk = put(mul(L, kv, d))
		l.wv = put(mul(L, kv, d))
		l.wo = put(mul(L, d, d))
		l.w1 = put(mul(L, h, d))
		l.w2 = put(mul(L, d, h))
		l.w3 = put(mul(L, h, d))
	}
	if c.SharedClassifier {
		l.cls = l.tok
	} else {
		l.cls = put(mul(v, d))
	}
	l.total = off
	if overflow {
		return l, fmt.Errorf("header %+v describes an impossibly large model", c)
	}
	return l, nil
}

func assemble(c Config, w []float32) *Checkpoint {
	l, _ := layout(c) // validated by the caller
	flat := func(s span) []float32 { return w[s.off : s.off+s.n : s.off+s.n] }
	perLayer := func(s span) [][]float32 {
		out := make([][]float32, c.Layers)
		step := s.n / int64(c.Layers)
		for i := range out {
			a := s.off + int64(i)*step
			out[i] = w[a : a+step : a+step]
		}
		return out
	}
	return &Checkpoint{
		Config:         c,
		TokenEmbedding: flat(l.tok),
		RMSAtt:         perLayer(l.rmsAtt),
		WQ:             perLayer(l.wq),
		WK:             perLayer(l.wk),
		WV:             perLayer(l.wv),
		WO:             perLayer(l.wo),
		RMSFFN:         perLayer(l.rmsFFN),
		W1:             perLayer(l.w1),
		W2:             perLayer(l.w2),
		W3:             perLayer(l.w3),
		RMSFinal:       flat(l.rmsFinal),
		WCls:           flat(l.cls),
	}
}

// ReadConfig reads only the header of a checkpoint and checks it against the file's length, so a
// caller can describe a model (its shape, context, parameter count) without reading its weights.
// It accepts exactly the files Load accepts.
func ReadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("llama2c: %w", err)
	}
	defer f.Close()
	cfg, _, _, err := readHeader(f)
	if err != nil {
		return Config{}, fmt.Errorf("llama2c %s: %w", path, err)
	}
	return cfg, nil
}
