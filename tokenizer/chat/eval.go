package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Values inside the engine mirror Python's, because templates are written against jinja2:
// nil is None, bool, int64, float64, string, []any (list or tuple; never mutated), *Dict (an
// insertion-ordered str-keyed dict, so tojson keeps key order like Python's json.dumps), and the
// engine's own undefined, *namespace, *loopObj, builtin and method values.

// Dict is an insertion-ordered mapping from strings to values. Pass one in Options.Tools or
// Options.Extra to keep key order in tojson output; plain Go maps are ordered by sorted key.
type Dict struct {
	keys []string
	m    map[string]any
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[string]any{}} }

// Set adds or replaces key; a new key goes last.
func (d *Dict) Set(key string, v any) *Dict {
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
	return d
}

// Get returns the value at key.
func (d *Dict) Get(key string) (any, bool) { v, ok := d.m[key]; return v, ok }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string { return append([]string(nil), d.keys...) }

// undefined is jinja2's default Undefined: it renders as "", is false, iterates as empty and has
// length 0, but taking an attribute or item of it, calling it or doing arithmetic with it fails.
type undefined struct{ what string }

type namespace struct{ d *Dict }

type loopObj struct {
	items []any
	i     int
}

type builtin func(st *state, args []any, kw *Dict) (any, error)

type method struct {
	recv any
	name string
}

type state struct {
	out    strings.Builder
	frames []map[string]any // innermost last; the first holds the render variables
	ctl    int              // ctlBreak or ctlContinue while unwinding a loop body
	steps  int              // work done, bounded by maxSteps
	depth  int              // macro calls under way, bounded by maxMacroDepth
}

// maxSteps bounds the work of one render (statements run, loop iterations, range items): real
// chat templates need a few per message, and a template must not be able to hang the caller.
var maxSteps = 50_000_000 // a variable only so a test can lower it

func (st *state) step(n int) error {
	st.steps += n
	if st.steps > maxSteps {
		return fmt.Errorf("render exceeds %d steps", maxSteps)
	}
	return nil
}

// maxRepeat bounds "s * n" so a template cannot exhaust memory with one expression.
const maxRepeat = 1 << 24

const (
	ctlNone = iota
	ctlBreak
	ctlContinue
)

// renderError carries the template line of the construct that failed.
type renderError struct {
	line int
	err  error
}

func (e *renderError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *renderError) Unwrap() error { return e.err }

// at attaches a line to err unless an inner construct already did.
func at(line int, err error) error {
	if err == nil {
		return nil
	}
	var re *renderError
	if errors.As(err, &re) {
		return err
	}
	return &renderError{line, err}
}

func (st *state) lookup(n string) any {
	for i := len(st.frames) - 1; i >= 0; i-- {
		if v, ok := st.frames[i][n]; ok {
			return v
		}
	}
	if g, ok := globals[n]; ok {
		return g
	}
	return undefined{fmt.Sprintf("'%s' is undefined", n)}
}

