package ref

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/engine/ref/hubtest"
)

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

func pullOpts(h *hubtest.Hub, cache string) PullOptions {
	return PullOptions{Repo: h.Repo, Cache: cache, Endpoint: h.URL}
}

// checkPulled says the cache holds the repository in huggingface_hub's layout, byte-identical
// to the hub's files, with only the files a model needs.
func checkPulled(t *testing.T, h *hubtest.Hub, cache string, r *Resolved) {
	t.Helper()
	rd := RepoDir(cache, h.Repo)
	if r.Path != filepath.Join(rd, "snapshots", h.Commit) || r.Commit != h.Commit {
		t.Fatalf("resolved %+v", r)
	}
	for n, b := range h.Files {
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
		want := hubtest.GitBlobID(b)
		if h.LFS[n] {
			want = hubtest.SHA256(b)
		}
		if err != nil || link != filepath.Join("..", "..", "blobs", want) {
			t.Errorf("%s links to %q (%v), want ../../blobs/%s", n, link, err, want)
		}
	}
	if ref, _ := os.ReadFile(filepath.Join(rd, "refs", "main")); string(ref) != h.Commit {
		t.Errorf("refs/main = %q", ref)
	}
	if inc, _ := filepath.Glob(filepath.Join(rd, "blobs", "*.incomplete")); len(inc) != 0 {
		t.Errorf("left behind: %v", inc)
	}
}

func TestPullIntoHubLayout(t *testing.T) {
	h := hubtest.New(t, "z-lab/Tiny-DFlash", tinyRepo(1<<20))
	h.Token = "hf_secret"
	cache := t.TempDir()
	o := pullOpts(h, cache)
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("gated without a token: %v", err)
	}
	o.Token = h.Token
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
	before := h.Count("/" + h.Repo + "/resolve/")
	if _, err := Pull(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if n := h.Count("/"+h.Repo+"/resolve/") - before; n != 0 {
		t.Errorf("second pull fetched %d files", n)
	}
}

func TestPullResumesAfterABreak(t *testing.T) {
	h := hubtest.New(t, "z-lab/Tiny-DFlash", tinyRepo(3<<20))
	cache := t.TempDir()
	o := pullOpts(h, cache)
	o.Parallel = 1

	// Every transfer breaks after a quarter and one retry is allowed: the pull fails, keeping what
	// arrived in blobs/<etag>.incomplete.
	h.Cut(100)
	o.Retries = 1
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "pull again to resume") {
		t.Fatalf("pull through a broken link: %v", err)
	}
	inc, _ := filepath.Glob(filepath.Join(RepoDir(cache, h.Repo), "blobs", "*.incomplete"))
	if len(inc) != 1 {
		t.Fatalf("partial files %v", inc)
	}
	st, _ := os.Stat(inc[0])
	if st.Size() == 0 {
		t.Fatal("nothing kept of the broken transfer")
	}

	// The link heals; the next pull asks only for the rest and ends byte-identical.
	h.Cut(0)
	h.Reset()
	r, err := Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, cache, r)
	// Which file broke first depends on the order files are taken in; whichever it was, its
	// rest was asked for from where the kept part ends.
	ranged := 0
	for _, r := range h.Requests() {
		if strings.HasSuffix(r, fmt.Sprintf(" bytes=%d-", st.Size())) {
			ranged++
		}
	}
	if ranged == 0 {
		t.Errorf("no ranged request from byte %d: %v", st.Size(), h.Requests())
	}

	// A single break inside one pull is resumed by the pull itself.
	cache2 := t.TempDir()
	h.Cut(1)
	o.Cache, o.Retries = cache2, 0
	r, err = Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, cache2, r)
}

func TestPullRefetchesOrRefusesCorruptBodies(t *testing.T) {
	h := hubtest.New(t, "z-lab/Tiny-DFlash", tinyRepo(1<<20))
	o := pullOpts(h, t.TempDir())
	o.Parallel = 1

	// One corrupt body (whichever file it hits) is detected by its hash and fetched again.
	h.Corrupt(1)
	r, err := Pull(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, o.Cache, r)

	// A hub that always serves corrupt bytes is refused, and nothing corrupt enters the cache.
	h.Corrupt(1000)
	o.Cache = t.TempDir()
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "does not match the hub's hash") {
		t.Fatalf("always corrupt: %v", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(RepoDir(o.Cache, h.Repo), "blobs"))
	for _, b := range blobs {
		t.Errorf("blob %s entered the cache", b.Name())
	}
}

func TestPullOfflineMakesNoRequest(t *testing.T) {
	h := hubtest.New(t, "z-lab/Tiny-DFlash", tinyRepo(1<<10))
	o := pullOpts(h, t.TempDir())
	o.Offline = true
	if _, err := Pull(context.Background(), o); err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Errorf("offline, not cached: %v", err)
	}
	if len(h.Requests()) != 0 {
		t.Fatalf("offline made requests %v", h.Requests())
	}
	o.Offline = false
	if _, err := Pull(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	n := len(h.Requests())
	o.Offline = true
	if _, err := Pull(context.Background(), o); err != nil {
		t.Errorf("offline, cached: %v", err)
	}
	if len(h.Requests()) != n {
		t.Errorf("offline made requests %v", h.Requests()[n:])
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

// Two pulls of one repository into one cache at once take turns on each blob: the first is held
// mid-transfer until the second has had time to reach the same file; the second then waits for
// the lock, finds the blob whole and fetches nothing, and both end byte-identical. Without the
// lock the second appends to the first's .incomplete file and one of them fails or corrupts it.
func TestPullConcurrentPullsTakeTurns(t *testing.T) {
	h := hubtest.New(t, "z-lab/Tiny-DFlash", tinyRepo(4<<20))
	cache := t.TempDir()
	weights := "/storage/" + h.Etag("model.safetensors")

	second := make(chan error, 1)
	var secondR *Resolved
	var once sync.Once
	a := pullOpts(h, cache)
	a.Progress = func(p Progress) {
		if p.File != "model.safetensors" || p.Done == 0 || p.Finished {
			return
		}
		once.Do(func() {
			go func() {
				r, err := Pull(context.Background(), pullOpts(h, cache))
				secondR = r
				second <- err
			}()
			// Long enough for the second pull to list the files and reach this blob.
			time.Sleep(300 * time.Millisecond)
			if n := h.Count(weights); n != 1 {
				t.Errorf("the second pull fetched the weights while the first held them (%d requests)", n)
			}
		})
	}
	r, err := Pull(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second pull: %v", err)
	}
	checkPulled(t, h, cache, r)
	checkPulled(t, h, cache, secondR)
	if n := h.Count(weights); n != 1 {
		t.Errorf("the weights were fetched %d times", n)
	}
	if _, err := os.Stat(filepath.Join(cache, ".locks", "models--z-lab--Tiny-DFlash", h.Etag("model.safetensors")+".lock")); err != nil {
		t.Errorf("no lock file where huggingface_hub keeps them: %v", err)
	}

	// A pull whose context ends while it waits for the lock stops waiting.
	release, err := lockBlob(context.Background(), cache, h.Repo, h.Etag("config.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	os.RemoveAll(RepoDir(cache, h.Repo))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Pull(ctx, pullOpts(h, cache)); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("pull behind a held lock: %v after %v", err, time.Since(start))
	}
}
