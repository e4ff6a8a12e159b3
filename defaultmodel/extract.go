package defaultmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// materialize copies every file of fsys into a folder named after the content's hash under
// cacheRoot and returns it. A folder that already exists is trusted only if its manifest
// matches, so an interrupted earlier copy is redone, never half-used. The copy goes to a temporary
// folder first and is renamed into place, so concurrent first runs cannot see a partial model.
// A binary with new files (a retrained draft) therefore never reads an older copy; the older
// copies are removed once the new one is in place (pruneOthers).
func materialize(fsys fs.FS, cacheRoot string) (string, error) {
	dst, err := extract(fsys, cacheRoot)
	if err != nil {
		return "", err
	}
	pruneOthers(cacheRoot, filepath.Base(dst))
	return dst, nil
}

// pruneOthers removes the folders of other versions of the default pair under cacheRoot: those
// named default-* that hold a manifest (so only folders this package wrote), except keep. It is
// best effort: a folder that cannot be removed costs disk space, not correctness. A process of an
// older binary still running from such a folder has its weights in memory already; its next
// start unpacks them again.
func pruneOthers(cacheRoot, keep string) {
	entries, err := os.ReadDir(cacheRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == keep || !strings.HasPrefix(name, "default-") {
			continue
		}
		dir := filepath.Join(cacheRoot, name)
		if _, err := os.Stat(filepath.Join(dir, manifestName)); err == nil {
			os.RemoveAll(dir)
		}
	}
}

// extract is materialize without the pruning.
func extract(fsys fs.FS, cacheRoot string) (string, error) {
	files, sum, err := manifest(fsys)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", errors.New("default model: no embedded files")
	}
	dst := filepath.Join(cacheRoot, "default-"+sum[:16])
	if ok, _ := complete(dst, sum); ok {
		return dst, nil
	}
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheRoot, ".default-tmp-")
	if err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range files {
		if err := copyFile(fsys, name, filepath.Join(tmp, filepath.FromSlash(name))); err != nil {
			return "", fmt.Errorf("default model: extract %s: %w", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestName), []byte(sum), 0o644); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		// Another process may have finished the same copy first; its result is as good.
		if ok, _ := complete(dst, sum); ok {
			return dst, nil
		}
		os.RemoveAll(dst)
		if err := os.Rename(tmp, dst); err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
	}
	return dst, nil
}

const manifestName = ".dflash-manifest"

// manifest lists the files of fsys (sorted) and hashes their names and contents together.
func manifest(fsys fs.FS) ([]string, string, error) {
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("default model: %w", err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, name := range files {
		f, err := fsys.Open(name)
		if err != nil {
			return nil, "", err
		}
		fmt.Fprintf(h, "%s\x00", name)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, "", err
		}
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

func complete(dir, sum string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return false, err
	}
	return string(b) == sum, nil
}

func copyFile(fsys fs.FS, name, dst string) error {
	src, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
