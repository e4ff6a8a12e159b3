package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(st *state, x any, args []any, kw *Dict) (any, error)

var filters map[string]filterFunc

var tests map[string]func(x any, args []any) (bool, error)

var globals map[string]any

// arg returns positional argument i, else keyword name, else def.
func arg(args []any, kw *Dict, i int, name string, def any) any {
	if i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.m[name]; ok {
			return v
		}
	}
	return def
}

func strArg(args []any, kw *Dict, i int, name string, def string) (string, error) {
	v := arg(args, kw, i, name, def)
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("argument %s must be a string, got %s", name, typeName(v))
	}
	return s, nil
}

func init() {
	filters = map[string]filterFunc{
		"tojson": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			// Hugging Face replaces jinja2's tojson with json.dumps(x, ensure_ascii=False,
			// indent=None, separators=None, sort_keys=False): no HTML escaping, Python's
			// ", " and ": " separators (",", ": " once indent is given), keys in order.
			o := jsonOpts{indent: -1}
			if v := arg(args, kw, 0, "indent", nil); v != nil {
				n, ok := toInt(v)
				if !ok {
					return nil, fmt.Errorf("indent must be an int, got %s", typeName(v))
				}
				o.indent = int(n)
			}
			o.item, o.key = ", ", ": "
			if o.indent >= 0 {
				o.item = ","
			}
			if v := arg(args, kw, 3, "separators", nil); v != nil {
				l, ok := v.([]any)
				if !ok || len(l) != 2 || !isString(l[0]) || !isString(l[1]) {
					return nil, fmt.Errorf("separators must be a pair of strings")
				}
				o.item, o.key = l[0].(string), l[1].(string)
			}
			o.ascii = truthy(arg(args, kw, 1, "ensure_ascii", false))
			o.sortKeys = truthy(arg(args, kw, 4, "sort_keys", false))
			var b strings.Builder
			if err := writeJSON(&b, x, o, 0); err != nil {
				return nil, err
			}
			return b.String(), nil
		},
		"trim": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			return strMethod(str(x), "strip", args, kw)
		},
		"length": lengthFilter,
		"count":  lengthFilter,
		"lower":  func(_ *state, x any, _ []any, _ *Dict) (any, error) { return strings.ToLower(str(x)), nil },
		"upper":  func(_ *state, x any, _ []any, _ *Dict) (any, error) { return strings.ToUpper(str(x)), nil },
		"capitalize": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			return strMethod(str(x), "capitalize", nil, nil)
		},
		"title": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			return strMethod(str(x), "title", nil, nil)
		},
		"string":  func(_ *state, x any, _ []any, _ *Dict) (any, error) { return str(x), nil },
		"safe":    func(_ *state, x any, _ []any, _ *Dict) (any, error) { return x, nil },
		"default": defaultFilter,
		"d":       defaultFilter,
		"join": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			sep, err := strArg(args, kw, 0, "d", "")
			if err != nil {
				return nil, err
			}
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			attr := arg(args, kw, 1, "attribute", nil)
			parts := make([]string, len(items))
			for i, v := range items {
				if attr != nil {
					if v, err = getItem(v, attr); err != nil {
						return nil, err
					}
				}
				parts[i] = str(v)
			}
			return strings.Join(parts, sep), nil
		},
		"first": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			items, err := iterate(x)
			if err != nil || len(items) == 0 {
				return undefined{"first of an empty sequence"}, err
			}
			return items[0], nil
		},
		"last": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			items, err := iterate(x)
			if err != nil || len(items) == 0 {
				return undefined{"last of an empty sequence"}, err
			}
			return items[len(items)-1], nil
		},
		"list": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			items, err := iterate(x)
			return append([]any{}, items...), err
		},
		"reverse": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			if s, ok := x.(string); ok {
				return slice(s, nil, nil, int64(-1))
			}
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			return slice(items, nil, nil, int64(-1))
		},
		"sort": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			reverse := truthy(arg(args, kw, 0, "reverse", false))
			cs := truthy(arg(args, kw, 1, "case_sensitive", false))
			attrs, err := attrPaths(arg(args, kw, 2, "attribute", nil))
			if err != nil {
				return nil, err
			}
			return sortedBy(items, func(v any) ([]any, error) { return sortKeys(v, attrs, cs) }, reverse)
		},
		"dictsort": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			d, ok := x.(*Dict)
			if !ok {
				return nil, fmt.Errorf("expected a dict, got %s", typeName(x))
			}
			cs := truthy(arg(args, kw, 0, "case_sensitive", false))
			pos := 0
			switch by := arg(args, kw, 1, "by", "key"); by {
			case "key":
			case "value":
				pos = 1
			default:
				return nil, fmt.Errorf("can only sort by either 'key' or 'value', not %s", repr(by))
			}
			reverse := truthy(arg(args, kw, 2, "reverse", false))
			pairs := make([]any, len(d.keys))
			for i, k := range d.keys {
				pairs[i] = []any{k, d.m[k]}
			}
			return sortedBy(pairs, func(v any) ([]any, error) { return []any{foldCase(v.([]any)[pos], cs)}, nil }, reverse)
		},
		"unique": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			cs := truthy(arg(args, kw, 0, "case_sensitive", false))
			attrs, err := attrPaths(arg(args, kw, 1, "attribute", nil))
			if err != nil {
				return nil, err
			}
			if len(attrs) > 1 {
				return nil, errors.New("unique takes one attribute")
			}
			out := []any{}
			var seen []any
			for _, v := range items {
				k, err := sortKeys(v, attrs, cs)
				if err != nil {
					return nil, err
				}
				if !slices.ContainsFunc(seen, func(s any) bool { return equal(s, k[0]) }) {
					seen = append(seen, k[0])
					out = append(out, v)
				}
			}
			return out, nil
		},
		"items": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			if _, ok := x.(undefined); ok {
				return []any{}, nil
			}
			d, ok := x.(*Dict)
			if !ok {
				return nil, fmt.Errorf("expected a dict, got %s", typeName(x))
			}
			return callMethod(d, "items", nil, nil)
		},
		"int": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			def := arg(args, kw, 0, "default", int64(0))
			switch v := x.(type) {
			case undefined:
				return nil, errors.New(v.what)
			case int64:
				return v, nil
			case bool:
				return b2i(v), nil
			case float64:
				return int64(v), nil
			case string:
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					return n, nil
				}
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					return int64(f), nil
				}
			}
			return def, nil
		},
		"float": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			def := arg(args, kw, 0, "default", 0.0)
			if u, ok := x.(undefined); ok {
				return nil, errors.New(u.what)
			}
			if f, ok := toFloat(x); ok {
				return f, nil
			}
			if s, ok := x.(string); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return f, nil
				}
			}
			return def, nil
		},
		"abs": func(_ *state, x any, _ []any, _ *Dict) (any, error) {
			switch v := x.(type) {
			case int64:
				return max(v, -v), nil
			case bool:
				return b2i(v), nil
			case float64:
				return max(v, -v), nil
			}
			return nil, fmt.Errorf("bad operand type %s", typeName(x))
		},
		"replace": func(_ *state, x any, args []any, kw *Dict) (any, error) {
			return strMethod(str(x), "replace", args, kw)
		},
		"map": func(st *state, x any, args []any, kw *Dict) (any, error) {
			if !truthy(x) {
				return []any{}, nil // as select: a false value maps to nothing, unchecked
			}
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			out := make([]any, len(items))
			if attr := arg(nil, kw, 0, "attribute", nil); attr != nil {
				def := arg(nil, kw, 0, "default", nil)
				for i, v := range items {
					if out[i], err = getItem(v, attr); err != nil {
						return nil, err
					}
					if _, u := out[i].(undefined); u && def != nil {
						out[i] = def
					}
				}
				return out, nil
			}
			if len(args) == 0 {
				return nil, errors.New("map needs a filter name or attribute=")
			}
			fname, _ := args[0].(string)
			f, ok := filters[fname]
			if !ok {
				return nil, fmt.Errorf("unknown filter %q", fname)
			}
			for i, v := range items {
				if out[i], err = f(st, v, args[1:], nil); err != nil {
					return nil, err
				}
			}
			return out, nil
		},
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
	}

	tests = map[string]func(x any, args []any) (bool, error){
		"defined":   func(x any, _ []any) (bool, error) { _, u := x.(undefined); return !u, nil },
		"undefined": func(x any, _ []any) (bool, error) { _, u := x.(undefined); return u, nil },
		"none":      func(x any, _ []any) (bool, error) { return x == nil, nil },
		"string":    func(x any, _ []any) (bool, error) { return isString(x), nil },
		"boolean":   func(x any, _ []any) (bool, error) { _, ok := x.(bool); return ok, nil },
		"true":      func(x any, _ []any) (bool, error) { return x == true, nil },
		"false":     func(x any, _ []any) (bool, error) { return x == false, nil },
		"integer":   func(x any, _ []any) (bool, error) { _, ok := x.(int64); return ok, nil },
		"float":     func(x any, _ []any) (bool, error) { _, ok := x.(float64); return ok, nil },
		"number":    func(x any, _ []any) (bool, error) { _, ok := toFloat(x); return ok, nil },
		"mapping":   func(x any, _ []any) (bool, error) { _, ok := x.(*Dict); return ok, nil },
		"iterable": func(x any, _ []any) (bool, error) {
			switch x.(type) {
			case string, []any, *Dict, undefined: // jinja2's Undefined iterates as empty
				return true, nil
			}
			return false, nil
		},
		"callable": func(x any, _ []any) (bool, error) {
			switch x.(type) {
			case builtin, method, *loopCycle, *macro:
				return true, nil
			}
			return false, nil
		},
		"odd":         intTest(func(n int64) bool { return n%2 != 0 }),
		"even":        intTest(func(n int64) bool { return n%2 == 0 }),
		"lower":       func(x any, _ []any) (bool, error) { s, ok := x.(string); return ok && s == strings.ToLower(s), nil },
		"upper":       func(x any, _ []any) (bool, error) { s, ok := x.(string); return ok && s == strings.ToUpper(s), nil },
		"divisibleby": cmpTest(func(a, b any) (bool, error) { return binopBool("%", a, b, func(r any) bool { return !truthy(r) }) }),
		"sameas":      cmpTest(func(a, b any) (bool, error) { return sameAs(a, b), nil }),
		"in":          cmpTest(func(a, b any) (bool, error) { return contains(b, a) }),
	}
	tests["sequence"] = tests["iterable"]
	for _, op := range [][]string{{"==", "eq", "equalto"}, {"!=", "ne"}, {"<", "lt", "lessthan"},
		{"<=", "le"}, {">", "gt", "greaterthan"}, {">=", "ge"}} {
		o := op[0]
		f := cmpTest(func(a, b any) (bool, error) { return binopBool(o, a, b, truthy) })
		for _, n := range op {
			tests[n] = f
		}
	}

	globals = map[string]any{
		"range": builtin(func(st *state, args []any, _ *Dict) (any, error) {
			var b [3]int64
			b[2] = 1
			for i, a := range args {
				n, ok := toInt(a)
				if !ok || i > 2 {
					return nil, fmt.Errorf("range: arguments must be up to 3 ints")
				}
				b[i] = n
			}
			start, stop, step := b[0], b[1], b[2]
			if len(args) == 1 {
				start, stop = 0, b[0]
			}
			if step == 0 {
				return nil, errors.New("range: step must not be zero")
			}
			var out []any
			for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
				out = append(out, i)
				if err := st.step(1); err != nil {
					return nil, fmt.Errorf("range: %w", err)
				}
			}
			return out, nil
		}),
		"namespace": builtin(func(_ *state, args []any, kw *Dict) (any, error) {
			ns := &namespace{NewDict()}
			for _, a := range args {
				d, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("namespace: positional argument must be a dict, got %s", typeName(a))
				}
				for _, k := range d.keys {
					ns.d.Set(k, d.m[k])
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					ns.d.Set(k, kw.m[k])
				}
			}
			return ns, nil
		}),
		"dict": builtin(func(_ *state, args []any, kw *Dict) (any, error) {
			if len(args) > 0 {
				return nil, errors.New("dict: only keyword arguments are supported")
			}
			d := NewDict()
			if kw != nil {
				for _, k := range kw.keys {
					d.Set(k, kw.m[k])
				}
			}
			return d, nil
		}),
		"raise_exception": builtin(func(_ *state, args []any, _ *Dict) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = str(args[0])
			}
			return nil, &TemplateException{Message: msg}
		}),
		"strftime_now": builtin(func(_ *state, args []any, _ *Dict) (any, error) {
			if len(args) != 1 || !isString(args[0]) {
				return nil, errors.New("strftime_now takes one format string")
			}
			return strftime(time.Now(), args[0].(string))
		}),
	}
}