func (st *state) exec(nodes []node) error {
	for _, n := range nodes {
		if st.ctl != ctlNone {
			return nil
		}
		if err := st.step(1); err != nil {
			return err
		}
		switch n := n.(type) {
		case textNode:
			st.out.WriteString(n.s)
		case outNode:
			v, err := st.eval(n.e)
			if err != nil {
				return at(n.line, err)
			}
			st.out.WriteString(str(v))
		case ifNode:
			done := false
			for i, c := range n.conds {
				v, err := st.eval(c)
				if err != nil {
					return err
				}
				if truthy(v) {
					if err := st.exec(n.bodies[i]); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done {
				if err := st.exec(n.els); err != nil {
					return err
				}
			}
		case forNode:
			if err := st.execFor(n); err != nil {
				return err
			}
		case setNode:
			if err := st.execSet(n); err != nil {
				return err
			}
		case macroNode:
			// The macro sees the scopes where it is defined, not those of its caller (jinja2's
			// lexical scoping); the frames are shared maps, so later top-level sets are visible.
			st.frames[len(st.frames)-1][n.name] = &macro{n, append([]map[string]any(nil), st.frames...)}
		case loopCtl:
			if n.brk {
				st.ctl = ctlBreak
			} else {
				st.ctl = ctlContinue
			}
			return nil
		default:
			return fmt.Errorf("internal: unknown node %T", n)
		}
	}
	return nil
}

func (st *state) execFor(n forNode) error {
	it, err := st.eval(n.iter)
	if err != nil {
		return at(n.line, err)
	}
	items, err := iterate(it)
	if err != nil {
		return at(n.line, fmt.Errorf("for loop: %w", err))
	}
	bind := func(f map[string]any, v any) error {
		if len(n.targets) == 1 {
			f[n.targets[0]] = v
			return nil
		}
		tup, ok := v.([]any)
		if !ok || len(tup) != len(n.targets) {
			return at(n.line, fmt.Errorf("for loop: cannot unpack %s into %d names", typeName(v), len(n.targets)))
		}
		for i, t := range n.targets {
			f[t] = tup[i]
		}
		return nil
	}
	if n.cond != nil { // the filter runs before the loop, so loop.length counts only kept items
		var kept []any
		for _, v := range items {
			f := map[string]any{}
			if err := bind(f, v); err != nil {
				return err
			}
			st.frames = append(st.frames, f)
			c, err := st.eval(n.cond)
			st.frames = st.frames[:len(st.frames)-1]
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, v)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return st.exec(n.els)
	}
	for i, v := range items {
		if err := st.step(1); err != nil {
			return at(n.line, err)
		}
		// Each iteration has a fresh scope: a set inside the body is gone at the next
		// iteration and after the loop (jinja2 semantics; namespace() is the way out).
		f := map[string]any{"loop": &loopObj{items, i}}
		if err := bind(f, v); err != nil {
			return err
		}
		st.frames = append(st.frames, f)
		err := st.exec(n.body)
		st.frames = st.frames[:len(st.frames)-1]
		if err != nil {
			return err
		}
		ctl := st.ctl
		st.ctl = ctlNone
		if ctl == ctlBreak {
			break
		}
	}
	return nil
}

func (st *state) execSet(n setNode) error {
	var v any
	if n.e == nil {
		saved := st.out
		st.out = strings.Builder{}
		err := st.exec(n.body)
		v = st.out.String()
		st.out = saved
		if err != nil {
			return err
		}
	} else {
		var err error
		if v, err = st.eval(n.e); err != nil {
			return at(n.line, err)
		}
	}
	top := st.frames[len(st.frames)-1]
	if n.nsAttr != "" {
		ns, ok := st.lookup(n.targets[0]).(*namespace)
		if !ok {
			return at(n.line, fmt.Errorf("set %s.%s: %s is not a namespace()", n.targets[0], n.nsAttr, n.targets[0]))
		}
		ns.d.Set(n.nsAttr, v)
		return nil
	}
	if len(n.targets) == 1 {
		top[n.targets[0]] = v
		return nil
	}
	tup, ok := v.([]any)
	if !ok || len(tup) != len(n.targets) {
		return at(n.line, fmt.Errorf("set: cannot unpack %s into %d names", typeName(v), len(n.targets)))
	}
	for i, t := range n.targets {
		top[t] = tup[i]
	}
	return nil
}

func (st *state) evalArgs(args []expr, kws []kwarg) ([]any, *Dict, error) {
	vals := make([]any, len(args))
	for i, a := range args {
		v, err := st.eval(a)
		if err != nil {
			return nil, nil, err
		}
		vals[i] = v
	}
	var kw *Dict
	if len(kws) > 0 {
		kw = NewDict()
		for _, k := range kws {
			v, err := st.eval(k.e)
			if err != nil {
				return nil, nil, err
			}
			kw.Set(k.n, v)
		}
	}
	return vals, kw, nil
}

func (st *state) eval(e expr) (any, error) {
	switch e := e.(type) {
	case lit:
		return e.v, nil
	case name:
		return st.lookup(e.n), nil
	case attrX:
		o, err := st.eval(e.obj)
		if err != nil {
			return nil, err
		}
		v, err := getAttr(o, e.n)
		return v, at(e.line, err)
	case indexX:
		o, err := st.eval(e.obj)
		if err != nil {
			return nil, err
		}
		k, err := st.eval(e.key)
		if err != nil {
			return nil, err
		}
		v, err := getItem(o, k)
		return v, at(e.line, err)
	case sliceX:
		o, err := st.eval(e.obj)
		if err != nil {
			return nil, err
		}
		var b [3]any
		for i, x := range []expr{e.lo, e.hi, e.step} {
			if x != nil {
				if b[i], err = st.eval(x); err != nil {
					return nil, err
				}
			}
		}
		v, err := slice(o, b[0], b[1], b[2])
		return v, at(e.line, err)
	case callX:
		f, err := st.eval(e.fn)
		if err != nil {
			return nil, err
		}
		args, kw, err := st.evalArgs(e.args, e.kws())
		if err != nil {
			return nil, err
		}
		v, err := st.call(f, args, kw)
		return v, at(e.line, err)
	case filterX:
		x, err := st.eval(e.arg)
		if err != nil {
			return nil, err
		}
		args, kw, err := st.evalArgs(e.args, e.kw)
		if err != nil {
			return nil, err
		}
		v, err := filters[e.n](st, x, args, kw)
		if err != nil {
			return nil, at(e.line, fmt.Errorf("filter %s: %w", e.n, err))
		}
		return v, nil
	case testX:
		x, err := st.eval(e.arg)
		if err != nil {
			return nil, err
		}
		args, _, err := st.evalArgs(e.args, nil)
		if err != nil {
			return nil, err
		}
		ok, err := tests[e.n](x, args)
		if err != nil {
			return nil, at(e.line, fmt.Errorf("test %s: %w", e.n, err))
		}
		return ok != e.neg, nil
	case unX:
		x, err := st.eval(e.x)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch x := x.(type) {
			case int64:
				return -x, nil
			case float64:
				return -x, nil
			case bool:
				return -b2i(x), nil
			}
		case "+":
			switch x.(type) {
			case int64, float64:
				return x, nil
			case bool:
				return b2i(x.(bool)), nil
			}
		}
		return nil, at(e.line, fmt.Errorf("bad operand type for unary %s: %s", e.op, typeName(x)))
	case binX:
		l, err := st.eval(e.l)
		if err != nil {
			return nil, err
		}
		switch e.op { // short-circuit, returning an operand as Python does
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return st.eval(e.r)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return st.eval(e.r)
		}
		r, err := st.eval(e.r)
		if err != nil {
			return nil, err
		}
		v, err := binop(e.op, l, r)
		return v, at(e.line, err)
	case condX:
		c, err := st.eval(e.cond)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return st.eval(e.a)
		}
		if e.b == nil {
			return undefined{"the else branch of an inline if without else"}, nil
		}
		return st.eval(e.b)
	case listX:
		out := make([]any, len(e.items))
		for i, x := range e.items {
			v, err := st.eval(x)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case dictX:
		d := NewDict()
		for i := range e.keys {
			k, err := st.eval(e.keys[i])
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("dict literal: only string keys are supported, got %s", typeName(k))
			}
			v, err := st.eval(e.vals[i])
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	}
	return nil, fmt.Errorf("internal: unknown expression %T", e)
}

func (c callX) kws() []kwarg { return c.kw }

func (st *state) call(f any, args []any, kw *Dict) (any, error) {
	switch f := f.(type) {
	case builtin:
		return f(st, args, kw)
	case method:
		return callMethod(f.recv, f.name, args, kw)
	case *macro:
		return st.callMacro(f, args, kw)
	case *loopCycle:
		if len(args) == 0 {
			return nil, fmt.Errorf("loop.cycle needs at least one argument")
		}
		return args[f.i%len(args)], nil
	case undefined:
		return nil, errors.New(f.what)
	}
	return nil, fmt.Errorf("%s is not callable", typeName(f))
}

type loopCycle struct{ i int }

// macro is a {% macro %} bound to the scopes it was defined in.
type macro struct {
	n      macroNode
	frames []map[string]any
}

// maxMacroDepth bounds macro recursion, which the step budget alone would let overflow the stack.
const maxMacroDepth = 100

// callMacro binds the arguments as jinja2 does (positional, then keyword, then the default,
// else undefined) and returns what the body renders.
func (st *state) callMacro(m *macro, args []any, kw *Dict) (any, error) {
	n := m.n
	if len(args) > len(n.params) {
		return nil, fmt.Errorf("macro %s takes not more than %d argument(s)", n.name, len(n.params))
	}
	if kw != nil {
		for _, k := range kw.keys {
			i := slices.Index(n.params, k)
			if i < 0 {
				return nil, fmt.Errorf("macro %s takes no keyword argument %s", n.name, k)
			}
			if i < len(args) {
				return nil, fmt.Errorf("macro %s got multiple values for argument %s", n.name, k)
			}
		}
	}
	if st.depth >= maxMacroDepth {
		return nil, fmt.Errorf("macro %s: calls nested deeper than %d", n.name, maxMacroDepth)
	}
	f := map[string]any{}
	savedFrames, savedOut := st.frames, st.out
	st.frames = append(append([]map[string]any(nil), m.frames...), f)
	st.out = strings.Builder{}
	st.depth++
	defer func() { st.frames, st.out = savedFrames, savedOut; st.depth-- }()
	for i, pn := range n.params {
		var v any
		ok := false
		if kw != nil {
			v, ok = kw.Get(pn)
		}
		switch {
		case i < len(args):
			f[pn] = args[i]
		case ok:
			f[pn] = v
		case n.defaults[i] != nil:
			// Evaluated at each call, after the parameters before it are bound.
			d, err := st.eval(n.defaults[i])
			if err != nil {
				return nil, err
			}
			f[pn] = d
		default:
			f[pn] = undefined{fmt.Sprintf("'%s' is undefined", pn)}
		}
	}
	if err := st.exec(n.body); err != nil {
		return nil, err
	}
	if st.ctl != ctlNone {
		st.ctl = ctlNone
		return nil, fmt.Errorf("macro %s: break or continue outside a loop", n.name)
	}
	return st.out.String(), nil
}

func getAttr(o any, n string) (any, error) {
	switch o := o.(type) {
	case undefined:
		return nil, errors.New(o.what)
	case *Dict:
		if dictMethods[n] {
			return method{o, n}, nil
		}
		if v, ok := o.m[n]; ok {
			return v, nil
		}
	case *namespace:
		if v, ok := o.d.m[n]; ok {
			return v, nil
		}
	case string:
		if strMethods[n] {
			return method{o, n}, nil
		}
	case []any:
		if listMutators[n] {
			return nil, fmt.Errorf("list.%s: lists are immutable in chat templates (jinja2's ImmutableSandboxedEnvironment)", n)
		}
	case *loopObj:
		i, n0 := int64(o.i), int64(len(o.items))
		switch n {
		case "index":
			return i + 1, nil
		case "index0":
			return i, nil
		case "revindex":
			return n0 - i, nil
		case "revindex0":
			return n0 - i - 1, nil
		case "first":
			return i == 0, nil
		case "last":
			return i == n0-1, nil
		case "length":
			return n0, nil
		case "previtem":
			if i > 0 {
				return o.items[i-1], nil
			}
		case "nextitem":
			if i < n0-1 {
				return o.items[i+1], nil
			}
		case "cycle":
			return &loopCycle{o.i}, nil
		case "depth":
			return int64(1), nil
		case "depth0":
			return int64(0), nil
		}
	}
	return undefined{fmt.Sprintf("%s has no attribute '%s'", typeName(o), n)}, nil
}

func getItem(o, k any) (any, error) {
	switch o := o.(type) {
	case undefined:
		return nil, errors.New(o.what)
	case *Dict:
		if ks, ok := k.(string); ok {
			if v, ok := o.m[ks]; ok {
				return v, nil
			}
			return getAttr(o, ks) // jinja2 falls back to the attribute for a missing item
		}
	case *namespace:
		if ks, ok := k.(string); ok {
			return getAttr(o, ks)
		}
	case *loopObj:
		if ks, ok := k.(string); ok {
			return getAttr(o, ks)
		}
	case []any, string:
		i, ok := toInt(k)
		if !ok {
			if ks, isStr := k.(string); isStr {
				return getAttr(o, ks)
			}
			break
		}
		if s, isStr := o.(string); isStr {
			r := []rune(s)
			if i < 0 {
				i += int64(len(r))
			}
			if i >= 0 && i < int64(len(r)) {
				return string(r[i]), nil
			}
		} else {
			l := o.([]any)
			if i < 0 {
				i += int64(len(l))
			}
			if i >= 0 && i < int64(len(l)) {
				return l[i], nil
			}
		}
		return undefined{fmt.Sprintf("%s index %d out of range", typeName(o), i)}, nil
	}
	return undefined{fmt.Sprintf("%s has no item %s", typeName(o), repr(k))}, nil
}

// slice applies Python's slice semantics (negative and omitted bounds, any non-zero step).
func slice(o, lo, hi, step any) (any, error) {
	var n int
	var runes []rune
	var list []any
	isStr := false
	switch o := o.(type) {
	case string:
		isStr = true
		runes = []rune(o)
		n = len(runes)
	case []any:
		list = o
		n = len(o)
	case undefined:
		return nil, errors.New(o.what)
	default:
		return nil, fmt.Errorf("cannot slice %s", typeName(o))
	}
	bound := func(v any, def int64) (int64, error) {
		if v == nil {
			return def, nil
		}
		i, ok := toInt(v)
		if !ok {
			return 0, fmt.Errorf("slice bounds must be integers, got %s", typeName(v))
		}
		return i, nil
	}
	st, err := bound(step, 1)
	if err != nil {
		return nil, err
	}
	if st == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	var start, stop int64
	ln := int64(n)
	clamp := func(i, lowest, highest int64) int64 {
		if i < 0 {
			i += ln
			if i < lowest {
				i = lowest
			}
		} else if i > highest {
			i = highest
		}
		return i
	}
	if st > 0 {
		if start, err = bound(lo, 0); err != nil {
			return nil, err
		}
		if stop, err = bound(hi, ln); err != nil {
			return nil, err
		}
		start, stop = clamp(start, 0, ln), clamp(stop, 0, ln)
	} else {
		if start, err = bound(lo, ln-1); err != nil {
			return nil, err
		}
		if stop, err = bound(hi, -ln-1); err != nil {
			return nil, err
		}
		start, stop = clamp(start, -1, ln-1), clamp(stop, -1, ln-1)
	}
	var idx []int64
	for i := start; (st > 0 && i < stop) || (st < 0 && i > stop); i += st {
		idx = append(idx, i)
	}
	if isStr {
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, runes[i])
		}
		return string(out), nil
	}
	out := make([]any, 0, len(idx))
	for _, i := range idx {
		out = append(out, list[i])
	}
	return out, nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// toInt accepts ints and bools (Python's bool is an int), not floats.
func toInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case bool:
		return b2i(v), true
	}
	return 0, false
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		return float64(b2i(v)), true
	}
	return 0, false
}

func truthy(v any) bool {
	switch v := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *Dict:
		return len(v.keys) > 0
	}
	return true
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case undefined:
		return "undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case *Dict:
		return "dict"
	case *namespace:
		return "namespace"
	case *loopObj:
		return "loop"
	case builtin, method, *loopCycle, *macro:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

func equal(a, b any) bool {
	if fa, ok := toFloat(a); ok {
		if fb, ok := toFloat(b); ok {
			return fa == fb
		}
		return false
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case undefined:
		_, ok := b.(undefined)
		return ok
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !equal(a[i], bl[i]) {
				return false
			}
		}
		return true
	case *Dict:
		bd, ok := b.(*Dict)
		if !ok || len(a.keys) != len(bd.keys) {
			return false
		}
		for _, k := range a.keys {
			bv, ok := bd.m[k]
			if !ok || !equal(a.m[k], bv) {
				return false
			}
		}
		return true
	}
	return a == b
}

func compare(a, b any) (int, error) {
	if fa, ok := toFloat(a); ok {
		if fb, ok := toFloat(b); ok {
			switch {
			case fa < fb:
				return -1, nil
			case fa > fb:
				return 1, nil
			}
			return 0, nil
		}
	}
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			return strings.Compare(sa, sb), nil
		}
	}
	return 0, fmt.Errorf("cannot order %s and %s", typeName(a), typeName(b))
}

