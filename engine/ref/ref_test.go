package ref

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ollamaStore builds an ollama models folder in dir: each layer's blob under its digest and a
// manifest listing them, as `ollama pull` leaves them.
type ollamaStore struct {
	t    *testing.T
	root string
}

func (s ollamaStore) blob(content []byte) layer {
	sum := sha256.Sum256(content)
	d := "sha256:" + hex.EncodeToString(sum[:])
	bp := filepath.Join(s.root, "blobs", "sha256-"+hex.EncodeToString(sum[:]))
	must(s.t, os.MkdirAll(filepath.Dir(bp), 0o755))
	must(s.t, os.WriteFile(bp, content, 0o644))
	return layer{Digest: d, Size: int64(len(content))}
}

func (s ollamaStore) manifest(host, ns, name, tag string, layers ...layer) string {
	m := manifest{SchemaVersion: 2, MediaType: "application/vnd.docker.distribution.manifest.v2+json",
		Config: s.blob([]byte(`{"model_format":"gguf","model_family":"qwen3"}`)), Layers: layers}
	m.Config.MediaType = "application/vnd.docker.container.image.v1+json"
	data, _ := json.Marshal(m)
	mp := filepath.Join(s.root, "manifests", host, ns, name, tag)
	must(s.t, os.MkdirAll(filepath.Dir(mp), 0o755))
	must(s.t, os.WriteFile(mp, data, 0o644))
	return mp
}

func typed(l layer, media string) layer { l.MediaType = media; return l }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOllamaNames(t *testing.T) {
	// Each form fills the parts it omits with ollama's defaults, and finds the same manifest.
	root := t.TempDir()
	s := ollamaStore{t, root}
	gguf := s.blob([]byte("GGUF fake weights"))
	tmpl := s.blob([]byte("{{ .Prompt }}"))
	sys := s.blob([]byte("You are terse."))
	params := s.blob([]byte(`{"stop":["<|im_end|>"],"temperature":0.6}`))
	s.manifest("registry.ollama.ai", "library", "qwen3", "0.6b",
		typed(gguf, MediaModel), typed(tmpl, MediaTemplate), typed(sys, MediaSystem), typed(params, MediaParams),
		typed(s.blob([]byte("license text")), "application/vnd.ollama.image.license"))
	s.manifest("registry.ollama.ai", "library", "qwen3", "latest", typed(gguf, MediaModel))
	s.manifest("example.com:5000", "team", "tiny", "v1", typed(gguf, MediaModel))
	env := Env{OllamaModels: root, HFCache: t.TempDir()}
	for _, tc := range []struct{ ref, name string }{
		{"qwen3:0.6b", "qwen3:0.6b"},
		{"library/qwen3:0.6b", "qwen3:0.6b"},
		{"registry.ollama.ai/library/qwen3:0.6b", "qwen3:0.6b"},
		{"qwen3", "qwen3:latest"},
		{"library/qwen3:latest", "qwen3:latest"},
		{"example.com:5000/team/tiny:v1", "example.com:5000/team/tiny:v1"},
	} {
		r, err := env.Resolve(tc.ref)
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		if r.Kind != KindOllama || r.Name != tc.name || filepath.Base(r.Path) != "sha256-"+gguf.Digest[7:] {
			t.Errorf("%s: got kind %s name %s path %s", tc.ref, r.Kind, r.Name, r.Path)
		}
	}
	r, err := env.Resolve("qwen3:0.6b")
	must(t, err)
	o := r.Ollama
	if o.Template != "{{ .Prompt }}" || o.System != "You are terse." || o.Params["temperature"] != 0.6 || o.Size != gguf.Size {
		t.Errorf("layers not carried: %+v", o)
	}
	if stop, _ := o.Params["stop"].([]any); len(stop) != 1 || stop[0] != "<|im_end|>" {
		t.Errorf("params stop = %v", o.Params["stop"])
	}
	must(t, VerifyModelBlob(r.Path))
}

