package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dflash/dflash/runner"
)

// readPooling finds the pooling a sentence-transformers folder names: modules.json lists the
// modules, the one of type sentence_transformers.models.Pooling has its config.json in its path
// (1_Pooling/ by convention) with one pooling_mode_* key true. A folder without modules.json is
// an ordinary language model: mean pooling, dflash's default (Description.Pooling). A pooling
// dflash does not compute (max, weighted mean) is an error naming it, never a silent mean.
func readPooling(dir string) (runner.Pooling, error) {
	path := filepath.Join(dir, "modules.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return runner.PoolMean, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", path, err)
	}
	var modules []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &modules); err != nil {
		return 0, fmt.Errorf("load %s: %w", path, err)
	}
	for _, m := range modules {
		if !strings.HasSuffix(m.Type, ".Pooling") {
			continue
		}
		path = filepath.Join(dir, filepath.FromSlash(m.Path), "config.json")
		if b, err = os.ReadFile(path); err != nil {
			return 0, fmt.Errorf("load %s: %w", path, err)
		}
		var modes map[string]any
		if err := json.Unmarshal(b, &modes); err != nil {
			return 0, fmt.Errorf("load %s: %w", path, err)
		}
		for key, p := range map[string]runner.Pooling{"pooling_mode_mean_tokens": runner.PoolMean,
			"pooling_mode_lasttoken": runner.PoolLast, "pooling_mode_cls_token": runner.PoolFirst} {
			if modes[key] == true {
				return p, nil
			}
		}
		for key, v := range modes {
			if strings.HasPrefix(key, "pooling_mode_") && v == true {
				return 0, fmt.Errorf("load %s: %s is not implemented (dflash pools by mean, last token or first token)", path, key)
			}
		}
		return 0, fmt.Errorf("load %s: no pooling_mode_* is true", path)
	}
	return runner.PoolMean, nil
}
