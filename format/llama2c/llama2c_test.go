package llama2c

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
)

func TestStories260K(t *testing.T) {
	p := shareddata.Path(t, "stories260K/stories260K.bin")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696" {
		t.Fatalf("stories260K.bin sha256 %s differs from the README's", got)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Dim: 64, HiddenDim: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, SeqLen: 512, SharedClassifier: true, Version: 0}
	if c.Config != want {
		t.Fatalf("config %+v, want %+v", c.Config, want)
	}
	if h, err := ReadConfig(p); err != nil || h != want {
		t.Fatalf("ReadConfig: %+v, %v; want %+v, the header Load read", h, err, want)
	}
	// Independent byte offsets of the legacy layout (floats after the 28-byte header):
	// tok 512*64=32768, rms_att 5*64=320, wq 5*64*64=20480, wk and wv 5*32*64=10240 each,
	// wo 20480, rms_ffn 320, w1/w2/w3 5*172*64=55040 each, so rms_final starts at float
	// 32768+320+20480+10240+10240+20480+320+3*55040 = 259968, byte 28+4*259968 = 1039900;
	// wk[0] starts at float 32768+320+20480 = 53568; w2[4] ends at float 259968-55040 = 204928.
	at := func(float int) float32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(raw[28+4*float:]))
	}
	checks := []struct {
		name string
		got  float32
		want float32
	}{
		{"rms_final[0]", c.RMSFinal[0], at(259968)},
		{"rms_final[63]", c.RMSFinal[63], at(259968 + 63)},
		{"tok[0]", c.TokenEmbedding[0], at(0)},
		{"rms_att[1][0]", c.RMSAtt[1][0], at(32768 + 64)},
		{"wk[0][0]", c.WK[0][0], at(53568)},
		{"wk[1][0]", c.WK[1][0], at(53568 + 2048)},
		{"w2[4] last", c.W2[4][64*172-1], at(204928 - 1)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %g, want %g", ch.name, ch.got, ch.want)
		}
	}
	// Norm weights train from 1.0 and stay positive; a misplaced layout would read matrix
	// entries (mean near 0, many negative) into them.
	for l := range 5 {
		for i, v := range c.RMSAtt[l] {
			if !(v > 0) {
				t.Fatalf("rms_att[%d][%d] = %g, expected a positive norm weight", l, i, v)
			}
		}
	}
	if &c.WCls[0] != &c.TokenEmbedding[0] || len(c.WCls) != 512*64 {
		t.Error("shared classifier is not the token embedding")
	}
	sizes := []struct {
		name string
		got  int
		want int
	}{
		{"wq", len(c.WQ[4]), 64 * 64}, {"wk", len(c.WK[2]), 32 * 64}, {"wv", len(c.WV[0]), 32 * 64},
		{"wo", len(c.WO[1]), 64 * 64}, {"w1", len(c.W1[3]), 172 * 64}, {"w3", len(c.W3[3]), 172 * 64},
		{"rms_ffn", len(c.RMSFFN[4]), 64}, {"layers", len(c.W2), 5},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("%s length %d, want %d", s.name, s.got, s.want)
		}
	}
}

// arrays lists the weight arrays in the file order of each version with their float counts.
func arrays(c Config) []struct {
	name string
	n    int
} {
	L, d, h, kv, v := c.Layers, c.Dim, c.HiddenDim, c.KVDim(), c.Vocab
	type a = struct {
		name string
		n    int
	}
	var out []a
	if c.Version == 1 {
		out = []a{{"rms_att", L * d}, {"rms_ffn", L * d}, {"rms_final", d}, {"tok", v * d},
			{"wq", L * d * d}, {"wk", L * kv * d}, {"wv", L * kv * d}, {"wo", L * d * d},
			{"w1", L * h * d}, {"w2", L * d * h}, {"w3", L * h * d}}
	} else {
		out = []a{{"tok", v * d}, {"rms_att", L * d}, {"wq", L * d * d}, {"wk", L * kv * d}, {"wv", L * kv * d},
			{"wo", L * d * d}, {"rms_ffn", L * d}, {"w1", L * h * d}, {"w2", L * d * h}, {"w3", L * h * d},
			{"rms_final", d}, {"freqs", 2 * c.SeqLen * c.HeadSize() / 2}}
	}
	if !c.SharedClassifier {
		out = append(out, a{"cls", v * d})
	}
	return out
}

// marker gives element i of array k a value that identifies both exactly (k*1e5 + i fits f32).
func marker(k, i int) float32 { return float32(k*100000 + i) }