func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires a string on the left, got %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, v := range c {
			if equal(v, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		switch item.(type) {
		case []any, *Dict:
			return false, fmt.Errorf("unhashable type: '%s'", typeName(item))
		}
		s, ok := item.(string)
		return ok && hasKey(c, s), nil
	case *namespace:
		s, ok := item.(string)
		return ok && hasKey(c.d, s), nil
	case undefined:
		return false, nil // undefined iterates as empty, so nothing is in it
	}
	return false, fmt.Errorf("argument of type %s is not a container", typeName(container))
}

func hasKey(d *Dict, k string) bool { _, ok := d.m[k]; return ok }

func binop(op string, l, r any) (any, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", "<=", ">", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, fmt.Errorf("'%s': %w", op, err)
		}
		return op == "<" && c < 0 || op == "<=" && c <= 0 || op == ">" && c > 0 || op == ">=" && c >= 0, nil
	case "in", "not in":
		ok, err := contains(r, l)
		return ok == (op == "in"), err
	case "~":
		return str(l) + str(r), nil
	}
	if u, ok := l.(undefined); ok {
		return nil, errors.New(u.what)
	}
	if u, ok := r.(undefined); ok {
		return nil, errors.New(u.what)
	}
	switch op {
	case "+":
		switch lv := l.(type) {
		case string:
			if rv, ok := r.(string); ok {
				return lv + rv, nil
			}
		case []any:
			if rv, ok := r.([]any); ok {
				return append(append([]any{}, lv...), rv...), nil
			}
		}
	case "*":
		if _, ok := toInt(l); ok { // n * seq is seq * n
			switch r.(type) {
			case string, []any:
				l, r = r, l
			}
		}
		if s, ok := l.(string); ok {
			if n, ok := toInt(r); ok {
				if n > 0 && int64(len(s))*n > maxRepeat {
					return nil, fmt.Errorf("string repetition longer than %d bytes", maxRepeat)
				}
				return strings.Repeat(s, int(max(n, 0))), nil
			}
		}
		if lst, ok := l.([]any); ok {
			if n, ok := toInt(r); ok {
				if n > 0 && int64(len(lst))*n > maxRepeat {
					return nil, fmt.Errorf("list repetition longer than %d items", maxRepeat)
				}
				var out []any
				for range max(n, 0) {
					out = append(out, lst...)
				}
				return out, nil
			}
		}
	}
	li, lInt := toInt(l)
	ri, rInt := toInt(r)
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "/":
			if ri == 0 {
				return nil, errors.New("division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//", "%":
			if ri == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) { // Python floors toward negative infinity
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		case "**":
			if ri >= 0 {
				return int64(math.Pow(float64(li), float64(ri))), nil
			}
			return math.Pow(float64(li), float64(ri)), nil
		}
	}
	lf, lNum := toFloat(l)
	rf, rNum := toFloat(r)
	if lNum && rNum {
		switch op {
		case "+":
			return lf + rf, nil
		case "-":
			return lf - rf, nil
		case "*":
			return lf * rf, nil
		case "/":
			if rf == 0 {
				return nil, errors.New("division by zero")
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, errors.New("division by zero")
			}
			return math.Floor(lf / rf), nil
		case "%":
			if rf == 0 {
				return nil, errors.New("modulo by zero")
			}
			m := math.Mod(lf, rf)
			if m != 0 && (m < 0) != (rf < 0) {
				m += rf
			}
			return m, nil
		case "**":
			return math.Pow(lf, rf), nil
		}
	}
	if op == "%" && isString(l) {
		return nil, errors.New("printf-style string formatting with % is not supported")
	}
	return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
}

