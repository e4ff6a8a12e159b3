package ref

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// PullOptions say what to download from a Hugging Face hub and where to.
type PullOptions struct {
	Repo     string // Org/Name
	Revision string // branch, tag or commit ("" is main)
	Cache    string // the hub cache (Env.HFCache)
	// Endpoint is the hub's base URL (HF_ENDPOINT; default https://huggingface.co), Token the
	// bearer token (HF_TOKEN) sent to it.
	Endpoint, Token string
	// Offline (HF_HUB_OFFLINE) makes no request at all: the cache has the revision or Pull fails.
	Offline bool
	// Parallel is how many files download at once (default 4), Retries how many times a file
	// whose transfer broke is resumed before Pull gives up on it (default 3).
	Parallel, Retries int
	Client            *http.Client
	// Progress, if set, is called as bytes arrive, from several goroutines at once.
	Progress func(Progress)
}

// Progress reports one file of a pull.
type Progress struct {
	File       string
	Done, Size int64
	Cached     bool // the blob was already in the cache: nothing fetched
	Finished   bool // verified and linked into the snapshot
	// Resumed is how many bytes were already on disk when this attempt began.
	Resumed int64
	Attempt int
	// TotalFiles and TotalSize are the whole pull's.
	TotalFiles int
	TotalSize  int64
}

// PullOptionsFromEnv fills the endpoint, token and offline switch as huggingface_hub reads them.
func PullOptionsFromEnv(repo, rev string) PullOptions {
	o := PullOptions{Repo: repo, Revision: rev, Cache: FromEnv().HFCache, Endpoint: os.Getenv("HF_ENDPOINT"), Token: os.Getenv("HF_TOKEN")}
	switch strings.ToLower(os.Getenv("HF_HUB_OFFLINE")) {
	case "1", "true", "yes", "on":
		o.Offline = true
	}
	return o
}

// ParseHubID splits Org/Name[@revision].
func ParseHubID(s string) (repo, rev string, err error) {
	m := hfID.FindStringSubmatch(s)
	if m == nil {
		return "", "", fmt.Errorf("%q is not a Hugging Face id (Org/Name[@revision])", s)
	}
	return m[1] + "/" + m[2], m[3], nil
}

// Wanted says whether a repository file is one a model needs: its configs, tokenizer, chat
// template and safetensors weights with their index. Other formats' weights (.bin, .pt, .gguf,
// onnx/), READMEs and images are left on the hub; only the top level is taken, since variants
// live in subfolders.
func Wanted(name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	switch name {
	case "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja":
		return true
	}
	return strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".safetensors.index.json")
}

