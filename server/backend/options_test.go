package backend

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
)

func TestParseModelsFile(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, text string
		want       []Spec
		err        string
	}{
		{"lines", "# models\nqwen3:0.6b /m/qwen3 /m/draft\n\n  stories\tstories260K.bin\n",
			[]Spec{{Name: "qwen3:0.6b", Path: "/m/qwen3", Draft: "/m/draft"}, {Name: "stories", Path: filepath.Join(dir, "stories260K.bin")}}, ""},
		{"one field", "stories\n", nil, ":1: want"},
		{"four fields", "a b c d\n", nil, ":1: want"},
		{"empty", "# nothing\n", nil, "no models"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ParseModelsFile(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want one containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	// New describes every model (engine.Describe), so a file that is no checkpoint, or a
	// checkpoint without the tokenizer a server needs, is refused at startup.
	file := filepath.Join(dir, "m.bin")
	os.WriteFile(file, make([]byte, 64), 0o644)
	stories := shareddata.Path(t, "stories260K/stories260K.bin")
	bare := filepath.Join(t.TempDir(), "stories260K.bin")
	if data, err := os.ReadFile(stories); err != nil || os.WriteFile(bare, data, 0o644) != nil {
		t.Fatal("copy stories260K.bin:", err)
	}
	cases := []struct {
		name string
		o    Options
		err  string
	}{
		{"none", Options{}, "no models"},
		{"no path", Options{Models: []Spec{{Name: "a"}}}, "no path"},
		{"missing", Options{Models: []Spec{{Path: filepath.Join(dir, "absent")}}}, "absent"},
		{"not a checkpoint", Options{Models: []Spec{{Path: file}}}, "dim 0 must be positive"},
		{"no tokenizer", Options{Models: []Spec{{Path: bare}}}, "no tokenizer"},
		{"duplicate", Options{Models: []Spec{{Path: stories}, {Name: "stories260K", Path: stories}}}, "configured twice"},
		{"draft not a folder", Options{Models: []Spec{{Path: stories, Draft: file}}}, "not a folder"},
	}
	for _, c := range cases {
		if _, err := New(c.o); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.err)
		}
	}
}

// TestAutoParallel: the default --parallel is what half the available memory holds of a
// sequence's caches, between 1 and MaxAutoParallel, and 1 when the memory is unknown.
func TestAutoParallel(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		seq, avail int64
		want       int
	}{
		{gib, 0, 1},       // unknown memory
		{gib, 3 * gib, 1}, // 1.5 GiB usable: one sequence
		{gib, 6 * gib, 3}, // three
		{gib, 64 * gib, MaxAutoParallel},
		{gib, gib, 1}, // not even one fits: still one, the model must serve
	} {
		if got := AutoParallel(c.seq, c.avail); got != c.want {
			t.Errorf("AutoParallel(%d, %d) = %d, want %d", c.seq, c.avail, got, c.want)
		}
	}
}

// TestSequenceBytes: Qwen3-0.6B's shape (28 layers, 8 key/value heads of 128) at 4096 positions
// holds keys and values of 28 x 4096 x 1024 elements each, no head-major copies at heads of 128:
// bf16 for its bf16 weights, f32 under --kv-cache f32; a draft of 5 layers adds 5 f32 layers.
func TestSequenceBytes(t *testing.T) {
	cfg, err := transformer.SyntheticConfig("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	d := &engine.Description{Config: cfg, DType: "BF16"}
	if got, want := SequenceBytes(d, 4096), int64(28*4096*1024*2*2); got != want {
		t.Errorf("target alone: %d bytes, want %d", got, want)
	}
	d.Drafts = []engine.DraftInfo{{Layers: 5}}
	if got, want := SequenceBytes(d, 4096), int64(28*4096*1024*2*2+5*4096*1024*4*2); got != want {
		t.Errorf("with a 5-layer draft: %d bytes, want %d", got, want)
	}
	defer nn.SetCacheKind(nn.SetCacheKind(nn.CacheF32))
	if got, want := SequenceBytes(d, 4096), int64(33*4096*1024*4*2); got != want {
		t.Errorf("f32 cache with a 5-layer draft: %d bytes, want %d", got, want)
	}
}
