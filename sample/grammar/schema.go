// Package grammar compiles a JSON schema (or "any JSON value") into a byte-level matcher and, for
// a tokenizer's vocabulary, into the masks of the token ids that may come next: structured output.
//
// The matcher accepts a subset of the JSON texts the schema validates, chosen so that decoding
// stays bounded and every reachable state can still be completed (a masked sampler can never be
// cornered into a state from which no valid text continues):
//
//   - no whitespace except one optional space after ':' and ',' (the model cannot loop on spaces);
//   - object properties in any order, each at most once; additional property names printable
//     ASCII without escapes and at most 64 bytes;
//   - numbers without exponent, at most 15 integer and 10 fraction digits, bounds enforced digit by
//     digit (a digit is refused when no number with that prefix lies within the bounds);
//   - strings: valid UTF-8 (no surrogate \u escapes), lengths counted in code points;
//   - a pattern is matched on a printable-ASCII alphabet without '"' and '\' (so the JSON text of
//     the string is the string itself).
//
// It must never know about models or sampling beyond sample.Mask: it sees schemas, bytes and
// token byte strings only.
package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// SchemaError is a schema the compiler cannot use: Path says where (a dotted path into the schema,
// e.g. "properties.age.multipleOf"), Msg why.
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return "schema: " + e.Msg
	}
	return fmt.Sprintf("schema %s: %s", e.Path, e.Msg)
}

type kind uint8

const (
	kAlt kind = iota // one of alts
	kObject
	kArray
	kString
	kNumber
	kLiteral // exactly lit
)

// node is one compiled schema. Nodes form a graph ($ref may recurse); sat says whether some
// finite text matches (a least fixpoint, computed after compiling), and the matcher never enters
// a node that is not sat, which is what keeps every state completable.
type node struct {
	id     int32
	kind   kind
	sat    bool
	height int // see heights

	alts []*node // kAlt

	// kObject: props sorted by key; required a bit set over props; additional nil = false.
	props      []prop
	required   uint64
	additional *node

	// kArray: prefix items, then items (nil: none), minItems..maxItems (maxItems < 0: unbounded).
	prefix             []*node
	items              *node
	minItems, maxItems int

	// kString: minLen..maxLen code points (maxLen < 0: unbounded), pattern or nil.
	minLen, maxLen int
	pattern        *regex

	// kNumber
	integer        bool
	lo, hi         *big.Rat // nil: unbounded
	loOpen, hiOpen bool

	lit []byte // kLiteral
}

type prop struct {
	key  []byte // the name's bytes (no escapes: names needing them are refused)
	node *node
}

// Grammar is a compiled schema. It is immutable and safe for concurrent use.
type Grammar struct {
	root  *node
	nodes []*node
}

// CompileSchema compiles a JSON schema document.
func CompileSchema(schema []byte) (*Grammar, error) {
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return nil, &SchemaError{Msg: fmt.Sprintf("not JSON: %v", err)}
	}
	if d.More() {
		return nil, &SchemaError{Msg: "not JSON: text after the schema"}
	}
	c := &compiler{doc: doc, refs: map[string]*node{}}
	root, err := c.compile(doc, "")
	if err != nil {
		return nil, err
	}
	return c.finish(root)
}

// AnyJSON is the grammar of any JSON value (ollama's format "json").
func AnyJSON() *Grammar {
	c := &compiler{refs: map[string]*node{}}
	g, _ := c.finish(c.anyValue())
	return g
}

// AnyObject is the grammar of any JSON object (OpenAI's response_format json_object).
func AnyObject() *Grammar {
	c := &compiler{refs: map[string]*node{}}
	any := c.anyValue()
	g, _ := c.finish(c.newNode(&node{kind: kObject, additional: any, maxItems: -1, maxLen: -1}))
	return g
}

type compiler struct {
	doc   any
	refs  map[string]*node
	nodes []*node
	any   *node
}

func (c *compiler) newNode(n *node) *node {
	n.id = int32(len(c.nodes))
	c.nodes = append(c.nodes, n)
	return n
}

// anyValue is the node of any JSON value, built once per compiler.
func (c *compiler) anyValue() *node {
	if c.any != nil {
		return c.any
	}
	a := c.newNode(&node{kind: kAlt})
	c.any = a
	obj := c.newNode(&node{kind: kObject, additional: a, maxItems: -1, maxLen: -1})
	arr := c.newNode(&node{kind: kArray, items: a, maxItems: -1, maxLen: -1})
	str := c.newNode(&node{kind: kString, maxLen: -1, maxItems: -1})
	num := c.newNode(&node{kind: kNumber, maxLen: -1, maxItems: -1})
	a.alts = []*node{obj, arr, str, num, c.literal([]byte("true")), c.literal([]byte("false")), c.literal([]byte("null"))}
	return a
}

