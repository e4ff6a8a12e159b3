package ref

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// RepoDir is the hub cache folder of a model repository: models--Org--Name.
func RepoDir(cache, repo string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// resolveHF finds the snapshot of repo at rev ("" is main) in the hub cache: a commit hash names
// its snapshot folder directly; a branch or tag is read from refs/<rev>. Every file of the
// snapshot must lead to a blob (a dangling symlink is a download that did not finish or a blob
// someone deleted), and config.json must be there.
func (e Env) resolveHF(ref, repo, rev string) (*Resolved, error) {
	if rev == "" {
		rev = "main"
	}
	rd := RepoDir(e.HFCache, repo)
	howto := fmt.Sprintf("get it with: dflash pull %s", ref)
	if _, err := os.Stat(rd); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: Hugging Face id %s: no %s (cache: HF_HUB_CACHE=%s); %s", ErrNotFound, repo, rd, e.HFCache, howto)
	}
	commit := rev
	if !commitRE.MatchString(rev) {
		data, err := os.ReadFile(filepath.Join(rd, "refs", rev))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: Hugging Face id %s: revision %s was never downloaded (no %s); %s",
				ErrNotFound, repo, rev, filepath.Join(rd, "refs", rev), howto)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", repo, err)
		}
		commit = strings.TrimSpace(string(data))
		if !commitRE.MatchString(commit) {
			return nil, fmt.Errorf("%s: ref %s holds %q, not a commit hash", repo, filepath.Join(rd, "refs", rev), commit)
		}
	}
	snap := filepath.Join(rd, "snapshots", commit)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s: ref %s points at commit %s, which has no snapshot %s (dangling ref); %s",
			repo, rev, commit, snap, howto)
	}
	if err := checkSnapshot(snap); err != nil {
		return nil, fmt.Errorf("%s@%s: %w; %s", repo, rev, err, howto)
	}
	return &Resolved{Ref: ref, Kind: KindHF, Path: snap, Name: repo, Repo: repo, Revision: rev, Commit: commit}, nil
}

// checkSnapshot walks a snapshot folder and follows each entry to its blob.
func checkSnapshot(snap string) error {
	if _, err := os.Lstat(filepath.Join(snap, "config.json")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot %s has no config.json", snap)
	}
	return filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			target, _ := os.Readlink(p)
			return fmt.Errorf("file %s links to blob %s, which is missing", p, target)
		}
		return nil
	})
}