func TestOllamaBrokenStores(t *testing.T) {
	root := t.TempDir()
	s := ollamaStore{t, root}
	env := Env{OllamaModels: root, HFCache: t.TempDir()}
	gguf := s.blob([]byte("GGUF fake weights"))

	// A blob the manifest names but the store lacks: an interrupted pull or a pruned blob.
	missing := layer{MediaType: MediaModel, Digest: "sha256:" + strings.Repeat("ab", 32), Size: 10}
	s.manifest("registry.ollama.ai", "library", "gone", "latest", missing)

	// A template whose bytes do not hash to the digest its name and the manifest carry.
	bad := s.blob([]byte("{{ .Prompt }}"))
	must(t, os.WriteFile(filepath.Join(root, "blobs", "sha256-"+bad.Digest[7:]), []byte("{{ .Evil }}!!"), 0o644))
	s.manifest("registry.ollama.ai", "library", "tampered", "latest", typed(gguf, MediaModel), typed(bad, MediaTemplate))

	// A model blob shorter than the manifest says: truncated, detected without hashing GBs.
	short := gguf
	short.Size++
	s.manifest("registry.ollama.ai", "library", "short", "latest", typed(short, MediaModel))

	s.manifest("registry.ollama.ai", "library", "nomodel", "latest", typed(s.blob([]byte("t")), MediaTemplate))
	badDigest := typed(gguf, MediaModel)
	badDigest.Digest = "md5:1234"
	s.manifest("registry.ollama.ai", "library", "baddigest", "latest", badDigest)

	for _, tc := range []struct{ ref, want string }{
		{"gone", "is missing"},
		{"tampered", "content hashes to"},
		{"short", "the manifest says 18"},
		{"nomodel", "no application/vnd.ollama.image.model layer"},
		{"baddigest", "is not sha256:<64 hex>"},
		{"qwen3:8b", "ollama pull qwen3:8b"},
	} {
		_, err := env.Resolve(tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.ref, err, tc.want)
		}
	}
	// A model blob replaced by bytes of the same size passes resolution (size only) and fails
	// the full hash.
	r, err := env.Resolve("tampered:latest")
	if err == nil {
		t.Fatalf("tampered resolved: %+v", r)
	}
	bp := filepath.Join(root, "blobs", "sha256-"+gguf.Digest[7:])
	must(t, os.WriteFile(bp, []byte("GGUF fake weighTS"), 0o644))
	s.manifest("registry.ollama.ai", "library", "swapped", "latest", typed(gguf, MediaModel))
	r, err = env.Resolve("swapped")
	must(t, err)
	if err := VerifyModelBlob(r.Path); err == nil || !strings.Contains(err.Error(), "content hashes to") {
		t.Errorf("VerifyModelBlob of a swapped blob: %v", err)
	}
}

// hubCache builds a hub cache repo as huggingface_hub leaves it: content in blobs/<etag>, each
// snapshot file a relative symlink to its blob, refs/<branch> holding the commit.
type hubCache struct {
	t    *testing.T
	root string
}

func (h hubCache) snapshot(repo, branch, commit string, files map[string]string) string {
	rd := RepoDir(h.root, repo)
	snap := filepath.Join(rd, "snapshots", commit)
	for name, content := range files {
		sum := sha256.Sum256([]byte(content))
		etag := hex.EncodeToString(sum[:])
		must(h.t, os.MkdirAll(filepath.Join(rd, "blobs"), 0o755))
		must(h.t, os.WriteFile(filepath.Join(rd, "blobs", etag), []byte(content), 0o644))
		link := filepath.Join(snap, name)
		must(h.t, os.MkdirAll(filepath.Dir(link), 0o755))
		rel, _ := filepath.Rel(filepath.Dir(link), filepath.Join(rd, "blobs", etag))
		must(h.t, os.Symlink(rel, link))
	}
	if branch != "" {
		must(h.t, os.MkdirAll(filepath.Join(rd, "refs"), 0o755))
		must(h.t, os.WriteFile(filepath.Join(rd, "refs", branch), []byte(commit), 0o644))
	}
	return snap
}