func (c *compiler) literal(b []byte) *node {
	return c.newNode(&node{kind: kLiteral, lit: b, maxItems: -1, maxLen: -1})
}

func (c *compiler) finish(root *node) (*Grammar, error) {
	// An alternative lists only non-alternatives: nested ones (anyOf in anyOf, a $ref's
	// placeholder) are flattened, which also cuts cycles that consume no byte ({"anyOf":
	// [{"$ref":"#"}, ...]}) so that starting a value never recurses forever.
	for _, n := range c.nodes {
		if n.kind == kAlt {
			n.alts = flatten(n, map[*node]bool{}, nil)
		}
	}
	// Least fixpoint of satisfiability: start with nothing satisfiable and grow.
	for changed := true; changed; {
		changed = false
		for _, n := range c.nodes {
			if !n.sat && n.satisfiable() {
				n.sat, changed = true, true
			}
		}
	}
	if !root.sat {
		return nil, &SchemaError{Msg: "no JSON value satisfies the schema (as the grammar bounds it)"}
	}
	heights(c.nodes)
	return &Grammar{root: root, nodes: c.nodes}, nil
}

// flatten lists the non-alternative nodes n's alternatives reach through alternatives only.
func flatten(n *node, seen map[*node]bool, out []*node) []*node {
	for _, a := range n.alts {
		if seen[a] {
			continue
		}
		seen[a] = true
		if a.kind == kAlt {
			out = flatten(a, seen, out)
		} else {
			out = append(out, a)
		}
	}
	return out
}

func (n *node) satisfiable() bool {
	switch n.kind {
	case kAlt:
		for _, a := range n.alts {
			if a.sat {
				return true
			}
		}
		return false
	case kObject:
		for i, p := range n.props {
			if n.required&(1<<i) != 0 && !p.node.sat {
				return false
			}
		}
		return true
	case kArray:
		for i := range n.minItems {
			if it := n.item(i); it == nil || !it.sat {
				return false
			}
		}
		return true
	case kString:
		if n.maxLen >= 0 && n.minLen > n.maxLen {
			return false
		}
		return n.pattern == nil || n.pattern.start() != 0
	case kNumber:
		return numberStartable(n)
	}
	return true
}

// item is the node of array item i, nil when the array has no such item.
func (n *node) item(i int) *node {
	if i < len(n.prefix) {
		return n.prefix[i]
	}
	if n.maxItems >= 0 && i >= n.maxItems {
		return nil
	}
	return n.items
}

// annotations are keywords that constrain nothing a validator checks (format is only an
// annotation by default in draft 2020-12), so ignoring them is safe.
var annotations = map[string]bool{"title": true, "description": true, "$schema": true, "$id": true, "$comment": true,
	"default": true, "examples": true, "format": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "contentMediaType": true, "contentEncoding": true, "$anchor": true}

// refused are JSON-schema keywords the grammar cannot enforce: a schema using them is refused
// rather than decoded into output that might not validate. Keywords the specification does not
// define are ignored, as validators ignore them.
var refused = map[string]string{"not": "", "allOf": "(except with one subschema)", "if": "", "then": "", "else": "",
	"patternProperties": "", "propertyNames": "", "dependentRequired": "", "dependentSchemas": "", "dependencies": "",
	"uniqueItems": "(except false)", "contains": "", "minContains": "", "maxContains": "", "minProperties": "",
	"maxProperties": "", "multipleOf": "", "unevaluatedProperties": "", "unevaluatedItems": "", "additionalItems": "",
	"$dynamicRef": "", "$recursiveRef": ""}