// TemplateException is the error a template raises itself through raise_exception(message),
// typically to refuse a conversation shape it does not support.
type TemplateException struct{ Message string }

func (e *TemplateException) Error() string { return "template raised an exception: " + e.Message }

func binopBool(op string, a, b any, pred func(any) bool) (bool, error) {
	r, err := binop(op, a, b)
	if err != nil {
		return false, err
	}
	return pred(r), nil
}

func sameAs(a, b any) bool {
	switch a.(type) {
	case nil, bool:
		return a == b
	}
	return false // identity of other values is not observable here
}

func intTest(f func(int64) bool) func(any, []any) (bool, error) {
	return func(x any, _ []any) (bool, error) {
		n, ok := toInt(x)
		if !ok {
			return false, fmt.Errorf("expected an int, got %s", typeName(x))
		}
		return f(n), nil
	}
}

func cmpTest(f func(a, b any) (bool, error)) func(any, []any) (bool, error) {
	return func(x any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("takes exactly one argument, got %d", len(args))
		}
		return f(x, args[0])
	}
}

func lengthFilter(_ *state, x any, _ []any, _ *Dict) (any, error) {
	switch v := x.(type) {
	case undefined:
		return int64(0), nil
	case string:
		return int64(utf8.RuneCountInString(v)), nil
	case []any:
		return int64(len(v)), nil
	case *Dict:
		return int64(len(v.keys)), nil
	}
	return nil, fmt.Errorf("object of type %s has no len()", typeName(x))
}

