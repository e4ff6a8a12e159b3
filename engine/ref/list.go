package ref

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Entry is one model a store holds.
type Entry struct {
	Name string // the reference that resolves it: Org/Name, or an ollama short name
	Kind string // KindOllama or KindHF
	Size int64  // bytes on disk: the blobs it uses
	// Resolved is its resolution; Err says why it does not resolve (a broken store entry is
	// still listed, so the user sees it).
	Resolved *Resolved
	Err      error
}

// List finds every model in both stores: each hub cache repository at its main ref (or, when it
// has none, its only snapshot's commit) and each ollama manifest. Folders that are not model
// repositories (datasets--, spaces--) are skipped.
func (e Env) List() []Entry {
	var out []Entry
	dirs, _ := os.ReadDir(e.HFCache)
	for _, d := range dirs {
		repo, ok := strings.CutPrefix(d.Name(), "models--")
		if !ok || !d.IsDir() {
			continue
		}
		repo = strings.Replace(repo, "--", "/", 1)
		name := repo
		rd := filepath.Join(e.HFCache, d.Name())
		if _, err := os.Stat(filepath.Join(rd, "refs", "main")); err != nil {
			if snaps, _ := os.ReadDir(filepath.Join(rd, "snapshots")); len(snaps) == 1 {
				name += "@" + snaps[0].Name()
			}
		}
		r, err := e.Resolve(name)
		out = append(out, Entry{Name: name, Kind: KindHF, Resolved: r, Err: err, Size: treeSize(r)})
	}
	mroot := filepath.Join(e.OllamaModels, "manifests")
	filepath.WalkDir(mroot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(mroot, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 4 {
			return nil
		}
		n := OllamaName{Host: parts[0], Namespace: parts[1], Model: parts[2], Tag: parts[3]}
		r, err := e.resolveOllama(n.Short(), n)
		ent := Entry{Name: n.Short(), Kind: KindOllama, Resolved: r, Err: err}
		if r != nil {
			ent.Size = r.Ollama.Size
		}
		out = append(out, ent)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// treeSize adds up the files a snapshot's links reach.
func treeSize(r *Resolved) int64 {
	if r == nil {
		return 0
	}
	var n int64
	filepath.WalkDir(r.Path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if st, err := os.Stat(p); err == nil {
				n += st.Size()
			}
		}
		return nil
	})
	return n
}

// DraftCandidates are the hub cache repositories named as z-lab names a target's drafts,
// "<target>-DFlash*" (case-insensitive, any organisation), where target is the target's
// repository name without its organisation ("Qwen3-4B" for Qwen/Qwen3-4B). Whether one fits is
// the engine's to check.
func (e Env) DraftCandidates(target string) []Entry {
	target = target[strings.LastIndex(target, "/")+1:]
	if target == "" {
		return nil
	}
	var out []Entry
	for _, ent := range e.List() {
		_, name, _ := strings.Cut(ent.Name, "/")
		if ent.Kind == KindHF && strings.HasPrefix(strings.ToLower(name), strings.ToLower(target)+"-dflash") {
			out = append(out, ent)
		}
	}
	return out
}