func at(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (c *compiler) compile(s any, path string) (*node, error) {
	switch s := s.(type) {
	case bool:
		if s {
			return c.anyValue(), nil
		}
		return c.newNode(&node{kind: kAlt}), nil // false: nothing matches
	case map[string]any:
		return c.object(s, path)
	}
	return nil, &SchemaError{Path: path, Msg: "a schema must be an object or a boolean"}
}

func (c *compiler) object(s map[string]any, path string) (*node, error) {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		why, bad := refused[k]
		if !bad {
			continue
		}
		switch {
		case k == "uniqueItems" && s[k] == false:
			continue
		case k == "allOf":
			if l, ok := s[k].([]any); ok && len(l) == 1 && len(s) == 1 {
				return c.compile(l[0], at(path, "allOf")+"[0]")
			}
		}
		return nil, &SchemaError{Path: at(path, k), Msg: strings.TrimSpace(fmt.Sprintf("keyword %q is not supported %s", k, why))}
	}
	if ref, ok := s["$ref"]; ok {
		for _, k := range keys {
			if k != "$ref" && !annotations[k] {
				return nil, &SchemaError{Path: at(path, k), Msg: "keywords beside $ref are not supported"}
			}
		}
		r, ok := ref.(string)
		if !ok {
			return nil, &SchemaError{Path: at(path, "$ref"), Msg: "not a string"}
		}
		return c.ref(r, at(path, "$ref"))
	}
	if v, ok := s["const"]; ok {
		return c.literal(compact(v)), nil
	}
	if v, ok := s["enum"]; ok {
		l, ok := v.([]any)
		if !ok || len(l) == 0 {
			return nil, &SchemaError{Path: at(path, "enum"), Msg: "want a non-empty array"}
		}
		alt := c.newNode(&node{kind: kAlt})
		for _, e := range l {
			if typeAllows(s["type"], e) {
				alt.alts = append(alt.alts, c.literal(compact(e)))
			}
		}
		return alt, nil
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		v, ok := s[k]
		if !ok {
			continue
		}
		l, ok := v.([]any)
		if !ok || len(l) == 0 {
			return nil, &SchemaError{Path: at(path, k), Msg: "want a non-empty array"}
		}
		for _, other := range keys {
			if other != k && !annotations[other] {
				return nil, &SchemaError{Path: at(path, other), Msg: fmt.Sprintf("keywords beside %s are not supported", k)}
			}
		}
		if k == "oneOf" && len(l) > 1 {
			// oneOf needs exactly one branch to match; the grammar cannot rule out a text that
			// two branches accept, so it is taken as anyOf only when the branches are disjoint
			// by type (checked below).
			if !disjointTypes(l) {
				return nil, &SchemaError{Path: at(path, k), Msg: "oneOf is supported only when its branches have distinct types"}
			}
		}
		alt := c.newNode(&node{kind: kAlt})
		for i, sub := range l {
			n, err := c.compile(sub, fmt.Sprintf("%s[%d]", at(path, k), i))
			if err != nil {
				return nil, err
			}
			alt.alts = append(alt.alts, n)
		}
		return alt, nil
	}
	var types []string
	switch t := s["type"].(type) {
	case nil:
		types = inferTypes(s)
	case string:
		types = []string{t}
	case []any:
		for _, e := range t {
			str, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Path: at(path, "type"), Msg: "want a string or an array of strings"}
			}
			types = append(types, str)
		}
	default:
		return nil, &SchemaError{Path: at(path, "type"), Msg: "want a string or an array of strings"}
	}
	alt := c.newNode(&node{kind: kAlt})
	for _, t := range types {
		n, err := c.typed(t, s, path)
		if err != nil {
			return nil, err
		}
		alt.alts = append(alt.alts, n)
	}
	if len(alt.alts) == 1 {
		return alt.alts[0], nil
	}
	return alt, nil
}

// inferTypes is the types a schema without "type" is generated as: those its keywords apply to,
// or every type when it has none of them.
func inferTypes(s map[string]any) []string {
	var t []string
	has := func(ks ...string) bool {
		for _, k := range ks {
			if _, ok := s[k]; ok {
				return true
			}
		}
		return false
	}
	if has("properties", "required", "additionalProperties") {
		t = append(t, "object")
	}
	if has("items", "prefixItems", "minItems", "maxItems") {
		t = append(t, "array")
	}
	if has("minLength", "maxLength", "pattern") {
		t = append(t, "string")
	}
	if has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") {
		t = append(t, "number")
	}
	if t == nil {
		t = []string{"object", "array", "string", "number", "boolean", "null"}
	}
	return t
}

func (c *compiler) typed(t string, s map[string]any, path string) (*node, error) {
	switch t {
	case "null":
		return c.literal([]byte("null")), nil
	case "boolean":
		return c.newNode(&node{kind: kAlt, alts: []*node{c.literal([]byte("true")), c.literal([]byte("false"))}}), nil
	case "string":
		return c.str(s, path)
	case "number", "integer":
		return c.number(t == "integer", s, path)
	case "object":
		return c.obj(s, path)
	case "array":
		return c.arr(s, path)
	}
	return nil, &SchemaError{Path: at(path, "type"), Msg: fmt.Sprintf("unknown type %q", t)}
}

