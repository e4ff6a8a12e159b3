package backend

import (
	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/server"
)

// info is a model's listing, taken whole from its description: the listing is the same before and
// after the model loads, and /api/tags, /api/show and /v1/models can never disagree with what
// `dflash run` opens. The context length is the model's, capped at ctxCap as a loaded model's is.
func info(name string, d *engine.Description, ctxCap int) server.ModelInfo {
	in := server.ModelInfo{
		Name: name, Family: d.Family, ParameterSize: engine.ParameterSize(d.Parameters),
		Quantization: d.DType, Format: d.Format, Size: d.Size, ModifiedAt: d.ModifiedAt,
		ContextLength: contextLength(d, ctxCap), ModelContext: max(d.Context, 0), Template: d.Template.String(),
	}
	if len(d.Drafts) > 0 {
		in.Draft = d.Drafts[0].Name
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