// repoInfo is the part of the hub's model info (/api/models/<repo>/revision/<rev>?blobs=true)
// a pull uses: the commit the revision is at and each file's size and content id.
type repoInfo struct {
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

type sibling struct {
	Name   string `json:"rfilename"`
	Size   int64  `json:"size"`
	BlobID string `json:"blobId"` // git blob sha1: the etag of a file kept in git
	LFS    *struct {
		SHA256 string `json:"sha256"` // the etag of a file kept in LFS
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// etag is the name huggingface_hub gives the file's blob, and how its content is checked: an
// LFS file by its sha256, a git file by its git blob sha1.
func (s sibling) etag() (tag string, size int64, lfs bool) {
	if s.LFS != nil && s.LFS.SHA256 != "" {
		return strings.ToLower(s.LFS.SHA256), s.LFS.Size, true
	}
	return strings.ToLower(s.BlobID), s.Size, false
}

var hexRE = map[int]bool{40: true, 64: true}

func validEtag(tag string) bool {
	if !hexRE[len(tag)] {
		return false
	}
	_, err := hex.DecodeString(tag)
	return err == nil
}

// Pull downloads the files a model needs from the hub into the cache, in huggingface_hub's
// layout (blobs/<etag>, snapshots/<commit>/<file> linking to it, refs/<revision>), so
// transformers and vLLM find them and a second pull fetches nothing. Each file is downloaded to
// blobs/<etag>.incomplete, resumed with a Range request after a break, and verified against its
// etag before it is renamed into place: a blob in the cache is always whole and correct.
func Pull(ctx context.Context, o PullOptions) (*Resolved, error) {
	if o.Revision == "" {
		o.Revision = "main"
	}
	env := Env{HFCache: o.Cache}
	ref := o.Repo
	if o.Revision != "main" {
		ref += "@" + o.Revision
	}
	if o.Offline {
		r, err := env.resolveHF(ref, o.Repo, o.Revision)
		if err != nil {
			return nil, fmt.Errorf("offline (HF_HUB_OFFLINE): %w", err)
		}
		return r, nil
	}
	if o.Endpoint == "" {
		o.Endpoint = "https://huggingface.co"
	}
	o.Endpoint = strings.TrimSuffix(o.Endpoint, "/")
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Retries <= 0 {
		o.Retries = 3
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	info, err := o.info(ctx)
	if err != nil {
		return nil, err
	}
	var files []sibling
	var total int64
	for _, s := range info.Siblings {
		if Wanted(s.Name) {
			files = append(files, s)
			_, n, _ := s.etag()
			total += n
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s@%s: no config.json, tokenizer or safetensors files on the hub", o.Repo, o.Revision)
	}
	rd := RepoDir(o.Cache, o.Repo)
	for _, d := range []string{filepath.Join(rd, "blobs"), filepath.Join(rd, "snapshots", info.SHA), filepath.Join(rd, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("pull %s: %w", o.Repo, err)
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for _, f := range files {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if err := o.pullFile(ctx, rd, info.SHA, f, len(files), total); err != nil {
				cancel(fmt.Errorf("%s: %w", f.Name, err))
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("pull %s@%s: %w", o.Repo, o.Revision, err)
	}
	if o.Revision != info.SHA {
		if err := writeRef(filepath.Join(rd, "refs", o.Revision), info.SHA); err != nil {
			return nil, fmt.Errorf("pull %s: %w", o.Repo, err)
		}
	}
	return env.resolveHF(ref, o.Repo, o.Revision)
}

// writeRef replaces a ref by a rename, so a pull or a resolve running at the same time reads
// the old commit or the new one, never an empty or half-written file.
func writeRef(name, commit string) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".ref-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(commit)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (o PullOptions) get(ctx context.Context, u string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if o.Token != "" {
		// net/http drops this header when a redirect leaves the hub's host (to a CDN), so the
		// token is never sent to a third party.
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	req.Header.Set("User-Agent", "dflash")
	return o.Client.Do(req)
}

func (o PullOptions) info(ctx context.Context) (*repoInfo, error) {
	u := fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", o.Endpoint, o.Repo, url.PathEscape(o.Revision))
	resp, err := o.get(ctx, u, nil)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", o.Repo, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("pull %s: %s: the repository is gated or private: set HF_TOKEN to a token that may read it", o.Repo, resp.Status)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("pull %s@%s: no such repository or revision on %s", o.Repo, o.Revision, o.Endpoint)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("pull %s: model info: %s", o.Repo, resp.Status)
	}
	var info repoInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("pull %s: model info: %w", o.Repo, err)
	}
	if !commitRE.MatchString(info.SHA) {
		return nil, fmt.Errorf("pull %s: model info names commit %q, not a commit hash", o.Repo, info.SHA)
	}
	return &info, nil
}

// errCorrupt marks a finished transfer whose bytes do not match the etag: fetched again from
// the start, once, then refused.
var errCorrupt = errors.New("content does not match the hub's hash")

func (o PullOptions) pullFile(ctx context.Context, rd, commit string, f sibling, nfiles int, total int64) error {
	tag, size, lfs := f.etag()
	if !validEtag(tag) {
		return fmt.Errorf("the hub gives no usable hash (%q)", tag)
	}
	if path.Clean(f.Name) != f.Name || strings.HasPrefix(f.Name, "../") {
		return fmt.Errorf("unsafe file name")
	}
	blob := filepath.Join(rd, "blobs", tag)
	// Everything from the check for the blob to its snapshot link happens under the blob's
	// lock: a pull that waited finds the blob whole and fetches nothing.
	release, err := lockBlob(ctx, o.Cache, o.Repo, tag)
	if err != nil {
		return err
	}
	defer release()
	report := func(p Progress) {
		if o.Progress != nil {
			p.File, p.Size, p.TotalFiles, p.TotalSize = f.Name, size, nfiles, total
			o.Progress(p)
		}
	}
	if st, err := os.Stat(blob); err == nil && st.Size() == size {
		report(Progress{Done: size, Cached: true, Finished: true})
	} else {
		corrupt := 0
		for attempt := 1; ; attempt++ {
			err := o.fetch(ctx, blob, commit, f.Name, tag, size, lfs, attempt, report)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return err
			}
			if errors.Is(err, errCorrupt) {
				os.Remove(blob + ".incomplete")
				if corrupt++; corrupt > 1 {
					return fmt.Errorf("refused after a second download: %w", err)
				}
				continue
			}
			if attempt > o.Retries {
				return fmt.Errorf("%w (after %d attempts; the partial file is kept: pull again to resume)", err, attempt)
			}
		}
		report(Progress{Done: size, Finished: true})
	}
	link := filepath.Join(rd, "snapshots", commit, f.Name)
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return err
	}
	os.Remove(link)
	return os.Symlink(rel, link)
}

// fetch brings blob.incomplete up to size bytes, from where it stopped, and renames it to blob
// once its hash matches tag.
func (o PullOptions) fetch(ctx context.Context, blob, commit, name, tag string, size int64, lfs bool, attempt int, report func(Progress)) error {
	inc := blob + ".incomplete"
	f, err := os.OpenFile(inc, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if have > size {
		if err := f.Truncate(0); err != nil {
			return err
		}
		have = 0
	}
	var h hash.Hash
	if lfs {
		h = sha256.New()
	} else {
		// A git blob's id hashes a header before the content.
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
	}
	resumed := have
	if have > 0 {
		// The hash covers the whole file, so the part already on disk is read once more: the
		// cost of a resume is a read of what was kept, not a download of it.
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, have)); err != nil {
			return err
		}
	}
	if have < size {
		hdr := http.Header{}
		if have > 0 {
			hdr.Set("Range", fmt.Sprintf("bytes=%d-", have))
		}
		u := fmt.Sprintf("%s/%s/resolve/%s/%s", o.Endpoint, o.Repo, commit, escapePath(name))
		resp, err := o.get(ctx, u, hdr)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusPartialContent:
			if start := rangeStart(resp.Header.Get("Content-Range")); start != have {
				return fmt.Errorf("asked for bytes from %d, the hub sent from %d", have, start)
			}
		case http.StatusOK:
			// No range support (or the range ignored): start over.
			if err := f.Truncate(0); err != nil {
				return err
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			have, resumed = 0, 0
			h.Reset()
			if !lfs {
				fmt.Fprintf(h, "blob %d\x00", size)
			}
		default:
			return fmt.Errorf("download: %s", resp.Status)
		}
		if et := servedEtag(resp); et != "" && et != tag {
			return fmt.Errorf("the hub serves etag %s, its file list says %s", et, tag)
		}
		w := io.MultiWriter(f, h)
		buf := make([]byte, 256<<10)
		for have < size {
			n, rerr := resp.Body.Read(buf)
			if int64(n) > size-have {
				return fmt.Errorf("%w: more than the %d bytes listed", errCorrupt, size)
			}
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					return err
				}
				have += int64(n)
				report(Progress{Done: have, Resumed: resumed, Attempt: attempt})
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return fmt.Errorf("download broke at byte %d of %d: %w", have, size, rerr)
			}
		}
		if have < size {
			return fmt.Errorf("download ended at byte %d of %d", have, size)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != tag {
		return fmt.Errorf("%w: got %s, want %s", errCorrupt, got, tag)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(inc, blob)
}

// servedEtag is the etag of the file a resolve response carries: X-Linked-Etag when the hub
// redirected to storage (it is on the hub's redirect, which net/http followed and keeps as
// resp.Request.Response), else ETag; quotes and a weak marker are dropped.
func servedEtag(resp *http.Response) string {
	et := resp.Header.Get("X-Linked-Etag")
	if et == "" && resp.Request != nil && resp.Request.Response != nil {
		et = resp.Request.Response.Header.Get("X-Linked-Etag")
	}
	if et == "" {
		et = resp.Header.Get("ETag")
	}
	et = strings.Trim(strings.TrimPrefix(et, "W/"), `"`)
	if !validEtag(strings.ToLower(et)) {
		return "" // a storage server's own etag (an md5, a multipart id) says nothing here
	}
	return strings.ToLower(et)
}

func rangeStart(cr string) int64 {
	// "bytes START-END/SIZE"
	s, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return -1
	}
	s, _, _ = strings.Cut(s, "-")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