func TestHubCache(t *testing.T) {
	root := t.TempDir()
	h := hubCache{t, root}
	c1, c2 := strings.Repeat("1", 40), strings.Repeat("2", 40)
	files := map[string]string{"config.json": `{"model_type":"qwen3"}`, "model.safetensors": "weights", "sub/extra.json": "{}"}
	s1 := h.snapshot("Qwen/Qwen3-0.6B", "main", c1, files)
	s2 := h.snapshot("Qwen/Qwen3-0.6B", "v2", c2, files)
	env := Env{OllamaModels: t.TempDir(), HFCache: root}
	for _, tc := range []struct{ ref, path, commit string }{
		{"Qwen/Qwen3-0.6B", s1, c1},
		{"Qwen/Qwen3-0.6B@main", s1, c1},
		{"Qwen/Qwen3-0.6B@v2", s2, c2},
		{"Qwen/Qwen3-0.6B@" + c2, s2, c2},
	} {
		r, err := env.Resolve(tc.ref)
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		if r.Kind != KindHF || r.Path != tc.path || r.Commit != tc.commit || r.Name != "Qwen/Qwen3-0.6B" {
			t.Errorf("%s: %+v", tc.ref, r)
		}
	}
	// The snapshot is a folder the engine opens like any other: its config reads through links.
	if b, err := os.ReadFile(filepath.Join(s1, "config.json")); err != nil || !strings.Contains(string(b), "qwen3") {
		t.Errorf("config through symlink: %q %v", b, err)
	}
}

func TestHubCacheBroken(t *testing.T) {
	root := t.TempDir()
	h := hubCache{t, root}
	env := Env{OllamaModels: t.TempDir(), HFCache: root}
	c := strings.Repeat("3", 40)

	// A ref whose commit has no snapshot: the cache was pruned under the ref.
	rd := RepoDir(root, "z-lab/Qwen3-4B-DFlash-b16")
	must(t, os.MkdirAll(filepath.Join(rd, "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(c+"\n"), 0o644))

	// A snapshot file whose blob was deleted.
	snap := h.snapshot("org/missing-blob", "main", c, map[string]string{"config.json": "{}", "model.safetensors": "w"})
	target, _ := os.Readlink(filepath.Join(snap, "model.safetensors"))
	must(t, os.Remove(filepath.Join(snap, target)))

	h.snapshot("org/noconfig", "main", c, map[string]string{"tokenizer.json": "{}"})
	rd = RepoDir(root, "org/badref")
	must(t, os.MkdirAll(filepath.Join(rd, "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(rd, "refs", "main"), []byte("not-a-commit"), 0o644))

	for _, tc := range []struct{ ref, want string }{
		{"z-lab/Qwen3-4B-DFlash-b16", "dangling ref"},
		{"org/missing-blob", "model.safetensors links to blob"},
		{"org/noconfig", "has no config.json"},
		{"org/badref", "not a commit hash"},
		{"org/missing-blob@dev", "revision dev was never downloaded"},
		{"Qwen/Qwen3-0.6B", "dflash pull Qwen/Qwen3-0.6B"},
	} {
		_, err := env.Resolve(tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.ref, err, tc.want)
		}
	}
	// An unknown Org/Name is looked for in both stores, and the error names both.
	_, err := env.Resolve("Qwen/Qwen3-0.6B")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "ollama pull Qwen/Qwen3-0.6B:latest") {
		t.Errorf("unknown id: %v", err)
	}
}

func TestPathsWin(t *testing.T) {
	// An existing folder is opened as a path even when it is shaped like a hub id, and a
	// missing file is reported as one, not looked up in a store.
	dir := t.TempDir()
	t.Chdir(dir)
	must(t, os.MkdirAll("Qwen/Qwen3-0.6B", 0o755))
	must(t, os.WriteFile("stories.bin", []byte("x"), 0o644))
	env := Env{OllamaModels: t.TempDir(), HFCache: t.TempDir()}
	for ref, name := range map[string]string{"Qwen/Qwen3-0.6B": "Qwen3-0.6B", "stories.bin": "stories", dir: filepath.Base(dir)} {
		r, err := env.Resolve(ref)
		if err != nil || r.Kind != KindPath || r.Path != ref || r.Name != name {
			t.Errorf("%s: %+v %v", ref, r, err)
		}
	}
	for _, ref := range []string{"model.gguf", "./nope", "/abs/nope"} {
		if _, err := env.Resolve(ref); err == nil || !strings.Contains(err.Error(), "no such file or folder") || errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v", ref, err)
		}
	}
	if _, err := env.Resolve("not a name!"); err == nil || !strings.Contains(err.Error(), "not a path") {
		t.Errorf("garbage: %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("OLLAMA_MODELS", "/o")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", "/hf")
	if e := FromEnv(); e.OllamaModels != "/o" || e.HFCache != "/hf/hub" {
		t.Errorf("%+v", e)
	}
	t.Setenv("HF_HUB_CACHE", "/cache")
	if e := FromEnv(); e.HFCache != "/cache" {
		t.Errorf("%+v", e)
	}
}
