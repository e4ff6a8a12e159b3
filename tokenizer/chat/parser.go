package chat

import (
	"fmt"
	"strconv"
)

// Statement nodes. The tree is immutable after Parse, so one Template may render concurrently.
type (
	node     any
	textNode struct{ s string }
	outNode  struct {
		e    expr
		line int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		line      int
		targets   []string // one name, or several for tuple unpacking
		iter      expr
		cond      expr // optional "for x in xs if cond"
		body, els []node
	}
	setNode struct {
		line    int
		targets []string // one name, or several for tuple unpacking
		nsAttr  string   // "ns.attr = ..." when set: targets[0] is the namespace
		e       expr     // nil for a block set, which captures body instead
		body    []node
	}
	loopCtl   struct{ brk bool }
	macroNode struct {
		line     int
		name     string
		params   []string
		defaults []expr // per parameter; nil where the parameter has no default
		body     []node
	}
)

// Expression nodes.
type (
	expr any
	lit  struct{ v any }
	name struct {
		n    string
		line int
	}
	attrX struct {
		obj  expr
		n    string
		line int
	}
	indexX struct {
		obj, key expr
		line     int
	}
	sliceX struct {
		obj, lo, hi, step expr // nil bounds are omitted ones
		line              int
	}
	callX struct {
		fn   expr
		args []expr
		kw   []kwarg
		line int
	}
	filterX struct {
		arg  expr
		n    string
		args []expr
		kw   []kwarg
		line int
	}
	testX struct {
		arg  expr
		n    string
		args []expr
		neg  bool
		line int
	}
	binX struct {
		op   string
		l, r expr
		line int
	}
	unX struct {
		op   string
		x    expr
		line int
	}
	condX struct {
		cond, a, b expr // b nil: "a if cond" yields undefined when cond is false
		line       int
	}
	listX struct{ items []expr }
	dictX struct{ keys, vals []expr }
	kwarg struct {
		n string
		e expr
	}
)

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

// next never moves past the final tEOF token, so error paths cannot run off the end.
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

// peekAt looks k tokens ahead, answering tEOF past the end.
func (p *parser) peekAt(k int) token {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) isOp(s string) bool   { t := p.peek(); return t.kind == tOp && t.s == s }
func (p *parser) isName(s string) bool { t := p.peek(); return t.kind == tName && t.s == s }

func (p *parser) errf(t token, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", t.line, fmt.Sprintf(format, args...))
}

func (p *parser) expectOp(s string) error {
	if t := p.next(); t.kind != tOp || t.s != s {
		return p.errf(t, "expected %q, found %s", s, t)
	}
	return nil
}

func (p *parser) expectKind(k tokKind, what string) (token, error) {
	t := p.next()
	if t.kind != k {
		return t, p.errf(t, "expected %s, found %s", what, t)
	}
	return t, nil
}

func (p *parser) expectName() (string, error) {
	t, err := p.expectKind(tName, "a name")
	return t.s, err
}

// unsupported names Jinja statements this engine does not implement, so a template using them
// fails at Parse with the construct named instead of rendering something else.
var unsupported = map[string]bool{"call": true, "filter": true, "include": true,
	"import": true, "from": true, "extends": true, "block": true, "with": true, "raw": true,
	"autoescape": true, "do": true, "trans": true}

// parseBody parses statements until a block tag whose keyword is in ends (returned, with the
// parser left just after that keyword) or, when ends is empty, until the end of the template.
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	var out []node
	for {
		t := p.next()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.errf(t, "unexpected end of template: missing {%% %s %%}", ends[len(ends)-1])
			}
			return out, "", nil
		case tText:
			out = append(out, textNode{t.s})
		case tVarBegin:
			e, err := p.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tVarEnd, "'}}'"); err != nil {
				return nil, "", err
			}
			out = append(out, outNode{e, t.line})
		case tBlkBegin:
			kw, err := p.expectKind(tName, "a statement keyword")
			if err != nil {
				return nil, "", err
			}
			for _, e := range ends {
				if kw.s == e {
					return out, kw.s, nil
				}
			}
			n, err := p.parseStmt(kw)
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				out = append(out, n)
			}
		default:
			return nil, "", p.errf(t, "unexpected %s", t)
		}
	}
}