func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case *Dict:
		out := make([]any, len(v.keys))
		for i, k := range v.keys {
			out[i] = k
		}
		return out, nil
	case string:
		var out []any
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("%s is not iterable", typeName(v))
}

// str is Python's str() as jinja2 applies it to {{ }} output.
func str(v any) string {
	switch v := v.(type) {
	case undefined:
		return ""
	case string:
		return v
	}
	return repr(v)
}

// repr is Python's repr(), used for items inside printed lists and dicts.
func repr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case undefined:
		return ""
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloat(v)
	case string:
		q := "'"
		if strings.Contains(v, "'") && !strings.Contains(v, "\"") {
			q = "\""
		}
		r := strings.NewReplacer("\\", "\\\\", "\n", "\\n", "\r", "\\r", "\t", "\\t", q, "\\"+q)
		return q + r.Replace(v) + q
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = repr(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *Dict:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = repr(k) + ": " + repr(v.m[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *namespace:
		return "<Namespace " + repr(v.d) + ">"
	}
	return "<" + typeName(v) + ">"
}

// pyFloat formats like Python's float repr: shortest round-trip digits, scientific notation
// outside 1e-4 <= |x| < 1e16, and a ".0" on integral values.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	a := math.Abs(f)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// fromGo converts a caller's Go value into an engine value.
func fromGo(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, int64, float64, string, *Dict:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := fromGo(x)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case []string:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = x
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys) // a Go map has no order; sorted keys at least make output stable
		d := NewDict()
		for _, k := range keys {
			c, err := fromGo(v[k])
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
			d.Set(k, c)
		}
		return d, nil
	case map[string]string:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = x
		}
		return fromGo(m)
	case json.RawMessage:
		return parseJSON(v)
	}
	return nil, fmt.Errorf("unsupported Go type %T", v)
}
