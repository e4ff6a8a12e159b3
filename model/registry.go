package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Loader opens a target from a path: a Hugging Face folder or a single checkpoint file.
type Loader func(path string) (Target, error)

var (
	registryMu sync.RWMutex
	loaders    = map[string]Loader{}
)

// Register makes a loader available to Load under an architecture name: an entry of config.json's
// "architectures", or "llama2c" for llama2.c checkpoint files. Family packages call it from init;
// registering a name twice is a programming error and panics.
func Register(arch string, l Loader) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := loaders[arch]; dup {
		panic("model: loader registered twice for " + arch)
	}
	loaders[arch] = l
}

// Registered lists the architecture names Load can open, sorted.
func Registered() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return keys()
}

// Load opens the model at path. A folder (or its config.json) is dispatched on the first entry of
// "architectures" that has a loader; any other file is taken as a llama2.c checkpoint.
func Load(path string) (Target, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if !st.IsDir() && filepath.Base(path) == "config.json" {
		path, st = filepath.Dir(path), nil
	}
	if st != nil && !st.IsDir() {
		l, err := lookup("llama2c")
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", path, err)
		}
		return l(path)
	}
	data, err := os.ReadFile(filepath.Join(path, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	var head struct {
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("load %s: config.json: %w", path, err)
	}
	for _, a := range head.Architectures {
		if l, err := lookup(a); err == nil {
			return l(path)
		}
	}
	return nil, fmt.Errorf("load %s: no loader for architectures %v (registered: %v)", path, head.Architectures, Registered())
}

func lookup(arch string) (Loader, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	l, ok := loaders[arch]
	if !ok {
		return nil, fmt.Errorf("no loader registered for %q (registered: %v)", arch, keys())
	}
	return l, nil
}

// keys lists registered names; the caller holds registryMu.
func keys() []string {
	out := make([]string, 0, len(loaders))
	for a := range loaders {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}