func (p *parser) endTag() error {
	_, err := p.expectKind(tBlkEnd, "'%}'")
	return err
}

func (p *parser) parseStmt(kw token) (node, error) {
	switch kw.s {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(kw.line)
	case "set":
		return p.parseSet(kw.line)
	case "break", "continue":
		return loopCtl{kw.s == "break"}, p.endTag()
	case "macro":
		return p.parseMacro(kw.line)
	case "generation":
		// Hugging Face's AssistantTracker tag only marks spans; rendering is the body itself.
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		return ifNode{conds: []expr{lit{true}}, bodies: [][]node{body}}, p.endTag()
	}
	if unsupported[kw.s] {
		return nil, p.errf(kw, "unsupported statement {%% %s %%}", kw.s)
	}
	return nil, p.errf(kw, "unknown statement {%% %s %%}", kw.s)
}

// parseMacro parses "{% macro name(a, b=default) %}body{% endmacro %}". A body that names
// varargs, kwargs or caller is refused: jinja2 gives those names meaning (extra arguments, the
// {% call %} block) that this engine does not implement.
func (p *parser) parseMacro(line int) (node, error) {
	n := macroNode{line: line}
	var err error
	if n.name, err = p.expectName(); err != nil {
		return nil, err
	}
	if err = p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		pn, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.isOp("=") {
			p.next()
			if def, err = p.parseExpr(); err != nil {
				return nil, err
			}
		} else if len(n.defaults) > 0 && n.defaults[len(n.defaults)-1] != nil {
			return nil, p.errf(p.peek(), "macro %s: parameter %s without a default follows one with a default", n.name, pn)
		}
		n.params, n.defaults = append(n.params, pn), append(n.defaults, def)
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	if err = p.expectOp(")"); err != nil {
		return nil, err
	}
	if err = p.endTag(); err != nil {
		return nil, err
	}
	start := p.i
	if n.body, _, err = p.parseBody("endmacro"); err != nil {
		return nil, err
	}
	for _, t := range p.toks[start:p.i] {
		if t.kind == tName && (t.s == "varargs" || t.s == "kwargs" || t.s == "caller") {
			return nil, p.errf(t, "unsupported %s in macro %s", t.s, n.name)
		}
	}
	return n, p.endTag()
}

func (p *parser) parseIf() (node, error) {
	var n ifNode
	for {
		c, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, c), append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endTag(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.parseBody("endif"); err != nil {
				return nil, err
			}
		}
		return n, p.endTag()
	}
}

func (p *parser) parseTargets() ([]string, error) {
	var names []string
	for {
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		names = append(names, n)
		if !p.isOp(",") {
			return names, nil
		}
		p.next()
	}
}

func (p *parser) parseFor(line int) (node, error) {
	n := forNode{line: line}
	var err error
	if p.isOp("(") {
		p.next()
		if n.targets, err = p.parseTargets(); err != nil {
			return nil, err
		}
		if err = p.expectOp(")"); err != nil {
			return nil, err
		}
	} else if n.targets, err = p.parseTargets(); err != nil {
		return nil, err
	}
	if t := p.next(); t.kind != tName || t.s != "in" {
		return nil, p.errf(t, "expected 'in' in for loop, found %s", t)
	}
	// The iterable is parsed without the inline-if so "for x in xs if cond" filters.
	if n.iter, err = p.parseOr(); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.parseExpr(); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errf(p.peek(), "unsupported recursive for loop")
	}
	if err = p.endTag(); err != nil {
		return nil, err
	}
	var end string
	if n.body, end, err = p.parseBody("else", "endfor"); err != nil {
		return nil, err
	}
	if end == "else" {
		if err = p.endTag(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.endTag()
}

func (p *parser) parseSet(line int) (node, error) {
	n := setNode{line: line}
	first, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n.targets = []string{first}
	switch {
	case p.isOp("."):
		p.next()
		if n.nsAttr, err = p.expectName(); err != nil {
			return nil, err
		}
	case p.isOp(","):
		p.next()
		rest, err := p.parseTargets()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, rest...)
	}
	if p.peek().kind == tBlkEnd && n.nsAttr == "" && len(n.targets) == 1 {
		p.next()
		if n.body, _, err = p.parseBody("endset"); err != nil {
			return nil, err
		}
		return n, p.endTag()
	}
	if err := p.expectOp("="); err != nil {
		return nil, err
	}
	if n.e, err = p.parseTuple(); err != nil {
		return nil, err
	}
	return n, p.endTag()
}

