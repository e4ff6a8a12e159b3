// Package depthcache keeps what the adaptive depth controller learned (runner.Learned: round
// costs per depth, acceptance rates per position) in the user's cache folder, one file per model
// pair, kernel path, thread count and temperature, so that a new process starts where the last
// one ended instead of spending its first rounds measuring. The cache is advisory: a missing or
// unreadable file means a cold start, never a failed run.
package depthcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/runner"
)

// Dir is the folder of the controller files: costs/ under DFLASH_CACHE when set, else under the
// user's cache folder's dflash/ (where the default model is unpacked too).
func Dir() (string, error) {
	base := os.Getenv("DFLASH_CACHE")
	if base == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("depth cache: %w", err)
		}
		base = filepath.Join(d, "dflash")
	}
	return filepath.Join(base, "costs"), nil
}

// Key names the file of one setting: a hash of the models' files (each path's name, and for a
// folder every file in it, with size and modification time, so a rewritten model gets a new
// file) and of extra, the rest of what the costs and rates depend on (kernel path, threads,
// temperature). The description lists the same in words, for a reader of the file.
func Key(paths []string, extra ...string) (key, description string, err error) {
	var parts []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", "", fmt.Errorf("depth cache key: %w", err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return "", "", fmt.Errorf("depth cache key: %w", err)
		}
		parts = append(parts, fileID(abs, st))
		if st.IsDir() {
			entries, err := os.ReadDir(abs)
			if err != nil {
				return "", "", fmt.Errorf("depth cache key: %w", err)
			}
			for _, e := range entries {
				if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
					parts = append(parts, fileID(filepath.Join(abs, e.Name()), info))
				}
			}
		}
	}
	parts = append(parts, extra...)
	h := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(h[:12]), strings.Join(slices.Concat(paths, extra), ", "), nil
}

func fileID(path string, st os.FileInfo) string {
	if st.IsDir() {
		return path + "/"
	}
	return fmt.Sprintf("%s %d %d", path, st.Size(), st.ModTime().UnixNano())
}

// version changes when the file's meaning does; a file of another version is ignored.
const version = 1

type file struct {
	Version     int            `json:"version"`
	Description string         `json:"description"`
	Learned     runner.Learned `json:"learned"`
}

// Load reads the file of key in dir. A missing file is an error that wraps os.ErrNotExist (a
// cold start, nothing to report); any other error means the file is unreadable or corrupt,
// which the caller reports as a warning and then overwrites.
func Load(dir, key string) (runner.Learned, error) {
	path := filepath.Join(dir, key+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return runner.Learned{}, err
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return runner.Learned{}, fmt.Errorf("depth cache %s: %w", path, err)
	}
	if f.Version != version {
		return runner.Learned{}, fmt.Errorf("depth cache %s: version %d, want %d", path, f.Version, version)
	}
	return f.Learned, nil
}

// Save writes l as the file of key in dir atomically: a reader (another dflash process) sees
// the old file or the new one, never a part.
func Save(dir, key, description string, l runner.Learned) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("depth cache: %w", err)
	}
	b, err := json.Marshal(file{Version: version, Description: description, Learned: l})
	if err != nil {
		return fmt.Errorf("depth cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, key+".*.tmp")
	if err != nil {
		return fmt.Errorf("depth cache: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("depth cache: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, key+".json")); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("depth cache: %w", err)
	}
	return nil
}
