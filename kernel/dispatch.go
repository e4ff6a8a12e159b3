package kernel

import (
	"fmt"
	"os"
	"strings"
)

// impl is one kernel path. Every path computes each output element with an accumulation order
// that depends only on K, never on rows or on which panels a call covers, so the batch-width
// invariant holds within a path and splitting panels across threads changes no bit.
type impl struct {
	name string
	// panels computes output columns [p0*Panel, min(p1*Panel, N)) of all rows; y and x are
	// exactly rows*N and rows*K long, K > 0.
	panels func(m *Matrix, y, x []float32, rows, p0, p1 int)
	// qpanels is panels for a quantized matrix, with the activations quantized for its type
	// (see qact.go): a holds rows rows of K/block activation blocks.
	qpanels func(m *Matrix, y []float32, a []byte, rows, p0, p1 int)
	// splitBF16, when set, makes bf16 products take their activations as bf16 planes (the
	// AMX path, amx.go): it writes x (rows x k) split into dst, once per call before any
	// split across threads, and hpanels then computes panels [p0, p1) of a bf16 matrix from
	// those planes h. Paths without it take bf16 products through panels.
	splitBF16 func(dst []uint16, x []float32, rows, k int)
	hpanels   func(m *Matrix, y []float32, h []uint16, rows, p0, p1 int)
	// quantActs quantizes the len(x)/block blocks of x as kind into dst (qact.go), bitwise as
	// quantizeActsGo does.
	quantActs func(kind actKind, dst []byte, x []float32)
	dot       func(a, b []float32) float32
	axpy      func(y []float32, a float32, x []float32)
	// expShift sets dst[i] = exp((src[i]-shift)*scale) over len(dst) and returns the sum;
	// src is at least as long as dst.
	expShift func(dst, src []float32, shift, scale float32) float32
	// axpyRowsMax and dotRows are AxpyRowsMax and DotRows with m starting at its first
	// element and long enough (the exported wrappers check).
	axpyRowsMax func(y, a []float32, m *float32, ld int) float32
	dotRows     func(out, x []float32, m *float32, ld int)
	// scoresRows, weightedRows8 and maxF32 are ScoresRows, WeightedRows8 and MaxF32 past the
	// wrappers' checks.
	scoresRows    func(y *float32, ldy int, qt *float32, nq int, kt *float32, ldk, d, n int)
	weightedRows8 func(out, p *float32, ldp, nq int, v *float32, ldv, n int)
	maxF32        func(x []float32) float32
	siluMul       func(g, u []float32) // SiluMul with len(u) == len(g)
	// dotsRows and axpyRows are DotsRows and AxpyRows past the wrappers' checks.
	dotsRows func(y *float32, ldy int, q *float32, ldq, nq int, k *float32, ldk, d, n int, scale float32)
	axpyRows func(out *float32, ldo int, p *float32, ldp, nq int, v *float32, ldv, d, n int)
	// dotsRowsBF16 and axpyRowsBF16 are DotsRowsBF16 and AxpyRowsBF16 past the wrappers'
	// checks: bitwise dotsRows and axpyRows over the widened keys and values.
	dotsRowsBF16 func(y *float32, ldy int, q *float32, ldq, nq int, k *uint16, ldk, d, n int, scale float32)
	axpyRowsBF16 func(out *float32, ldo int, p *float32, ldp, nq int, v *uint16, ldv, d, n int)
	// deltaRule, when set, is DeltaRule in one pass for dv a multiple of 16 (the wrapper checks
	// lengths); paths without it compose their axpy.
	deltaRule func(s, k, q, u, o *float32, dk, dv int, decay float32)
	// rowSplitFrom is the least rows for which a forward should give each core its own rows
	// (every core then streams all the weights) rather than split each product's panels
	// (each core streams half); 0 means the caller's default. A path whose multi-row products
	// cost about what one row costs (amx) sets it past the verification widths, where
	// splitting rows would double the weight traffic for no arithmetic saved.
	rowSplitFrom int
}

var (
	portable = &impl{name: "go", panels: panelsGo, qpanels: qpanelsGo, quantActs: quantizeActsGo, dot: dotGo, axpy: axpyGo, expShift: expShiftGo,
		axpyRowsMax: axpyRowsMaxGo, dotRows: dotRowsGo, scoresRows: scoresRowsGo, weightedRows8: weightedRows8Go, maxF32: maxGo, siluMul: siluMulGo,
		dotsRows: dotsRowsGo, axpyRows: axpyRowsGo, dotsRowsBF16: dotsRowsBF16Go, axpyRowsBF16: axpyRowsBF16Go}
	// registry lists paths in preference order; architecture files prepend theirs in init.
	registry = []*impl{portable}
	active   = portable
)

// register adds a path the CPU can run, ahead of the portable one.
func register(p *impl) { registry = append([]*impl{p}, registry...) }

func init() {
	if env := strings.TrimSpace(os.Getenv("DFLASH_KERNEL")); env != "" {
		if err := SetPath(env); err != nil {
			fmt.Fprintf(os.Stderr, "dflash: DFLASH_KERNEL: %v; using %s\n", err, registry[0].name)
			active = registry[0]
		}
		return
	}
	active = registry[0]
}

// Paths lists the kernel paths this CPU can run, fastest first; "go" (portable) is always last.
func Paths() []string {
	out := make([]string, len(registry))
	for i, p := range registry {
		out[i] = p.name
	}
	return out
}

// amxStatus says why the "amx" path is or is not registered (see AMXStatus); architecture
// files set it during package initialization.
var amxStatus = "not built: AMX kernels need amd64 assembly (this build is portable)"

// AMXStatus reports whether this CPU and OS run the "amx" path, and if not, why (the CPU lacks
// AMX-BF16, the OS does not grant tile data, ...), for benchmark and --stats output.
func AMXStatus() string { return amxStatus }

// Path names the active kernel path.
func Path() string { return active.name }

// SetPath selects a kernel path by name. It is not safe to call while products run; tests and
// the CLI call it before any work starts.
func SetPath(name string) error {
	for _, p := range registry {
		if p.name == name {
			active = p
			return nil
		}
	}
	return fmt.Errorf("kernel path %q not available on this CPU (have %s)", name, strings.Join(Paths(), ", "))
}

// RowSplitFrom is the least rows for which the active path wants a forward split by rows across
// cores rather than by panels within each product (see impl.rowSplitFrom); 0 leaves the choice
// to the caller. It changes who computes a row, never its bits.
func RowSplitFrom() int { return active.rowSplitFrom }

// Dot returns sum a[i]*b[i] over len(a) elements.
func Dot(a, b []float32) float32 { return active.dot(a, b[:len(a)]) }

// Axpy does y[i] += a*x[i] over len(y) elements.
func Axpy(y []float32, a float32, x []float32) { active.axpy(y, a, x[:len(y)]) }
