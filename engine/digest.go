package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// manifestContentLimit is the largest file whose bytes the digest hashes; larger files (the
// weights, big tokenizers) are hashed by name, size and modification time only.
const manifestContentLimit = 1 << 20

// Digest is the model's identity as ollama lists it (64 hex digits, the ID column of `ollama
// list` and `ollama ps`, which shows its first 12): the sha256 of a manifest of every file the
// model is made of (the target's files, a tokenizer beside it, each draft's folder), one line
// per file with its role, name, size and modification time, followed by the contents of the
// small ones (config.json, generation_config.json, tokenizer_config.json, a llama2.c
// tokenizer).
//
// A manifest, not the weights' bytes: hashing multi-gigabyte weights would cost seconds to
// minutes at every start, and an identity needs only to change when a file does. Replacing or
// rewriting a weights file changes its size or time; editing a config changes its content. The
// digest is computed on demand; a caller that lists it (the server) computes it once per model.
func (d *Description) Digest() (string, error) {
	h := sha256.New()
	if d.Format == FormatSynthetic {
		fmt.Fprintf(h, "synthetic\t%s\t%d\n", d.Ref, d.seed)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var small []string // in manifest order
	add := func(role, path string) error {
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("digest %s: %w", d.Path, err)
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		fmt.Fprintf(h, "%s\t%s\t%d\t%d\n", role, filepath.Base(path), st.Size(), st.ModTime().UnixNano())
		if st.Size() <= manifestContentLimit {
			small = append(small, path)
		}
		return nil
	}
	addDir := func(role, dir string) error {
		ents, err := os.ReadDir(dir) // sorted by name: the manifest is deterministic
		if err != nil {
			return fmt.Errorf("digest %s: %w", dir, err)
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				if err := add(role, filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var err error
	if d.hf != nil {
		err = addDir("model", d.Path)
	} else {
		err = add("model", d.Path)
	}
	if err != nil {
		return "", err
	}
	if tp := d.TokenizerPath; tp != "" && tp != d.Path {
		if st, err := os.Stat(tp); err == nil && st.IsDir() {
			err = addDir("tokenizer", tp)
		} else {
			err = add("tokenizer", tp)
		}
		if err != nil {
			return "", err
		}
	}
	for i, dr := range d.Drafts {
		if err := addDir(fmt.Sprintf("draft%d", i), dr.Dir); err != nil {
			return "", err
		}
	}
	for _, p := range small {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("digest %s: %w", d.Path, err)
		}
		_, err = io.Copy(h, io.LimitReader(f, manifestContentLimit))
		f.Close()
		if err != nil {
			return "", fmt.Errorf("digest %s: %w", p, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
