package ref

import (
	"bytes"
	"context"
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

// fakeHub serves one repository the way the hub does: the model info with each file's blob id
// or LFS sha256, resolve URLs that serve git files directly (ETag: the git blob id) and redirect
// LFS files to a storage URL (X-Linked-Etag on the redirect), and storage that honours Range.
type fakeHub struct {
	repo, commit string
	files        map[string][]byte
	lfs          map[string]bool
	token        string

	mu       sync.Mutex
	requests []string // method path range, in order
	// cut, when positive, makes the next that many storage responses stop halfway and break
	// the connection; corrupt makes the next that many flip a byte.
	cut, corrupt int
	shas, gits   map[string]string
}

func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// ids is each file's sha256 and git blob id, hashed once: the fake hub's own hashing would
// otherwise dominate the benchmark's time.
func (h *fakeHub) ids() (shas, gits map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shas == nil {
		h.shas, h.gits = map[string]string{}, map[string]string{}
		for n, b := range h.files {
			h.shas[n], h.gits[n] = sha(b), gitBlobID(b)
		}
	}
	return h.shas, h.gits
}

func newFakeHub(t *testing.T, files map[string][]byte) (*fakeHub, *httptest.Server) {
	h := &fakeHub{repo: "z-lab/Tiny-DFlash", commit: strings.Repeat("f", 40), files: files, lfs: map[string]bool{}}
	for n := range files {
		h.lfs[n] = strings.HasSuffix(n, ".safetensors")
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *fakeHub) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.requests {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.URL.Path+" "+r.Header.Get("Range"))
	h.mu.Unlock()
	if h.token != "" && !strings.HasPrefix(r.URL.Path, "/storage/") && r.Header.Get("Authorization") != "Bearer "+h.token {
		http.Error(w, "gated", http.StatusUnauthorized)
		return
	}
	shas, gits := h.ids()
	switch {
	case r.URL.Path == "/api/models/"+h.repo+"/revision/main":
		var sib []map[string]any
		for n, b := range h.files {
			s := map[string]any{"rfilename": n, "size": len(b), "blobId": gits[n]}
			if h.lfs[n] {
				s["lfs"] = map[string]any{"sha256": shas[n], "size": len(b), "pointerSize": 134}
			}
			sib = append(sib, s)
		}
		json.NewEncoder(w).Encode(map[string]any{"id": h.repo, "sha": h.commit, "siblings": sib})
	case strings.HasPrefix(r.URL.Path, "/"+h.repo+"/resolve/"+h.commit+"/"):
		name := strings.TrimPrefix(r.URL.Path, "/"+h.repo+"/resolve/"+h.commit+"/")
		b, ok := h.files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", h.commit)
		if h.lfs[name] {
			w.Header().Set("X-Linked-Etag", `"`+shas[name]+`"`)
			w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
			http.Redirect(w, r, "/storage/"+shas[name], http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+gits[name]+`"`)
		h.serve(w, r, b)
	case strings.HasPrefix(r.URL.Path, "/storage/"):
		for n, b := range h.files {
			if h.lfs[n] && shas[n] == strings.TrimPrefix(r.URL.Path, "/storage/") {
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

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request, b []byte) {
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

func tinyRepo(weights int) map[string][]byte {
	w := make([]byte, weights)
	for i := range w {
		w[i] = byte(i*7 + i>>9)
	}
	return map[string][]byte{
		"config.json":            []byte(`{"architectures":["DFlashDraftModel"]}`),
		"tokenizer.json":         []byte(`{"model":{}}`),
		"model.safetensors":      w,
		"README.md":              []byte("# not needed"),
		"onnx/model.safetensors": []byte("a variant in a subfolder, not needed"),
	}
}

func pullOpts(srv *httptest.Server, cache string) PullOptions {
	return PullOptions{Repo: "z-lab/Tiny-DFlash", Cache: cache, Endpoint: srv.URL, Client: srv.Client()}
}

// checkPulled says the cache holds the repository in huggingface_hub's layout, byte-identical
// to the hub's files, with only the files a model needs.
func checkPulled(t *testing.T, h *fakeHub, cache string, r *Resolved) {
	t.Helper()
	rd := RepoDir(cache, h.repo)
	if r.Path != filepath.Join(rd, "snapshots", h.commit) || r.Commit != h.commit {
		t.Fatalf("resolved %+v", r)
	}
	for n, b := range h.files {
		got, err := os.ReadFile(filepath.Join(r.Path, n))
		if !Wanted(n) {
			if err == nil {
				t.Errorf("%s was downloaded but is not needed", n)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s: %d bytes, %v; want the hub's %d", n, len(got), err, len(b))
		}
		link, err := os.Readlink(filepath.Join(r.Path, n))
		want := gitBlobID(b)
		if h.lfs[n] {
			want = sha(b)
		}
		if err != nil || link != filepath.Join("..", "..", "blobs", want) {
			t.Errorf("%s links to %q (%v), want ../../blobs/%s", n, link, err, want)
		}
	}
	if ref, _ := os.ReadFile(filepath.Join(rd, "refs", "main")); string(ref) != h.commit {
		t.Errorf("refs/main = %q", ref)
	}
	if inc, _ := filepath.Glob(filepath.Join(rd, "blobs", "*.incomplete")); len(inc) != 0 {
		t.Errorf("left behind: %v", inc)
	}
}

func TestPullIntoHubLayout(t *testing.T) {
	h, srv := newFakeHub(t, tinyRepo(1<<20))
	h.token = "hf_secret"
	cache := t.TempDir()
	o := pullOpts(srv, cache)
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("gated without a token: %v", err)
	}
	o.Token = h.token
	var mu sync.Mutex
	finished := map[string]bool{}
	o.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Finished {
			finished[p.File] = true
		}
		if p.TotalFiles != 3 || p.Done > p.Size {
			t.Errorf("progress %+v", p)
		}
	}
	r, err := Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, cache, r)
	if len(finished) != 3 {
		t.Errorf("finished %v", finished)
	}
	// The name now resolves from the cache, and a second pull fetches no file.
	if rr, err := (Env{HFCache: cache}).Resolve("z-lab/Tiny-DFlash"); err != nil || rr.Path != r.Path {
		t.Errorf("resolve after pull: %+v %v", rr, err)
	}
	before := h.count("/" + h.repo + "/resolve/")
	if _, err := Pull(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if n := h.count("/"+h.repo+"/resolve/") - before; n != 0 {
		t.Errorf("second pull fetched %d files", n)
	}
}

func TestPullResumesAfterABreak(t *testing.T) {
	h, srv := newFakeHub(t, tinyRepo(3<<20))
	cache := t.TempDir()
	o := pullOpts(srv, cache)
	o.Parallel = 1

	// Every transfer breaks after a quarter and one retry is allowed: the pull fails, keeping what
	// arrived in blobs/<etag>.incomplete.
	h.cut, o.Retries = 100, 1
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "pull again to resume") {
		t.Fatalf("pull through a broken link: %v", err)
	}
	inc, _ := filepath.Glob(filepath.Join(RepoDir(cache, h.repo), "blobs", "*.incomplete"))
	if len(inc) != 1 {
		t.Fatalf("partial files %v", inc)
	}
	st, _ := os.Stat(inc[0])
	if st.Size() == 0 {
		t.Fatal("nothing kept of the broken transfer")
	}

	// The link heals; the next pull asks only for the rest and ends byte-identical.
	h.cut = 0
	h.requests = nil
	r, err := Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, cache, r)
	if n := h.count(fmt.Sprintf("/storage/%s bytes=%d-", sha(h.files["model.safetensors"]), st.Size())); n != 1 {
		t.Errorf("no ranged request from byte %d: %v", st.Size(), h.requests)
	}

	// A single break inside one pull is resumed by the pull itself.
	cache2 := t.TempDir()
	h.cut = 1
	o.Cache, o.Retries = cache2, 0
	r, err = Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, cache2, r)
}

func TestPullRefetchesOrRefusesCorruptBodies(t *testing.T) {
	h, srv := newFakeHub(t, tinyRepo(1<<20))
	o := pullOpts(srv, t.TempDir())
	o.Parallel = 1

	// One corrupt body (whichever file it hits) is detected by its hash and fetched again.
	h.corrupt = 1
	r, err := Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, o.Cache, r)

	// A hub that always serves corrupt bytes is refused, and nothing corrupt enters the cache.
	h.corrupt = 1000
	o.Cache = t.TempDir()
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "does not match the hub's hash") {
		t.Fatalf("always corrupt: %v", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(RepoDir(o.Cache, h.repo), "blobs"))
	for _, b := range blobs {
		t.Errorf("blob %s entered the cache", b.Name())
	}
}

func TestPullOfflineMakesNoRequest(t *testing.T) {
	h, srv := newFakeHub(t, tinyRepo(1<<10))
	o := pullOpts(srv, t.TempDir())
	o.Offline = true
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Errorf("offline, not cached: %v", err)
	}
	if len(h.requests) != 0 {
		t.Fatalf("offline made requests %v", h.requests)
	}
	o.Offline = false
	if _, err := Pull(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	n := len(h.requests)
	o.Offline = true
	if _, err := Pull(context.Background(), o); err != nil {
		t.Errorf("offline, cached: %v", err)
	}
	if len(h.requests) != n {
		t.Errorf("offline made requests %v", h.requests[n:])
	}
}

func TestPullOptionsFromEnv(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("HF_TOKEN", "tok")
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_HUB_CACHE", "/c")
	o := PullOptionsFromEnv("a/b", "")
	if o.Endpoint != "http://127.0.0.1:1" || o.Token != "tok" || !o.Offline || o.Cache != "/c" {
		t.Errorf("%+v", o)
	}
}

// BenchmarkPull measures throughput against the loopback hub: 4 files of 16 MB, one or four
// at a time. BenchmarkResume pulls files half of which are already on disk.
func BenchmarkPull(b *testing.B) {
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) { benchPull(b, par, false) })
	}
	b.Run("resume-half", func(b *testing.B) { benchPull(b, 4, true) })
}

func benchPull(b *testing.B, par int, half bool) {
	files := map[string][]byte{"config.json": []byte("{}")}
	for i := range 4 {
		w := make([]byte, 16<<20)
		for j := range w {
			w[j] = byte(j*31 + i)
		}
		files[fmt.Sprintf("model-%d.safetensors", i)] = w
	}
	h := &fakeHub{repo: "z-lab/Tiny-DFlash", commit: strings.Repeat("f", 40), files: files, lfs: map[string]bool{}}
	for n := range files {
		h.lfs[n] = strings.HasSuffix(n, ".safetensors")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	b.SetBytes(4 << 24)
	for b.Loop() {
		b.StopTimer()
		o := pullOpts(srv, b.TempDir())
		o.Parallel = par
		if half {
			rd := RepoDir(o.Cache, h.repo)
			os.MkdirAll(filepath.Join(rd, "blobs"), 0o755)
			for n, w := range files {
				if h.lfs[n] {
					os.WriteFile(filepath.Join(rd, "blobs", sha(w)+".incomplete"), w[:len(w)/2], 0o644)
				}
			}
		}
		b.StartTimer()
		if _, err := Pull(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
}
