package ref

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// lockBlob holds the lock of one blob of repo for as long as a pull writes it: the file
// <cache>/.locks/models--Org--Name/<etag>.lock, where huggingface_hub keeps its own, so dflash,
// transformers and vLLM downloading the same file at once take turns instead of appending to
// one .incomplete file together. The wait ends with ctx. The lock file stays (as
// huggingface_hub's do): removing it would let a third pull lock a fresh file while the
// second still holds the old one.
func lockBlob(ctx context.Context, cache, repo, tag string) (release func(), err error) {
	dir := filepath.Join(cache, ".locks", filepath.Base(RepoDir(cache, repo)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	name := filepath.Join(dir, tag+".lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	// Polling, not a blocking flock, so a cancelled pull stops waiting.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if ok {
			return func() { unlock(f); f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another download of this file (%s): %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
