package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/server"
)

// info is a model's listing, taken whole from its description: the listing is the same before and
// after the model loads, and /api/tags, /api/show and /v1/models can never disagree with what
// `dflash run` opens. The context length is the model's, capped at ctxCap as a loaded model's is.
// digest is d.Digest(), computed once by the caller since every listing repeats it.
func info(name string, d *engine.Description, ctxCap int, digest string) server.ModelInfo {
	in := server.ModelInfo{
		Name: name, Family: d.Family, ParameterSize: engine.ParameterSize(d.Parameters),
		Quantization: d.DType, Format: d.Format, Size: d.Size, ModifiedAt: d.ModifiedAt, Digest: digest,
		ContextLength: contextLength(d, ctxCap), ModelContext: max(d.Context, 0), Template: d.Template.String(),
		System: d.Template.System,
	}
	if len(d.Drafts) > 0 {
		in.Draft = d.Drafts[0].Name
	}
	if len(d.Params) > 0 {
		// The params came from JSON, so they marshal back.
		if b, err := json.Marshal(d.Params); err == nil {
			in.Options = string(b)
		}
	}
	return in
}

// contextLength is the cache capacity a loaded model gets: its own maximum, at most ctxCap.
func contextLength(d *engine.Description, ctxCap int) int {
	if d.Context <= 0 || d.Context > ctxCap {
		return ctxCap
	}
	return d.Context
}

// unavailable is the listing of a model that failed its startup checks: its name, its error, and a
// digest of both with its paths (still 64 hex digits, so clients that print the ID column work).
func unavailable(s Spec, err error) server.ModelInfo {
	sum := sha256.Sum256(fmt.Appendf(nil, "unavailable\t%s\t%s\t%s\t%v", s.Name, s.Path, s.Draft, err))
	return server.ModelInfo{Name: s.Name, Digest: hex.EncodeToString(sum[:]), Error: err.Error()}
}
