package defaultmodel

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// files holds the default pair in Hugging Face layout: target/ (Qwen3 architecture, with its
// tokenizer) and draft/ (a DFlash draft for it).
//
//go:embed files
var files embed.FS

// Prompt is what `dflash run` says to the default model when given no prompt: the model was
// trained on lower-cased children's stories.
const Prompt = "once upon a time"

// Depth is the draft length the default pair runs at when decoding greedily: the fastest fixed
// depth in `dflash run` (BENCHMARKS.md, section 8). The depth controller, which starts every
// request from scratch in `dflash run`, spends a short run learning what this constant already
// knows. Sampling keeps the controller: the draft, trained on greedy continuations, accepts
// little there and the controller falls back to plain decoding.
const Depth = 5

// Dirs returns the folders of the default target and draft, copying the embedded files into the
// user's cache folder the first time (DFLASH_CACHE overrides where).
func Dirs() (target, draft string, err error) {
	sub, err := fs.Sub(files, "files")
	if err != nil {
		return "", "", err
	}
	root, err := cacheRoot()
	if err != nil {
		return "", "", err
	}
	dir, err := materialize(sub, root)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "target"), filepath.Join(dir, "draft"), nil
}

func cacheRoot() (string, error) {
	if d := os.Getenv("DFLASH_CACHE"); d != "" {
		return d, nil
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "dflash"), nil
	}
	d := filepath.Join(os.TempDir(), fmt.Sprintf("dflash-%d", os.Getuid()))
	return d, nil
}
