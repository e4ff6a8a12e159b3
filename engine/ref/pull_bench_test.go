package ref

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/engine/ref/hubtest"
)

// The pull benchmarks (issue 19) measure dflash pull against the loopback fake hub, beside
// baselines that split its cost: the same bytes written to the same disk, hashed, and fetched
// over loopback to nowhere. They only run with -bench. Sizes and place:
//
//	DFLASH_PULLBENCH_MB   total bytes of synthetic weights per pull, in MiB (default 64)
//	DFLASH_PULLBENCH_DIR  where the caches are written (default the system temp folder): put it
//	                      on the disk a real cache lives on
//
// Besides bytes/s each reports cpu-ns/B, the process's CPU time (user+system, every goroutine,
// the in-process fake hub's included) per byte, and cores, that CPU time over the wall time.

func pullBenchMB(b *testing.B) int {
	mb := 64
	if s := os.Getenv("DFLASH_PULLBENCH_MB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 4 {
			b.Fatalf("DFLASH_PULLBENCH_MB=%q: want a whole number of MiB, at least 4", s)
		}
		mb = n
	}
	return mb
}

// pullBenchDir is a fresh folder on the benchmark's disk, removed when the benchmark ends.
func pullBenchDir(b *testing.B) string {
	base := os.Getenv("DFLASH_PULLBENCH_DIR")
	if base == "" {
		return b.TempDir()
	}
	d, err := os.MkdirTemp(base, "pullbench-*")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var pullBenchData struct {
	sync.Mutex
	key   string
	files map[string][]byte
}

// pullBenchFiles is n safetensors files of mb/n MiB each, filled with a pattern that neither
// compresses nor repeats within a file, kept between sub-benchmarks of one size.
func pullBenchFiles(n, mb int) map[string][]byte {
	d := &pullBenchData
	d.Lock()
	defer d.Unlock()
	if key := fmt.Sprint(n, mb); d.key != key {
		d.key, d.files = key, map[string][]byte{}
		for i := range n {
			w := make([]byte, (mb<<20)/n)
			x := uint64(i+1) * 0x9e3779b97f4a7c15
			for j := 0; j+8 <= len(w); j += 8 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				for k := range 8 {
					w[j+k] = byte(x >> (8 * k))
				}
			}
			d.files[fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)] = w
		}
	}
	return d.files
}

func totalBytes(files map[string][]byte) int64 {
	var t int64
	for _, w := range files {
		t += int64(len(w))
	}
	return t
}

// cpuMeter accumulates the process's CPU time and the wall time over the timed parts of a
// benchmark; report turns them into per-byte and per-wall-second figures.
type cpuMeter struct {
	cpu, wall time.Duration
	c0        time.Duration
	w0        time.Time
}

func (m *cpuMeter) start() { m.c0, m.w0 = processCPU(), time.Now() }
func (m *cpuMeter) stop()  { m.cpu += processCPU() - m.c0; m.wall += time.Since(m.w0) }

func (m *cpuMeter) report(b *testing.B, bytes int64, ops int) {
	if m.wall <= 0 || ops == 0 || m.cpu < 0 {
		return
	}
	b.ReportMetric(float64(m.cpu.Nanoseconds())/float64(bytes)/float64(ops), "cpu-ns/B")
	b.ReportMetric(m.cpu.Seconds()/m.wall.Seconds(), "cores")
}

// BenchmarkPull pulls mb MiB from the loopback hub as one file and as four downloaded at once;
// cut breaks every file's transfer once, a quarter in, and the pull resumes it with a Range
// request (against the uninterrupted files=4: the resume overhead within one pull); resume-half
// finds half of every file kept by an earlier, broken pull (the hash re-reads that half).
func BenchmarkPull(b *testing.B) {
	mb := pullBenchMB(b)
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) { benchPull(b, n, mb, "") })
	}
	b.Run("files=4/cut", func(b *testing.B) { benchPull(b, 4, mb, "cut") })
	b.Run("files=4/resume-half", func(b *testing.B) { benchPull(b, 4, mb, "half") })
}

