package backend

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
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
