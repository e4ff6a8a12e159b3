package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/engine/ref"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
)

// isDraftFolder says the config.json of a folder (or a draft GGUF) is a DFlash or DFlash2 draft's.
func isDraftFolder(dir string) bool {
	hc, err := dflash.LoadConfig(dir) // a draft GGUF's config.json too
	return err == nil && (dflash2.Detect(hc) || slices.Contains(hc.Architectures, dflash.Arch))
}

func cmdList(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("list", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("list takes no arguments")
	}
	env := ref.FromEnv()
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTORE\tFAMILY\tPARAMETERS\tTYPE\tSIZE\tDRAFTS")
	for _, ent := range env.List() {
		store := "hf"
		if ent.Kind == ref.KindOllama {
			store = "ollama"
		}
		family, params, typ, drafts := "-", "-", "-", "-"
		switch {
		case ent.Err != nil:
			typ = "broken: " + firstLine(ent.Err.Error())
		case ent.Kind == ref.KindOllama:
			typ = "gguf"
		case isDraftFolder(ent.Resolved.Path):
			typ = "draft"
		default:
			d, err := engine.Describe(engine.Options{Model: ent.Resolved.Path})
			if err != nil {
				typ = "broken: " + firstLine(err.Error())
				break
			}
			family, params, typ = d.Family, paramLabel(d.Parameters), d.DType
			var fit []string
			for _, c := range engine.DraftCandidates(d.Config, ent.Name, &env) {
				if c.Err == nil {
					fit = append(fit, c.Ref)
				}
			}
			if len(fit) > 0 {
				drafts = strings.Join(fit, ",")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ent.Name, store, family, params, typ, humanBytes(ent.Size), drafts)
	}
	return tw.Flush()
}

func cmdShow(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("show", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one model: dflash show NAME (a path, an ollama name or a Hugging Face id)")
	}
	env := ref.FromEnv()
	r, err := env.Resolve(fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "name        %s\nfrom        %s (%s)\n", r.Name, r.Path, r.Kind)
	if r.Commit != "" {
		fmt.Fprintf(stdout, "commit      %s (%s)\n", r.Commit, r.Revision)
	}
	if o := r.Ollama; o != nil {
		fmt.Fprintf(stdout, "manifest    %s\nsize        %s\n", o.Manifest, humanBytes(o.Size))
		if o.System != "" {
			fmt.Fprintf(stdout, "system      %q\n", o.System)
		}
		if len(o.Params) > 0 {
			fmt.Fprintf(stdout, "params      %v\n", o.Params)
		}
		if o.Template != "" {
			fmt.Fprintf(stdout, "template\n%s\n", indent(o.Template))
		}
		fmt.Fprintln(stdout, "applied     the template layer renders chats (as a Go template), the system layer is the default system message, the params layer the default options")
		return nil
	}
	if isDraftFolder(r.Path) {
		fmt.Fprintln(stdout, "type        DFlash draft (dflash show its target to see whether it fits)")
		return nil
	}
	d, err := engine.Describe(engine.Options{Model: r.Path})
	if err != nil {
		return err
	}
	c := d.Config
	fmt.Fprintf(stdout, "family      %s (%s)\nparameters  %s (%d)\ntype        %s\ncontext     %d\n", d.Family, c.Arch, paramLabel(d.Parameters), d.Parameters, d.DType, d.Context)
	fmt.Fprintf(stdout, "shape       %d layers, hidden %d, %d heads (%d kv), vocab %d\n", c.Layers, c.Hidden, c.Heads, c.KVHeads, c.Vocab)
	if line := kvCacheLine(d); line != "" {
		fmt.Fprintf(stdout, "kv cache    %s\n", line)
	}
	if len(d.TensorTypes) > 0 {
		// What the loader keeps: quantized types stay quantized (kernel.NewQuant), F16 widens to
		// F32, so this is also what a decode step reads.
		var parts []string
		for _, typ := range slices.Sorted(maps.Keys(d.TensorTypes)) {
			parts = append(parts, fmt.Sprintf("%d %s", d.TensorTypes[typ], typ))
		}
		fmt.Fprintf(stdout, "tensors     %s (quantized ones computed as stored)\n", strings.Join(parts, ", "))
	}
	kinds := map[engine.TemplateKind]string{engine.TemplateNone: "none (no tokenizer)", engine.TemplateModel: "the model's own",
		engine.TemplateChatML: "ChatML (fallback: the vocabulary has its tokens)", engine.TemplatePlain: "plain (fallback)",
		engine.TemplateOllama: "the ollama manifest's template layer"}
	fmt.Fprintf(stdout, "template    %s\n", kinds[d.Template.Kind])
	var stops []string
	for _, id := range d.Stop {
		s := fmt.Sprint(id)
		if d.Tok != nil {
			s += fmt.Sprintf(" %q", d.Tok.Decode([]int{id}))
		}
		stops = append(stops, s)
	}
	fmt.Fprintf(stdout, "stop        %s\n", strings.Join(stops, ", "))
	cands := engine.DraftCandidates(c, r.Name, &env)
	if len(cands) == 0 {
		fmt.Fprintf(stdout, "drafts      none named %s-DFlash* in the hub cache\n", r.Name[strings.LastIndex(r.Name, "/")+1:])
	}
	for _, dc := range cands {
		if dc.Err == nil {
			fmt.Fprintf(stdout, "draft       %s fits (%s, block %d, %d layers)\n", dc.Ref, dc.Info.Arch, dc.Info.BlockSize, dc.Info.Layers)
		} else {
			fmt.Fprintf(stdout, "draft       %s does not fit: %s\n", dc.Ref, firstLine(dc.Err.Error()))
		}
	}
	return nil
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func paramLabel(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fK", float64(n)/1e3)
}

// kvCacheLine says what a sequence's key/value cache of a dense model costs as run and serve
// would make it under the current --kv-cache kind ("bf16, 112 MiB per 1024 positions"): the
// context a user can afford follows from it. It is "" for hybrid and shapeless models.
func kvCacheLine(d *engine.Description) string {
	c := d.Config
	if d.Hybrid() != nil || c.HeadDim <= 0 || c.KVHeads <= 0 {
		return ""
	}
	a := d.KVAttention()
	kind := "f32"
	if a.CacheBF16() {
		kind = "bf16"
	}
	return fmt.Sprintf("%s, %.0f MiB per 1024 positions", kind, float64(a.KVBytes(c.Layers, 1024))/(1<<20))
}