func benchPull(b *testing.B, n, mb int, mode string) {
	weights := pullBenchFiles(n, mb)
	files := map[string][]byte{"config.json": []byte(`{"architectures":["DFlashDraftModel"]}`)}
	for name, w := range weights {
		files[name] = w
	}
	h := hubtest.New(b, "z-lab/Bench-DFlash", files)
	dir := pullBenchDir(b)
	total := totalBytes(files)
	b.SetBytes(total)
	transfers := func() int {
		return h.Count("/storage/") + h.Count("/"+h.Repo+"/resolve/"+h.Commit+"/config.json")
	}
	var m cpuMeter
	ops := 0
	for b.Loop() {
		before := transfers()
		b.StopTimer()
		o := pullOpts(h, filepath.Join(dir, "cache"))
		o.Parallel = n
		switch mode {
		case "half":
			blobs := filepath.Join(RepoDir(o.Cache, h.Repo), "blobs")
			if err := os.MkdirAll(blobs, 0o755); err != nil {
				b.Fatal(err)
			}
			for name, w := range weights {
				if err := os.WriteFile(filepath.Join(blobs, h.Etag(name)+".incomplete"), w[:len(w)/2], 0o644); err != nil {
					b.Fatal(err)
				}
			}
		case "cut":
			// Breaks as many transfers as there are files, whichever they are; each break costs
			// one more transfer, resumed from where it stopped.
			h.Cut(len(files))
			o.Retries = 2 * len(files)
		}
		b.StartTimer()
		m.start()
		r, err := Pull(context.Background(), o)
		m.stop()
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if r.Path == "" {
			b.Fatalf("pull resolved to nothing: %+v", r)
		}
		want := len(files)
		if mode == "cut" {
			want *= 2
		}
		if got := transfers() - before; got != want {
			b.Fatalf("%s: %d file transfers, want %d", mode, got, want)
		}
		if err := os.RemoveAll(o.Cache); err != nil {
			b.Fatal(err)
		}
		ops++
		b.StartTimer()
	}
	m.report(b, total, ops)
}

// BenchmarkPullBaseline is what a pull of the same bytes cannot beat: write writes them to the
// same disk (one file, then four at once, as the pull does, no fsync: the pull does none);
// sha256 hashes them (the pull's check, done while the bytes stream in); loopback fetches them
// from the same fake hub into io.Discard (HTTP and the fake's own cost, no disk, no hash).
func BenchmarkPullBaseline(b *testing.B) {
	mb := pullBenchMB(b)
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("write/files=%d", n), func(b *testing.B) {
			files := pullBenchFiles(n, mb)
			dir := pullBenchDir(b)
			total := totalBytes(files)
			b.SetBytes(total)
			var m cpuMeter
			ops := 0
			for b.Loop() {
				m.start()
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for name, w := range files {
					wg.Go(func() { errs <- os.WriteFile(filepath.Join(dir, name), w, 0o644) })
				}
				wg.Wait()
				m.stop()
				b.StopTimer()
				for range n {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				for name := range files {
					os.Remove(filepath.Join(dir, name))
				}
				ops++
				b.StartTimer()
			}
			m.report(b, total, ops)
		})
	}
	b.Run("sha256", func(b *testing.B) {
		files := pullBenchFiles(1, mb)
		total := totalBytes(files)
		b.SetBytes(total)
		var m cpuMeter
		ops := 0
		for b.Loop() {
			m.start()
			for _, w := range files {
				h := sha256.New()
				// In 256 KiB writes, as the pull feeds it.
				for i := 0; i < len(w); i += 256 << 10 {
					h.Write(w[i:min(i+256<<10, len(w))])
				}
				h.Sum(nil)
			}
			m.stop()
			ops++
		}
		m.report(b, total, ops)
	})
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("loopback/files=%d", n), func(b *testing.B) {
			files := pullBenchFiles(n, mb)
			h := hubtest.New(b, "z-lab/Bench-DFlash", files)
			total := totalBytes(files)
			b.SetBytes(total)
			var m cpuMeter
			ops := 0
			for b.Loop() {
				m.start()
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for name := range files {
					wg.Go(func() { errs <- getDiscard(h.URL+"/storage/"+h.Etag(name), int64(len(files[name]))) })
				}
				wg.Wait()
				m.stop()
				for range n {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				ops++
			}
			m.report(b, total, ops)
		})
	}
}

func getDiscard(u string, size int64) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 256<<10))
	if err == nil && n != size {
		err = fmt.Errorf("%s: %d bytes, want %d", u, n, size)
	}
	return err
}