// synth writes a checkpoint in which every array holds its own markers.
func synth(t *testing.T, c Config) (string, map[string]int) {
	t.Helper()
	var b []byte
	le := binary.LittleEndian
	if c.Version == 1 {
		b = le.AppendUint32(b, Magic)
		b = le.AppendUint32(b, 1)
	}
	vocab := c.Vocab
	if c.Version == 0 && !c.SharedClassifier {
		vocab = -vocab
	}
	for _, x := range []int{c.Dim, c.HiddenDim, c.Layers, c.Heads, c.KVHeads, vocab, c.SeqLen} {
		b = le.AppendUint32(b, uint32(int32(x)))
	}
	if c.Version == 1 {
		if c.SharedClassifier {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = append(b, make([]byte, 256-len(b))...)
	}
	index := map[string]int{}
	for k, a := range arrays(c) {
		index[a.name] = k
		for i := range a.n {
			b = le.AppendUint32(b, math.Float32bits(marker(k, i)))
		}
	}
	p := filepath.Join(t.TempDir(), "synth.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, index
}

func TestSynthetic(t *testing.T) {
	base := Config{Dim: 8, HiddenDim: 12, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 10, SeqLen: 6}
	for _, version := range []int{0, 1} {
		for _, shared := range []bool{true, false} {
			c := base
			c.Version, c.SharedClassifier = version, shared
			p, idx := synth(t, c)
			ck, err := Load(p)
			if err != nil {
				t.Fatalf("v%d shared=%v: %v", version, shared, err)
			}
			if ck.Config != c {
				t.Fatalf("v%d shared=%v: config %+v, want %+v", version, shared, ck.Config, c)
			}
			// Each per-layer slice l must start at element l*size of its array.
			perLayer := map[string][][]float32{"rms_att": ck.RMSAtt, "wq": ck.WQ, "wk": ck.WK, "wv": ck.WV,
				"wo": ck.WO, "rms_ffn": ck.RMSFFN, "w1": ck.W1, "w2": ck.W2, "w3": ck.W3}
			for name, s := range perLayer {
				for l := range s {
					n := len(s[l])
					if got, want := s[l][n-1], marker(idx[name], (l+1)*n-1); got != want {
						t.Errorf("v%d shared=%v %s[%d] last = %g, want %g", version, shared, name, l, got, want)
					}
				}
			}
			flat := map[string][]float32{"tok": ck.TokenEmbedding, "rms_final": ck.RMSFinal}
			if !shared {
				flat["cls"] = ck.WCls
			}
			for name, s := range flat {
				if s[0] != marker(idx[name], 0) || s[len(s)-1] != marker(idx[name], len(s)-1) {
					t.Errorf("v%d shared=%v %s holds %g..%g", version, shared, name, s[0], s[len(s)-1])
				}
			}
			if shared && &ck.WCls[0] != &ck.TokenEmbedding[0] {
				t.Errorf("v%d: shared classifier is not the embedding", version)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	good := Config{Dim: 8, HiddenDim: 12, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 10, SeqLen: 6, Version: 1, SharedClassifier: true}
	p, _ := synth(t, good)
	full, _ := os.ReadFile(p)
	// Size of the good v1 file: 256 + 4*(2*16 + 8 + 80 + 2*(64+32+32+64) + 3*2*96) = 256 + 4*1080 = 4576.
	if len(full) != 4576 {
		t.Fatalf("synthetic file is %d bytes, test arithmetic says 4576", len(full))
	}
	dir := t.TempDir()
	write := func(b []byte) string {
		q := filepath.Join(dir, "bad.bin")
		if err := os.WriteFile(q, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return q
	}
	patch := func(off int, v int32) []byte {
		b := append([]byte(nil), full...)
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
		return b
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"truncated header", full[:100], "truncated: version header needs 256 bytes, file has 100"},
		{"truncated weights", full[:4000], "truncated: the header"},
		{"trailing", append(append([]byte(nil), full...), 1, 2, 3, 4), "trailing data"},
		{"zero dim", patch(8, 0), "dim 0 must be positive"},
		{"negative layers", patch(16, -2), "n_layers -2 must be positive"},
		{"heads not dividing dim", patch(20, 3), "n_heads 3 does not divide dim 8"},
		{"kv heads not dividing heads", patch(24, 3), "n_kv_heads 3 does not divide n_heads 4"},
		{"version 2", patch(4, 2), "version 2 is not supported"},
		{"huge", patch(12, math.MaxInt32), "implies"},
		{"legacy short", []byte{1, 0, 0, 0, 2, 0, 0, 0}, "legacy header needs 28 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			// Describing a model reads only the header, and must refuse exactly what Load refuses:
			// a listing must never show a checkpoint that cannot load.
			if _, err := ReadConfig(write(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadConfig: error %v, want %q", err, c.want)
			}
		})
	}
	// The truncation message gives both byte counts.
	_, err := Load(write(full[:4000]))
	if err == nil || !strings.Contains(err.Error(), "implies 4576 bytes, file has 4000") {
		t.Errorf("truncation error %v lacks expected vs found sizes", err)
	}
}
