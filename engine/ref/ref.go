// Package ref turns the name a user types for a model or a draft into files on disk: a path
// (a Hugging Face folder, a .gguf file, a llama2.c .bin), an ollama name resolved in ollama's
// store, or a Hugging Face id resolved in the hub cache. It also fills that cache (Pull).
//
// Resolution happens before engine.Describe and yields only paths plus what a store carries
// beside the weights (ollama's template, system prompt and parameters); it never reads a
// config or a weight, which is the engine's job. It reads only the two stores' own layouts, so
// what ollama, transformers or vLLM put there is used in place, never copied.
package ref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Kinds of reference.
const (
	KindPath   = "path"
	KindOllama = "ollama"
	KindHF     = "huggingface"
)

// Resolved is a reference turned into local files.
type Resolved struct {
	Ref  string // as given
	Kind string // KindPath, KindOllama or KindHF
	// Path is the folder or file the engine opens: the folder itself, an ollama model blob
	// (a GGUF file), a hub cache snapshot folder.
	Path string
	// Name is the name a server lists it under by default: the folder or file name for a path,
	// "name:tag" for an ollama model, "Org/Name" for a hub id.
	Name string
	// Ollama is set for an ollama reference: the layers that sit beside the model blob.
	Ollama *OllamaModel
	// Repo, Revision and Commit are set for a hub reference: the commit is the snapshot's.
	Repo, Revision, Commit string
}

// Env is where the stores are. The zero value is filled from the process environment by
// FromEnv; tests set the roots directly.
type Env struct {
	OllamaModels string // ollama's models folder (manifests/, blobs/)
	HFCache      string // the hub cache (models--Org--Name/)
}

// FromEnv finds the stores as ollama and huggingface_hub do: OLLAMA_MODELS, else
// ~/.ollama/models; HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
func FromEnv() Env {
	home, _ := os.UserHomeDir()
	e := Env{OllamaModels: os.Getenv("OLLAMA_MODELS"), HFCache: os.Getenv("HF_HUB_CACHE")}
	if e.OllamaModels == "" {
		e.OllamaModels = filepath.Join(home, ".ollama", "models")
	}
	if e.HFCache == "" {
		switch {
		case os.Getenv("HF_HOME") != "":
			e.HFCache = filepath.Join(os.Getenv("HF_HOME"), "hub")
		case os.Getenv("XDG_CACHE_HOME") != "":
			e.HFCache = filepath.Join(os.Getenv("XDG_CACHE_HOME"), "huggingface", "hub")
		default:
			e.HFCache = filepath.Join(home, ".cache", "huggingface", "hub")
		}
	}
	return e
}

// ErrNotFound is wrapped by every error that says a name is in neither store.
var ErrNotFound = errors.New("model not found")

// hfID is Org/Name with an optional @revision, in the characters the hub allows.
var hfID = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9._/-]+))?$`)

// ollamaName is [host/][namespace/]name[:tag].
var ollamaName = regexp.MustCompile(`^(?:([A-Za-z0-9][A-Za-z0-9.:_-]*)/)??(?:([A-Za-z0-9][A-Za-z0-9._-]*)/)?([A-Za-z0-9][A-Za-z0-9._-]*)(?::([A-Za-z0-9][A-Za-z0-9._-]*))?$`)

// looksLikePath says the user meant a file: it begins as paths do or ends as model files do,
// so a typo in it is reported as a missing file, not looked up in a store.
func looksLikePath(s string) bool {
	return filepath.IsAbs(s) || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") ||
		strings.HasSuffix(s, ".gguf") || strings.HasSuffix(s, ".bin") || strings.HasSuffix(s, "/") ||
		strings.Contains(s, string(filepath.Separator)+".")
}

// Resolve finds what s names. An existing file or folder wins over any store, so a local folder
// called Qwen/Qwen3-0.6B is opened as it always was. Then a hub id (Org/Name[@rev]) is looked up
// in the hub cache and an ollama name (name:tag, ns/name:tag, host/ns/name:tag) in ollama's
// store; Org/Name without a tag is tried in both, hub first. An error says where it looked and
// how to get the model.
func (e Env) Resolve(s string) (*Resolved, error) {
	if s == "" {
		return nil, fmt.Errorf("empty model reference")
	}
	if st, err := os.Stat(s); err == nil {
		return &Resolved{Ref: s, Kind: KindPath, Path: s, Name: pathName(s, st.IsDir())}, nil
	}
	if looksLikePath(s) {
		return nil, fmt.Errorf("%s: no such file or folder", s)
	}
	hfm := hfID.FindStringSubmatch(s)
	olm := ollamaName.FindStringSubmatch(s)
	var errs []error
	if hfm != nil {
		r, err := e.resolveHF(s, hfm[1]+"/"+hfm[2], hfm[3])
		if err == nil || !errors.Is(err, ErrNotFound) {
			return r, err
		}
		errs = append(errs, err)
	}
	if olm != nil && !strings.Contains(s, "@") {
		r, err := e.resolveOllama(s, parseOllama(olm))
		if err == nil || !errors.Is(err, ErrNotFound) {
			return r, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s: not a path, a Hugging Face id (Org/Name[@revision]) or an ollama name (name[:tag])", s)
	}
	return nil, errors.Join(append([]error{fmt.Errorf("%s: no such file or folder", s)}, errs...)...)
}

// IsName says s has the form of a store name (a Hugging Face id or an ollama name) and not of a
// path, whether or not any store holds it.
func IsName(s string) bool {
	if looksLikePath(s) {
		return false
	}
	return hfID.MatchString(s) || (ollamaName.MatchString(s) && !strings.Contains(s, "@"))
}

func pathName(p string, dir bool) string {
	b := filepath.Base(filepath.Clean(p))
	if !dir {
		b = strings.TrimSuffix(b, filepath.Ext(b))
	}
	return b
}
