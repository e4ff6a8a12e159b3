// Package hubtest is a fake Hugging Face hub for tests, served over loopback: the model info
// endpoint listing each file's blob id and LFS sha256, resolve URLs that serve git files with
// their ETag and redirect LFS files to a storage URL (X-Linked-Etag, X-Repo-Commit on the
// redirect), and storage that honours Range. It can break transfers and corrupt bodies on
// demand, and records every request.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hub serves one repository at one commit.
type Hub struct {
	Repo, Commit string
	Files        map[string][]byte
	LFS          map[string]bool // default: the .safetensors files
	// Token, when set, is required as a bearer token everywhere but the storage URLs.
	Token string
	URL   string

	mu       sync.Mutex
	requests []string // "path range", in order
	// cut, when positive, makes the next that many file responses break the connection after a
	// quarter of the file; corrupt makes the next that many flip a byte.
	cut, corrupt int
	shas, gits   map[string]string
}

// NewHub is a hub for repo serving files, not yet listening (an http.Handler; fakehub serves
// one from a process).
func NewHub(repo string, files map[string][]byte) *Hub {
	h := &Hub{Repo: repo, Commit: strings.Repeat("f", 40), Files: files, LFS: map[string]bool{}}
	for n := range files {
		h.LFS[n] = strings.HasSuffix(n, ".safetensors")
	}
	return h
}

// New starts a hub for repo serving files on loopback; it stops when the test ends.
func New(t testing.TB, repo string, files map[string][]byte) *Hub {
	h := NewHub(repo, files)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// FromDir reads the files of a model folder (one level).
func FromDir(t testing.TB, dir string) map[string][]byte {
	files, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// ReadDir reads the files of a model folder (one level).
func ReadDir(dir string) (map[string][]byte, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}

// GitBlobID is git's id of a blob: the hub's etag for a file kept in git.
func GitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hub's etag for a file kept in LFS.
func SHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Etag is the etag the hub gives file name.
func (h *Hub) Etag(name string) string {
	if h.LFS[name] {
		return SHA256(h.Files[name])
	}
	return GitBlobID(h.Files[name])
}

// Cut breaks the next n file transfers; Corrupt corrupts the next n bodies.
func (h *Hub) Cut(n int)     { h.mu.Lock(); h.cut = n; h.mu.Unlock() }
func (h *Hub) Corrupt(n int) { h.mu.Lock(); h.corrupt = n; h.mu.Unlock() }

// Requests returns the requests so far; Reset forgets them.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.requests...)
}

func (h *Hub) Reset() { h.mu.Lock(); h.requests = nil; h.mu.Unlock() }

// Count is how many requests began with prefix.
func (h *Hub) Count(prefix string) int {
	n := 0
	for _, r := range h.Requests() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// ids hashes each file once: the fake's own hashing would otherwise dominate a benchmark.
func (h *Hub) ids() (shas, gits map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shas == nil {
		h.shas, h.gits = map[string]string{}, map[string]string{}
		for n, b := range h.Files {
			h.shas[n], h.gits[n] = SHA256(b), GitBlobID(b)
		}
	}
	return h.shas, h.gits
}

func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.URL.Path+" "+r.Header.Get("Range"))
	h.mu.Unlock()
	if h.Token != "" && !strings.HasPrefix(r.URL.Path, "/storage/") && r.Header.Get("Authorization") != "Bearer "+h.Token {
		http.Error(w, "gated", http.StatusUnauthorized)
		return
	}
	shas, gits := h.ids()
	switch {
	case r.URL.Path == "/api/models/"+h.Repo+"/revision/main" || r.URL.Path == "/api/models/"+h.Repo+"/revision/"+h.Commit:
		var sib []map[string]any
		for n, b := range h.Files {
			s := map[string]any{"rfilename": n, "size": len(b), "blobId": gits[n]}
			if h.LFS[n] {
				s["lfs"] = map[string]any{"sha256": shas[n], "size": len(b), "pointerSize": 134}
			}
			sib = append(sib, s)
		}
		json.NewEncoder(w).Encode(map[string]any{"id": h.Repo, "sha": h.Commit, "siblings": sib})
	case strings.HasPrefix(r.URL.Path, "/"+h.Repo+"/resolve/"+h.Commit+"/"):
		name := strings.TrimPrefix(r.URL.Path, "/"+h.Repo+"/resolve/"+h.Commit+"/")
		b, ok := h.Files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", h.Commit)
		if h.LFS[name] {
			w.Header().Set("X-Linked-Etag", `"`+shas[name]+`"`)
			w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
			http.Redirect(w, r, "/storage/"+shas[name], http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+gits[name]+`"`)
		h.serve(w, r, b)
	case strings.HasPrefix(r.URL.Path, "/storage/"):
		for n, b := range h.Files {
			if h.LFS[n] && shas[n] == strings.TrimPrefix(r.URL.Path, "/storage/") {
				// Storage's own etag is no content hash of ours: the client must not trust it.
				w.Header().Set("ETag", `"storage-md5-not-ours"`)
				h.serve(w, r, b)
				return
			}
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request, b []byte) {
	h.mu.Lock()
	cut, corrupt := h.cut > 0, h.corrupt > 0
	if cut {
		h.cut--
	}
	if corrupt {
		h.corrupt--
	}
	h.mu.Unlock()
	if corrupt {
		b = bytes.Clone(b)
		b[len(b)/3] ^= 0xff
	}
	if cut {
		// Answer as asked (whole or ranged), but break the connection after a quarter of the
		// file's bytes.
		w = &cutWriter{ResponseWriter: w, left: len(b) / 4}
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if len(p) <= c.left {
		c.left -= len(p)
		return c.ResponseWriter.Write(p)
	}
	c.ResponseWriter.Write(p[:c.left])
	c.ResponseWriter.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}
