// Package ollamatest builds ollama model stores in temporary folders for tests, laid out as
// `ollama pull` leaves them: each layer's content under blobs/sha256-<hex>, and a manifest under
// manifests/<host>/<namespace>/<model>/<tag> listing the layers with their media types, digests
// and sizes. It owns nothing else and is imported by tests only.
package ollamatest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/engine/ref"
)

// Layer is one layer to store: its media type (ref.MediaModel, ref.MediaTemplate, ...) and
// content.
type Layer struct {
	Media   string
	Content []byte
}

// Write stores the layers under root and the manifest of registry.ollama.ai/library/model:tag
// listing them in order, and returns the manifest's path.
func Write(tb testing.TB, root, model, tag string, layers ...Layer) string {
	tb.Helper()
	type entry struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	blob := func(media string, content []byte) entry {
		sum := sha256.Sum256(content)
		h := hex.EncodeToString(sum[:])
		p := filepath.Join(root, "blobs", "sha256-"+h)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			tb.Fatal(err)
		}
		return entry{MediaType: media, Digest: "sha256:" + h, Size: int64(len(content))}
	}
	m := struct {
		SchemaVersion int     `json:"schemaVersion"`
		MediaType     string  `json:"mediaType"`
		Config        entry   `json:"config"`
		Layers        []entry `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.docker.distribution.manifest.v2+json",
		Config: blob("application/vnd.docker.container.image.v1+json", []byte(`{"model_format":"gguf"}`))}
	for _, l := range layers {
		m.Layers = append(m.Layers, blob(l.Media, l.Content))
	}
	data, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	mp := filepath.Join(root, "manifests", "registry.ollama.ai", "library", model, tag)
	if err := os.MkdirAll(filepath.Dir(mp), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(mp, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return mp
}

// Model is the model layer of the GGUF file at path.
func Model(tb testing.TB, path string) Layer {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return Layer{Media: ref.MediaModel, Content: b}
}
