package backend

import (
	"strings"
	"sync"
	"time"

	"github.com/dflash/dflash/engine/ref"
)

// scanEvery is how long one scan of the stores answers listings: a client polling /api/tags
// costs a directory walk every few seconds at most.
const scanEvery = 5 * time.Second

// scanState remembers the last scan and the store entries that could not be served.
type scanState struct {
	mu      sync.Mutex
	at      time.Time
	refused map[string]bool // by name@commit or name: a draft, a model the engine cannot load
}

// ScanStores implements server.Scanner: every model in the hub cache and ollama's store (as
// dflash list finds them) that the engine can serve is described and listed, through Find, so
// only store names are ever looked up, never paths. Description reads configs and weight
// headers, not weights, and each model is described once: a listed one stays listed, a
// refused one is remembered until its commit changes.
func (b *Backend) ScanStores() {
	b.scan.mu.Lock()
	defer b.scan.mu.Unlock()
	if time.Since(b.scan.at) < scanEvery {
		return
	}
	env := ref.FromEnv()
	if b.stores != nil {
		env = *b.stores
	}
	if b.scan.refused == nil {
		b.scan.refused = map[string]bool{}
	}
	for _, ent := range env.List() {
		if ent.Err != nil || ent.Resolved == nil {
			continue
		}
		key := ent.Name + "@" + ent.Resolved.Commit
		listed := ent.Resolved.Name
		if !strings.Contains(listed, ":") {
			listed += ":latest"
		}
		if b.scan.refused[key] {
			continue
		}
		if _, ok := b.listed(listed); ok {
			continue
		}
		if _, ok := b.Find(ent.Name); !ok {
			b.scan.refused[key] = true
		}
	}
	b.scan.at = time.Now()
}