func defaultFilter(_ *state, x any, args []any, kw *Dict) (any, error) {
	def := arg(args, kw, 0, "default_value", "")
	_, undef := x.(undefined)
	if undef || truthy(arg(args, kw, 1, "boolean", false)) && !truthy(x) {
		return def, nil
	}
	return x, nil
}

// foldCase is jinja2's ignore_case for sort, dictsort and unique: strings compare lowercased
// unless case_sensitive is set; other values compare as they are.
func foldCase(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

// attrPaths splits an attribute= argument as jinja2 does: "a,b" sorts by a then b, "a.b" reaches
// into a, and a part that is a number indexes a list.
func attrPaths(a any) ([][]any, error) {
	if a == nil {
		return nil, nil
	}
	s, ok := a.(string)
	if !ok {
		if n, isInt := a.(int64); isInt {
			return [][]any{{n}}, nil
		}
		return nil, fmt.Errorf("attribute must be a string, got %s", typeName(a))
	}
	var paths [][]any
	for _, one := range strings.Split(s, ",") {
		var path []any
		for _, part := range strings.Split(one, ".") {
			if n, err := strconv.ParseInt(part, 10, 64); err == nil {
				path = append(path, n)
			} else {
				path = append(path, part)
			}
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// sortKeys returns v's sort key: v itself, or the value at each attribute path.
func sortKeys(v any, paths [][]any, caseSensitive bool) ([]any, error) {
	if len(paths) == 0 {
		return []any{foldCase(v, caseSensitive)}, nil
	}
	keys := make([]any, len(paths))
	for i, path := range paths {
		k := v
		for _, part := range path {
			var err error
			if k, err = getItem(k, part); err != nil {
				return nil, err
			}
		}
		keys[i] = foldCase(k, caseSensitive)
	}
	return keys, nil
}

// sortedBy is Python's sorted(items, key=..., reverse=...): stable, and stable under reverse too
// (equal keys keep their order), failing where Python cannot order two keys.
func sortedBy(items []any, key func(any) ([]any, error), reverse bool) ([]any, error) {
	keys := make([][]any, len(items))
	for i, v := range items {
		k, err := key(v)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	slices.SortStableFunc(idx, func(i, j int) int {
		for n := range keys[i] {
			c, err := compare(keys[i][n], keys[j][n])
			if err != nil && cmpErr == nil {
				cmpErr = err
			}
			if c != 0 {
				if reverse {
					return -c
				}
				return c
			}
		}
		return 0
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	out := make([]any, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(_ *state, x any, args []any, kw *Dict) (any, error) {
		if !truthy(x) {
			// jinja2 looks at neither the value nor the arguments when the value is false:
			// "tools|selectattr(...)" with tools=None is empty, not a TypeError.
			return []any{}, nil
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, errors.New("missing attribute name")
			}
			attr, args = args[0], args[1:]
		}
		test := func(v any) (bool, error) { return truthy(v), nil }
		if len(args) > 0 {
			tn, _ := args[0].(string)
			t, ok := tests[tn]
			if !ok {
				return nil, fmt.Errorf("unknown test %q", tn)
			}
			targs := args[1:]
			test = func(v any) (bool, error) { return t(v, targs) }
		}
		var out []any
		for _, v := range items {
			subject := v
			if byAttr {
				if subject, err = getItem(v, attr); err != nil {
					return nil, err
				}
			}
			ok, err := test(subject)
			if err != nil {
				return nil, err
			}
			if ok != reject {
				out = append(out, v)
			}
		}
		return out, nil
	}
}

var dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true}

var strMethods = map[string]bool{"startswith": true, "endswith": true, "split": true, "rsplit": true,
	"strip": true, "lstrip": true, "rstrip": true, "upper": true, "lower": true, "title": true,
	"capitalize": true, "replace": true, "find": true, "rfind": true, "count": true, "join": true,
	"splitlines": true, "isdigit": true, "isalpha": true, "isalnum": true, "isspace": true,
	"isupper": true, "islower": true, "removeprefix": true, "removesuffix": true, "format": true}

var listMutators = map[string]bool{"append": true, "extend": true, "insert": true, "pop": true,
	"remove": true, "clear": true, "sort": true, "reverse": true}

func callMethod(recv any, name string, args []any, kw *Dict) (any, error) {
	switch r := recv.(type) {
	case string:
		v, err := strMethod(r, name, args, kw)
		if err != nil {
			return nil, fmt.Errorf("str.%s: %w", name, err)
		}
		return v, nil
	case *Dict:
		switch name {
		case "items":
			out := make([]any, len(r.keys))
			for i, k := range r.keys {
				out[i] = []any{k, r.m[k]}
			}
			return out, nil
		case "keys":
			return iterate(r)
		case "values":
			out := make([]any, len(r.keys))
			for i, k := range r.keys {
				out[i] = r.m[k]
			}
			return out, nil
		case "get":
			if len(args) == 0 {
				return nil, errors.New("dict.get needs a key")
			}
			if k, ok := args[0].(string); ok {
				if v, ok := r.m[k]; ok {
					return v, nil
				}
			}
			return arg(args, kw, 1, "default", nil), nil
		}
	}
	return nil, fmt.Errorf("%s has no method %s", typeName(recv), name)
}

func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\x1c' || r == '\x1d' || r == '\x1e' || r == '\x1f'
}

// strMethod implements the Python str methods templates call, with Python's semantics
// (stripping a set of characters, splitting on runs of whitespace when sep is None, ...).
func strMethod(s, name string, args []any, kw *Dict) (any, error) {
	optStr := func(i int, n string) (string, bool, error) {
		v := arg(args, kw, i, n, nil)
		if v == nil {
			return "", false, nil
		}
		vs, ok := v.(string)
		if !ok {
			return "", false, fmt.Errorf("argument %s must be a string or None, got %s", n, typeName(v))
		}
		return vs, true, nil
	}
	switch name {
	case "startswith", "endswith":
		v := arg(args, kw, 0, "prefix", nil)
		cands := []any{v}
		if l, ok := v.([]any); ok {
			cands = l
		}
		for _, c := range cands {
			cs, ok := c.(string)
			if !ok {
				return nil, fmt.Errorf("argument must be a string or tuple of strings, got %s", typeName(c))
			}
			if name == "startswith" && strings.HasPrefix(s, cs) || name == "endswith" && strings.HasSuffix(s, cs) {
				return true, nil
			}
		}
		return false, nil
	case "strip", "lstrip", "rstrip":
		chars, set, err := optStr(0, "chars")
		if err != nil {
			return nil, err
		}
		cut := isPySpace
		if set {
			cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
		}
		if name != "rstrip" {
			s = strings.TrimLeftFunc(s, cut)
		}
		if name != "lstrip" {
			s = strings.TrimRightFunc(s, cut)
		}
		return s, nil
	case "split", "rsplit":
		sep, set, err := optStr(0, "sep")
		if err != nil {
			return nil, err
		}
		maxv, ok := toInt(arg(args, kw, 1, "maxsplit", int64(-1)))
		if !ok {
			return nil, errors.New("maxsplit must be an int")
		}
		var parts []string
		switch {
		case set && sep == "":
			return nil, errors.New("empty separator")
		case !set:
			parts = splitSpace(s, int(maxv), name == "rsplit")
		case name == "split" || maxv < 0:
			parts = strings.SplitN(s, sep, int(max(maxv+1, -1)))
			if maxv < 0 {
				parts = strings.Split(s, sep)
			}
		default:
			for range maxv {
				i := strings.LastIndex(s, sep)
				if i < 0 {
					break
				}
				parts = append([]string{s[i+len(sep):]}, parts...)
				s = s[:i]
			}
			parts = append([]string{s}, parts...)
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	case "splitlines":
		lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		out := make([]any, len(lines))
		for i, l := range lines {
			out[i] = l
		}
		return out, nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower":
		return strings.ToLower(s), nil
	case "capitalize":
		r := []rune(strings.ToLower(s))
		if len(r) > 0 {
			r[0] = unicode.ToUpper(r[0])
		}
		return string(r), nil
	case "title":
		r := []rune(s)
		prevLetter := false
		for i, c := range r {
			if prevLetter {
				r[i] = unicode.ToLower(c)
			} else {
				r[i] = unicode.ToUpper(c)
			}
			prevLetter = unicode.IsLetter(c)
		}
		return string(r), nil
	case "replace":
		old, err := strArg(args, kw, 0, "old", "")
		if err != nil {
			return nil, err
		}
		nw, err := strArg(args, kw, 1, "new", "")
		if err != nil {
			return nil, err
		}
		n, ok := toInt(arg(args, kw, 2, "count", int64(-1)))
		if !ok {
			return nil, errors.New("count must be an int")
		}
		return strings.Replace(s, old, nw, int(n)), nil
	case "find", "rfind", "count":
		sub, err := strArg(args, kw, 0, "sub", "")
		if err != nil {
			return nil, err
		}
		var i int
		switch name {
		case "count":
			return int64(strings.Count(s, sub)), nil
		case "find":
			i = strings.Index(s, sub)
		default:
			i = strings.LastIndex(s, sub)
		}
		if i < 0 {
			return int64(-1), nil
		}
		return int64(utf8.RuneCountInString(s[:i])), nil // Python indexes code points
	case "join":
		items, err := iterate(arg(args, kw, 0, "iterable", nil))
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, v := range items {
			ps, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str, got %s", i, typeName(v))
			}
			parts[i] = ps
		}
		return strings.Join(parts, s), nil
	case "removeprefix":
		p, err := strArg(args, kw, 0, "prefix", "")
		return strings.TrimPrefix(s, p), err
	case "removesuffix":
		p, err := strArg(args, kw, 0, "suffix", "")
		return strings.TrimSuffix(s, p), err
	case "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower":
		if s == "" {
			return false, nil
		}
		cased := false
		for _, r := range s {
			ok := true
			switch name {
			case "isdigit":
				ok = unicode.IsDigit(r)
			case "isalpha":
				ok = unicode.IsLetter(r)
			case "isalnum":
				ok = unicode.IsLetter(r) || unicode.IsDigit(r)
			case "isspace":
				ok = isPySpace(r)
			case "isupper":
				ok = !unicode.IsLower(r)
				cased = cased || unicode.IsUpper(r)
			case "islower":
				ok = !unicode.IsUpper(r)
				cased = cased || unicode.IsLower(r)
			}
			if !ok {
				return false, nil
			}
		}
		return cased || name != "isupper" && name != "islower", nil
	case "format":
		return nil, errors.New("str.format is not supported")
	}
	return nil, fmt.Errorf("unknown method")
}

func splitSpace(s string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.FieldsFunc(s, isPySpace)
	}
	var parts []string
	if !fromRight {
		s = strings.TrimLeftFunc(s, isPySpace)
		for len(parts) < maxsplit && s != "" {
			i := strings.IndexFunc(s, isPySpace)
			if i < 0 {
				break
			}
			parts = append(parts, s[:i])
			s = strings.TrimLeftFunc(s[i:], isPySpace)
		}
		if s != "" {
			parts = append(parts, s)
		}
		return parts
	}
	s = strings.TrimRightFunc(s, isPySpace)
	for len(parts) < maxsplit && s != "" {
		i := strings.LastIndexFunc(s, isPySpace)
		if i < 0 {
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		parts = append([]string{s[i+w:]}, parts...)
		s = strings.TrimRightFunc(s[:i], isPySpace)
	}
	if s != "" {
		parts = append([]string{s}, parts...)
	}
	return parts
}

type jsonOpts struct {
	indent    int // < 0: one line
	item, key string
	ascii     bool
	sortKeys  bool
}

// writeJSON writes v as Python's json.dumps would with the given options.
func writeJSON(b *strings.Builder, v any, o jsonOpts, depth int) error {
	nl := func(d int) {
		if o.indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", o.indent*d))
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[v])
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch s := pyFloat(v); s {
		case "nan":
			b.WriteString("NaN")
		case "inf":
			b.WriteString("Infinity")
		case "-inf":
			b.WriteString("-Infinity")
		default:
			b.WriteString(s)
		}
	case string:
		writeJSONString(b, v, o.ascii)
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(o.item)
			}
			nl(depth + 1)
			if err := writeJSON(b, x, o, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte(']')
	case *Dict, *namespace:
		d, ok := v.(*Dict)
		if !ok {
			d = v.(*namespace).d
		}
		if len(d.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sortStrings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.item)
			}
			nl(depth + 1)
			writeJSONString(b, k, o.ascii)
			b.WriteString(o.key)
			if err := writeJSON(b, d.m[k], o, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func writeJSONString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ascii && r > 0x7e && r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r >= 0x10000:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// parseJSON decodes JSON keeping object key order and Python's int/float distinction
// ("1" is an int, "1.0" a float), so tojson reproduces what Python would print.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec)
	if err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json: trailing data")
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeJSON(dec)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSON(dec)
				if err != nil {
					return nil, err
				}
				d.Set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		if !strings.ContainsAny(string(t), ".eE") {
			if n, err := t.Int64(); err == nil {
				return n, nil
			}
		}
		return t.Float64()
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// strftime formats t with the C/Python directives chat templates use for dates.
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime: unsupported directive %%%c", f[i])
		}
	}
	return b.String(), nil
}