func count(s map[string]any, key, path string, def int) (int, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, &SchemaError{Path: at(path, key), Msg: "want a non-negative integer"}
	}
	i, err := n.Int64()
	if err != nil || i < 0 || i > 1<<20 {
		return 0, &SchemaError{Path: at(path, key), Msg: "want a non-negative integer (at most 1048576)"}
	}
	return int(i), nil
}

func (c *compiler) str(s map[string]any, path string) (*node, error) {
	n := &node{kind: kString, maxItems: -1}
	var err error
	if n.minLen, err = count(s, "minLength", path, 0); err != nil {
		return nil, err
	}
	if n.maxLen, err = count(s, "maxLength", path, -1); err != nil {
		return nil, err
	}
	if p, ok := s["pattern"]; ok {
		ps, ok := p.(string)
		if !ok {
			return nil, &SchemaError{Path: at(path, "pattern"), Msg: "not a string"}
		}
		if n.minLen > 0 || n.maxLen >= 0 {
			return nil, &SchemaError{Path: at(path, "pattern"), Msg: "pattern together with minLength or maxLength is not supported"}
		}
		if n.pattern, err = compileRegex(ps); err != nil {
			return nil, &SchemaError{Path: at(path, "pattern"), Msg: err.Error()}
		}
	}
	return c.newNode(n), nil
}

func bound(s map[string]any, key, path string) (*big.Rat, error) {
	v, ok := s[key]
	if !ok {
		return nil, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil, &SchemaError{Path: at(path, key), Msg: "want a number"}
	}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return nil, &SchemaError{Path: at(path, key), Msg: "want a number"}
	}
	return r, nil
}

func (c *compiler) number(integer bool, s map[string]any, path string) (*node, error) {
	n := &node{kind: kNumber, integer: integer, maxItems: -1, maxLen: -1}
	var err error
	if n.lo, err = bound(s, "minimum", path); err != nil {
		return nil, err
	}
	if n.hi, err = bound(s, "maximum", path); err != nil {
		return nil, err
	}
	if x, err := bound(s, "exclusiveMinimum", path); err != nil {
		return nil, err
	} else if x != nil && (n.lo == nil || x.Cmp(n.lo) >= 0) {
		n.lo, n.loOpen = x, true
	}
	if x, err := bound(s, "exclusiveMaximum", path); err != nil {
		return nil, err
	} else if x != nil && (n.hi == nil || x.Cmp(n.hi) <= 0) {
		n.hi, n.hiOpen = x, true
	}
	return c.newNode(n), nil
}

func (c *compiler) obj(s map[string]any, path string) (*node, error) {
	n := c.newNode(&node{kind: kObject, maxItems: -1, maxLen: -1})
	props, _ := s["properties"].(map[string]any)
	if _, ok := s["properties"]; ok && props == nil {
		return nil, &SchemaError{Path: at(path, "properties"), Msg: "want an object"}
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	var required []string
	if v, ok := s["required"]; ok {
		l, ok := v.([]any)
		if !ok {
			return nil, &SchemaError{Path: at(path, "required"), Msg: "want an array of strings"}
		}
		for _, e := range l {
			r, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Path: at(path, "required"), Msg: "want an array of strings"}
			}
			required = append(required, r)
			if _, ok := props[r]; !ok {
				names = append(names, r)
			}
		}
	}
	switch a := s["additionalProperties"].(type) {
	case nil:
		if _, ok := s["additionalProperties"]; ok {
			return nil, &SchemaError{Path: at(path, "additionalProperties"), Msg: "want a boolean or a schema"}
		}
		n.additional = c.anyValue()
	case bool:
		if a {
			n.additional = c.anyValue()
		}
	default:
		an, err := c.compile(a, at(path, "additionalProperties"))
		if err != nil {
			return nil, err
		}
		n.additional = an
	}
	sort.Strings(names)
	names = compactStrings(names)
	if len(names) > 64 {
		return nil, &SchemaError{Path: at(path, "properties"), Msg: "more than 64 properties"}
	}
	for _, name := range names {
		for i := 0; i < len(name); i++ {
			if b := name[i]; b < 0x20 || b == '"' || b == '\\' {
				return nil, &SchemaError{Path: at(at(path, "properties"), name), Msg: "property names needing JSON escapes are not supported"}
			}
		}
		var pn *node
		if sub, ok := props[name]; ok {
			var err error
			if pn, err = c.compile(sub, at(at(path, "properties"), name)); err != nil {
				return nil, err
			}
		} else if pn = n.additional; pn == nil {
			return nil, &SchemaError{Path: at(path, "required"), Msg: fmt.Sprintf("required property %q is not in properties and additionalProperties is false", name)}
		}
		n.props = append(n.props, prop{key: []byte(name), node: pn})
	}
	for _, r := range required {
		for i, p := range n.props {
			if string(p.key) == r {
				n.required |= 1 << i
			}
		}
	}
	return n, nil
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func (c *compiler) arr(s map[string]any, path string) (*node, error) {
	n := c.newNode(&node{kind: kArray, maxLen: -1})
	var err error
	if n.minItems, err = count(s, "minItems", path, 0); err != nil {
		return nil, err
	}
	if n.maxItems, err = count(s, "maxItems", path, -1); err != nil {
		return nil, err
	}
	if v, ok := s["prefixItems"]; ok {
		l, ok := v.([]any)
		if !ok {
			return nil, &SchemaError{Path: at(path, "prefixItems"), Msg: "want an array of schemas"}
		}
		for i, sub := range l {
			pn, err := c.compile(sub, fmt.Sprintf("%s[%d]", at(path, "prefixItems"), i))
			if err != nil {
				return nil, err
			}
			n.prefix = append(n.prefix, pn)
		}
	}
	switch v := s["items"].(type) {
	case nil:
		n.items = c.anyValue()
	case []any:
		return nil, &SchemaError{Path: at(path, "items"), Msg: "an array of schemas is not supported: use prefixItems"}
	default:
		if n.items, err = c.compile(v, at(path, "items")); err != nil {
			return nil, err
		}
	}
	if n.maxItems >= 0 && len(n.prefix) > n.maxItems {
		n.prefix = n.prefix[:n.maxItems]
	}
	return n, nil
}

