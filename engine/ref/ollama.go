package ref

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Media types of an ollama manifest's layers.
const (
	MediaModel    = "application/vnd.ollama.image.model"
	MediaTemplate = "application/vnd.ollama.image.template"
	MediaSystem   = "application/vnd.ollama.image.system"
	MediaParams   = "application/vnd.ollama.image.params"
)

// OllamaName is a parsed ollama model name; empty parts take ollama's defaults.
type OllamaName struct{ Host, Namespace, Model, Tag string }

func parseOllama(m []string) OllamaName {
	n := OllamaName{Host: m[1], Namespace: m[2], Model: m[3], Tag: m[4]}
	if n.Host != "" && n.Namespace == "" {
		// "ns/name": the regexp's lazy host group leaves one part for the namespace, but
		// guard against its taking it.
		n.Namespace, n.Host = n.Host, ""
	}
	if n.Host == "" {
		n.Host = "registry.ollama.ai"
	}
	if n.Namespace == "" {
		n.Namespace = "library"
	}
	if n.Tag == "" {
		n.Tag = "latest"
	}
	return n
}

// Short is the name as ollama lists it: namespace and host only when not the defaults.
func (n OllamaName) Short() string {
	s := n.Model + ":" + n.Tag
	if n.Namespace != "library" || n.Host != "registry.ollama.ai" {
		s = n.Namespace + "/" + s
	}
	if n.Host != "registry.ollama.ai" {
		s = n.Host + "/" + s
	}
	return s
}

// OllamaModel is what an ollama manifest carries beside the GGUF blob. The engine sets the chat
// template and the default options from it.
type OllamaModel struct {
	Name     OllamaName
	Manifest string // the manifest file
	// Template is the chat template (Go text/template syntax, ollama's), System the default
	// system prompt; both "" when the manifest has no such layer.
	Template, System string
	// Params is the params layer: default options such as "stop", "temperature", "num_ctx".
	Params map[string]any
	// Size is the model blob's size.
	Size int64
}

type manifest struct {
	SchemaVersion int     `json:"schemaVersion"`
	MediaType     string  `json:"mediaType"`
	Config        layer   `json:"config"`
	Layers        []layer `json:"layers"`
}

type layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// smallLayer bounds the layers whose content is hashed on every resolution: templates, system
// prompts and params are a few kB, so checking them is free, while hashing a multi-GB model blob
// would cost seconds on every start. The model blob is checked by name and size only (Verify
// hashes it too).
const smallLayer = 1 << 20

// resolveOllama reads manifests/<host>/<ns>/<name>/<tag> and checks every layer it uses: the
// digest well-formed, the blob present at blobs/sha256-<hex> with the manifest's size, and the
// small layers' content hashing to their digest.
func (e Env) resolveOllama(ref string, n OllamaName) (*Resolved, error) {
	mp := filepath.Join(e.OllamaModels, "manifests", n.Host, n.Namespace, n.Model, n.Tag)
	data, err := os.ReadFile(mp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: ollama name %s: no manifest %s (store: OLLAMA_MODELS=%s); get it with: ollama pull %s",
			ErrNotFound, n.Short(), mp, e.OllamaModels, n.Short())
	}
	if err != nil {
		return nil, fmt.Errorf("ollama %s: %w", n.Short(), err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("ollama %s: manifest %s: %w", n.Short(), mp, err)
	}
	om := &OllamaModel{Name: n, Manifest: mp}
	r := &Resolved{Ref: ref, Kind: KindOllama, Name: n.Short(), Ollama: om}
	for _, l := range m.Layers {
		switch l.MediaType {
		case MediaModel, MediaTemplate, MediaSystem, MediaParams:
		default:
			continue // licenses, projectors, adapters: not ours to use
		}
		bp, err := e.blob(l)
		if err != nil {
			return nil, fmt.Errorf("ollama %s: layer %s: %w", n.Short(), l.MediaType, err)
		}
		if l.MediaType == MediaModel {
			if r.Path != "" {
				return nil, fmt.Errorf("ollama %s: manifest %s has two model layers", n.Short(), mp)
			}
			r.Path, om.Size = bp, l.Size
			continue
		}
		content, err := readVerified(bp, l)
		if err != nil {
			return nil, fmt.Errorf("ollama %s: layer %s: %w", n.Short(), l.MediaType, err)
		}
		switch l.MediaType {
		case MediaTemplate:
			om.Template = string(content)
		case MediaSystem:
			om.System = string(content)
		case MediaParams:
			if err := json.Unmarshal(content, &om.Params); err != nil {
				return nil, fmt.Errorf("ollama %s: params layer %s: %w", n.Short(), bp, err)
			}
		}
	}
	if r.Path == "" {
		return nil, fmt.Errorf("ollama %s: manifest %s has no %s layer", n.Short(), mp, MediaModel)
	}
	return r, nil
}

// blob returns the path of a layer's blob after checking its name and size against the manifest.
func (e Env) blob(l layer) (string, error) {
	if !digestRE.MatchString(l.Digest) {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", l.Digest)
	}
	bp := filepath.Join(e.OllamaModels, "blobs", strings.Replace(l.Digest, ":", "-", 1))
	st, err := os.Stat(bp)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("blob %s is missing (the store is incomplete: ollama pull again)", bp)
	}
	if err != nil {
		return "", err
	}
	if st.Size() != l.Size {
		return "", fmt.Errorf("blob %s has %d bytes, the manifest says %d (truncated or replaced: ollama pull again)", bp, st.Size(), l.Size)
	}
	return bp, nil
}

func readVerified(bp string, l layer) ([]byte, error) {
	if l.Size > smallLayer {
		return nil, fmt.Errorf("blob %s: %d bytes is too large for a %s layer", bp, l.Size, l.MediaType)
	}
	content, err := os.ReadFile(bp)
	if err != nil {
		return nil, err
	}
	if err := checkDigest(bp, sha256.Sum256(content), l.Digest); err != nil {
		return nil, err
	}
	return content, nil
}

func checkDigest(bp string, sum [32]byte, digest string) error {
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return fmt.Errorf("blob %s: content hashes to %s, its name and the manifest say %s (corrupt: ollama pull again)", bp, got, digest)
	}
	return nil
}

// VerifyModelBlob hashes an ollama model blob in full against the digest its name carries: the
// check resolution skips for its cost (a GB takes a few seconds).
func VerifyModelBlob(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("blob %s: %w", path, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return checkDigest(path, sum, strings.Replace(filepath.Base(path), "-", ":", 1))
}
