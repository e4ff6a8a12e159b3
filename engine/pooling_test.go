package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/runner"
)

// TestReadPooling: a sentence-transformers folder's Pooling module decides; no modules.json means
// mean pooling; a pooling dflash cannot compute, or a broken file, is an error naming the file.
func TestReadPooling(t *testing.T) {
	write := func(t *testing.T, dir, name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modules := `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
		{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
		{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`
	for _, c := range []struct {
		name, modules, pooling string
		want                   runner.Pooling
		err                    string
	}{
		{name: "plain language model", want: runner.PoolMean},
		{name: "last token (Qwen3-Embedding)", modules: modules, pooling: `{"word_embedding_dimension":1024,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":false,"pooling_mode_lasttoken":true}`, want: runner.PoolLast},
		{name: "mean", modules: modules, pooling: `{"pooling_mode_mean_tokens":true}`, want: runner.PoolMean},
		{name: "cls", modules: modules, pooling: `{"pooling_mode_cls_token":true}`, want: runner.PoolFirst},
		{name: "max", modules: modules, pooling: `{"pooling_mode_max_tokens":true}`, err: "pooling_mode_max_tokens is not implemented"},
		{name: "broken modules", modules: `[{`, err: "modules.json"},
		{name: "missing pooling config", modules: modules, err: "1_Pooling"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.modules != "" {
				write(t, dir, "modules.json", c.modules)
			}
			if c.pooling != "" {
				write(t, dir, "1_Pooling/config.json", c.pooling)
			}
			got, err := readPooling(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("pooling %v (%v), want %v", got, err, c.want)
			}
		})
	}
}