// ref resolves a local reference ("#", "#/$defs/x", "#/definitions/x", any JSON pointer into
// the document). Each target compiles once; a reference back into it reuses the node, so
// recursive schemas compile to a cyclic graph.
func (c *compiler) ref(r, path string) (*node, error) {
	if n, ok := c.refs[r]; ok {
		return n, nil
	}
	if !strings.HasPrefix(r, "#") {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("only local references (#...) are supported, not %q", r)}
	}
	target := c.doc
	for _, seg := range strings.Split(strings.TrimPrefix(r, "#"), "/")[1:] {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		m, ok := target.(map[string]any)
		if !ok {
			return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("reference %q does not resolve", r)}
		}
		if target, ok = m[seg]; !ok {
			return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("reference %q does not resolve", r)}
		}
	}
	// A placeholder alternative stands for the target while it compiles, so a reference to it
	// from inside resolves to the placeholder.
	ph := c.newNode(&node{kind: kAlt})
	c.refs[r] = ph
	n, err := c.compile(target, path)
	if err != nil {
		return nil, err
	}
	ph.alts = []*node{n}
	return ph, nil
}

func compact(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(v) // values decoded from JSON always encode
	return bytes.TrimRight(b.Bytes(), "\n")
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

// typeAllows reports whether an enum value e is of one of the types t ("type" may narrow enum).
func typeAllows(t any, e any) bool {
	var ts []any
	switch t := t.(type) {
	case nil:
		return true
	case string:
		ts = []any{t}
	case []any:
		ts = t
	}
	et := typeOf(e)
	for _, x := range ts {
		if x == et || x == "number" && et == "integer" {
			return true
		}
	}
	return false
}

// disjointTypes reports whether each branch of a oneOf declares a single type that no other
// branch declares (integer and number overlap), so at most one can match any value.
func disjointTypes(l []any) bool {
	seen := map[string]bool{}
	for _, b := range l {
		m, ok := b.(map[string]any)
		if !ok {
			return false
		}
		t, ok := m["type"].(string)
		if !ok {
			return false
		}
		if t == "integer" {
			t = "number"
		}
		if seen[t] {
			return false
		}
		seen[t] = true
	}
	return true
}

// heights sets every node's height: the nesting depth of its shallowest instance (a least
// fixpoint over the graph, unsatisfiable nodes left at maxHeight). Finish follows the lowest
// alternative so that a recursive schema's completion ends.
func heights(nodes []*node) {
	for _, n := range nodes {
		n.height = maxHeight
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if !n.sat {
				continue
			}
			h := 0
			switch n.kind {
			case kAlt:
				h = maxHeight
				for _, a := range n.alts {
					if a.sat {
						h = min(h, a.height)
					}
				}
			case kObject:
				for i, p := range n.props {
					if n.required&(1<<i) != 0 {
						h = max(h, p.node.height+1)
					}
				}
			case kArray:
				for i := range n.minItems {
					h = max(h, n.item(i).height+1)
				}
			}
			if h < n.height {
				n.height, changed = h, true
			}
		}
	}
}

const maxHeight = 1 << 30