// parseTuple parses an expression, or a bare comma-separated tuple as in "set a, b = 1, 2".
func (p *parser) parseTuple() (expr, error) {
	e, err := p.parseExpr()
	if err != nil || !p.isOp(",") {
		return e, err
	}
	items := []expr{e}
	for p.isOp(",") {
		p.next()
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return listX{items}, nil
}

// Expressions follow jinja2's precedence, lowest first: inline if, or, and, not, comparisons
// (==, !=, <, <=, >, >=, in, not in), + and -, ~, * / // %, **, unary - and +, then postfix
// (.attr, [index], (call)) and finally filters and tests, so "xs|length - 1" is (xs|length) - 1.

func (p *parser) parseExpr() (expr, error) {
	line := p.peek().line
	a, err := p.parseOr()
	if err != nil || !p.isName("if") {
		return a, err
	}
	p.next()
	c, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	n := condX{cond: c, a: a, line: line}
	if p.isName("else") {
		p.next()
		if n.b, err = p.parseExpr(); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.isName("or") {
		t := p.next()
		var r expr
		if r, err = p.parseAnd(); err == nil {
			l = binX{"or", l, r, t.line}
		}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.isName("and") {
		t := p.next()
		var r expr
		if r, err = p.parseNot(); err == nil {
			l = binX{"and", l, r, t.line}
		}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		x, err := p.parseNot()
		return unX{"not", x, t.line}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	l, err := p.parseMath1()
	for err == nil {
		t := p.peek()
		var op string
		switch {
		case t.kind == tOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == "<=" || t.s == ">" || t.s == ">="):
			op = t.s
			p.next()
		case t.kind == tName && t.s == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.s == "not" && p.peekAt(1).kind == tName && p.peekAt(1).s == "in":
			op = "not in"
			p.next()
			p.next()
		default:
			return l, nil
		}
		var r expr
		if r, err = p.parseMath1(); err == nil {
			l = binX{op, l, r, t.line}
		}
	}
	return nil, err
}

func (p *parser) parseBinLevel(next func() (expr, error), opset ...string) (expr, error) {
	l, err := next()
	for err == nil {
		t := p.peek()
		match := false
		for _, o := range opset {
			if t.kind == tOp && t.s == o {
				match = true
			}
		}
		if !match {
			return l, nil
		}
		p.next()
		var r expr
		if r, err = next(); err == nil {
			l = binX{t.s, l, r, t.line}
		}
	}
	return nil, err
}

func (p *parser) parseMath1() (expr, error)  { return p.parseBinLevel(p.parseConcat, "+", "-") }
func (p *parser) parseConcat() (expr, error) { return p.parseBinLevel(p.parseMath2, "~") }
func (p *parser) parseMath2() (expr, error) {
	return p.parseBinLevel(p.parsePow, "*", "/", "//", "%")
}
func (p *parser) parsePow() (expr, error) {
	return p.parseBinLevel(func() (expr, error) { return p.parseUnary(true) }, "**")
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var x expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		t := p.next()
		var inner expr
		if inner, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = unX{t.s, inner, t.line}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilters(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tName:
		switch t.s {
		case "true", "True":
			return lit{true}, nil
		case "false", "False":
			return lit{false}, nil
		case "none", "None":
			return lit{nil}, nil
		}
		return name{t.s, t.line}, nil
	case tString:
		s := t.s
		for p.peek().kind == tString { // adjacent literals concatenate, as in Python
			s += p.next().s
		}
		return lit{s}, nil
	case tInt:
		v, err := strconv.ParseInt(t.s, 10, 64)
		if err != nil {
			return nil, p.errf(t, "integer literal %s: %v", t.s, err)
		}
		return lit{v}, nil
	case tFloat:
		v, err := strconv.ParseFloat(t.s, 64)
		if err != nil {
			return nil, p.errf(t, "float literal %s: %v", t.s, err)
		}
		return lit{v}, nil
	case tOp:
		switch t.s {
		case "(":
			if p.isOp(")") { // empty tuple
				p.next()
				return listX{}, nil
			}
			e, err := p.parseTuple()
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			items, err := p.parseList("]")
			return listX{items}, err
		case "{":
			var d dictX
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errf(t, "unexpected %s in expression", t)
}

// parseList parses comma-separated expressions up to the closing op (consumed).
func (p *parser) parseList(closer string) ([]expr, error) {
	var items []expr
	for !p.isOp(closer) {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(closer) {
				break
			}
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	p.next()
	return items, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	var args []expr
	var kws []kwarg
	for !p.isOp(")") {
		if len(args)+len(kws) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.peek().kind == tName && p.peekAt(1).kind == tOp && p.peekAt(1).s == "=" {
			n := p.next().s
			p.next()
			e, err := p.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			kws = append(kws, kwarg{n, e})
			continue
		}
		if len(kws) > 0 {
			return nil, nil, p.errf(p.peek(), "positional argument after keyword argument")
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, nil, err
		}
		args = append(args, e)
	}
	p.next()
	return args, kws, nil
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		t := p.peek()
		if t.kind != tOp {
			return x, nil
		}
		switch t.s {
		case ".":
			p.next()
			nt := p.next()
			switch nt.kind {
			case tName:
				x = attrX{x, nt.s, t.line}
			case tInt: // jinja allows foo.0 for foo[0]
				v, _ := strconv.ParseInt(nt.s, 10, 64)
				x = indexX{x, lit{v}, t.line}
			default:
				return nil, p.errf(nt, "expected attribute name after '.', found %s", nt)
			}
		case "[":
			p.next()
			var parts [3]expr
			n, isSlice := 0, false
			for {
				if p.isOp(":") {
					p.next()
					isSlice = true
					n++
					if n > 2 {
						return nil, p.errf(t, "too many ':' in slice")
					}
					continue
				}
				if p.isOp("]") {
					p.next()
					break
				}
				if parts[n] != nil {
					return nil, p.errf(p.peek(), "expected ':' or ']' in subscript, found %s", p.peek())
				}
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				parts[n] = e
			}
			if isSlice {
				x = sliceX{x, parts[0], parts[1], parts[2], t.line}
			} else {
				if parts[0] == nil {
					return nil, p.errf(t, "empty subscript")
				}
				x = indexX{x, parts[0], t.line}
			}
		case "(":
			p.next()
			args, kws, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			x = callX{x, args, kws, t.line}
		default:
			return x, nil
		}
	}
}

func (p *parser) parseFilters(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			t := p.next()
			n, err := p.expectName()
			if err != nil {
				return nil, err
			}
			if _, ok := filters[n]; !ok {
				return nil, p.errf(t, "unknown filter %q", n)
			}
			f := filterX{arg: x, n: n, line: t.line}
			if p.isOp("(") {
				p.next()
				if f.args, f.kw, err = p.parseArgs(); err != nil {
					return nil, err
				}
			}
			x = f
		case p.isName("is"):
			t := p.next()
			tx := testX{arg: x, line: t.line}
			if p.isName("not") {
				p.next()
				tx.neg = true
			}
			nt := p.next()
			if nt.kind != tName {
				return nil, p.errf(nt, "expected test name after 'is', found %s", nt)
			}
			tx.n = nt.s
			if _, ok := tests[tx.n]; !ok {
				return nil, p.errf(nt, "unknown test %q", tx.n)
			}
			if p.isOp("(") {
				p.next()
				args, kws, err := p.parseArgs()
				if err != nil {
					return nil, err
				}
				if len(kws) > 0 {
					return nil, p.errf(nt, "keyword arguments to test %q are not supported", tx.n)
				}
				tx.args = args
			} else if pt := p.peek(); pt.kind == tString || pt.kind == tInt || pt.kind == tFloat ||
				pt.kind == tName && !isKeyword(pt.s) {
				// "is sameas false", "is divisibleby 3": one argument without parentheses.
				arg, err := p.parseUnary(false)
				if err != nil {
					return nil, err
				}
				tx.args = []expr{arg}
			}
			x = tx
		default:
			return x, nil
		}
	}
}

func isKeyword(s string) bool {
	switch s {
	case "and", "or", "not", "in", "is", "if", "else", "recursive":
		return true
	}
	return false
}
