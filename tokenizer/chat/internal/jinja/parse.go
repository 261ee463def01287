package jinja

import (
	"fmt"
)

// maxParseDepth bounds the parser's recursion (nested expressions and
// blocks) so that hostile templates cannot exhaust the Go stack.
const maxParseDepth = 200

type parser struct {
	toks  []token
	p     int
	depth int
}

// syntaxError is a template syntax error with its line.
type syntaxError struct {
	line int
	msg  string
	kind string // Python exception class; TemplateSyntaxError when empty
}

func (e *syntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// parsePanic carries a syntax error through the recursive descent parser.
type parsePanic struct{ err *syntaxError }

func (ps *parser) fail(line int, format string, args ...any) {
	panic(parsePanic{&syntaxError{line, fmt.Sprintf(format, args...), ""}})
}

func (ps *parser) failKind(line int, kind, format string, args ...any) {
	panic(parsePanic{&syntaxError{line, fmt.Sprintf(format, args...), kind}})
}

func parseTemplate(toks []token) (nodes []node, err error) {
	ps := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pp, ok := r.(parsePanic)
			if !ok {
				panic(r)
			}
			nodes, err = nil, pp.err
		}
	}()
	body, _ := ps.subparse(nil)
	if ps.cur().kind != tkEOF {
		ps.fail(ps.cur().line, "unexpected %s", ps.cur().describe())
	}
	checkNames(body, false)
	return body, nil
}

func (ps *parser) cur() token { return ps.toks[ps.p] }

func (ps *parser) look() token {
	if ps.p+1 < len(ps.toks) {
		return ps.toks[ps.p+1]
	}
	return ps.toks[len(ps.toks)-1]
}

func (ps *parser) next() token {
	t := ps.toks[ps.p]
	if ps.p < len(ps.toks)-1 {
		ps.p++
	}
	return t
}

func (ps *parser) isName(name string) bool {
	t := ps.cur()
	return t.kind == tkName && t.s == name
}

func (ps *parser) isOp(op string) bool {
	t := ps.cur()
	return t.kind == tkOp && t.s == op
}

func (ps *parser) skipName(name string) bool {
	if ps.isName(name) {
		ps.next()
		return true
	}
	return false
}

func (ps *parser) skipOp(op string) bool {
	if ps.isOp(op) {
		ps.next()
		return true
	}
	return false
}

func (ps *parser) expectOp(op string) token {
	if !ps.isOp(op) {
		ps.fail(ps.cur().line, "expected token '%s', got '%s'", op, ps.cur().describe())
	}
	return ps.next()
}

func (ps *parser) expectKind(k tokKind) token {
	if ps.cur().kind != k {
		ps.fail(ps.cur().line, "expected %s, got '%s'", k, ps.cur().describe())
	}
	return ps.next()
}

func (ps *parser) expectName() token {
	return ps.expectKind(tkName)
}

func (ps *parser) expectNameValue(name string) token {
	if !ps.isName(name) {
		ps.fail(ps.cur().line, "expected token '%s', got '%s'", name, ps.cur().describe())
	}
	return ps.next()
}

func (ps *parser) enter() {
	ps.depth++
	if ps.depth > maxParseDepth {
		ps.fail(ps.cur().line, "template nesting too deep (limit %d)", maxParseDepth)
	}
}

func (ps *parser) leave() { ps.depth-- }

// subparse parses template data and statements until one of endTags is the
// next statement name (which is left as the current token, just after the
// block-begin). It returns the body and the matched end tag ("" at EOF).
func (ps *parser) subparse(endTags []string) ([]node, string) {
	ps.enter()
	defer ps.leave()
	var body []node
	var data []expr
	dataLine := 0
	flush := func() {
		if len(data) > 0 {
			body = append(body, &outputNode{pos{dataLine}, data})
			data = nil
		}
	}
	for {
		t := ps.cur()
		switch t.kind {
		case tkEOF:
			flush()
			return body, ""
		case tkData:
			if len(data) == 0 {
				dataLine = t.line
			}
			data = append(data, &constExpr{pos{t.line}, t.s})
			ps.next()
		case tkVarBegin:
			ps.next()
			if len(data) == 0 {
				dataLine = t.line
			}
			data = append(data, ps.parseTuple(false, true, nil, false))
			ps.expectKind(tkVarEnd)
		case tkBlockBegin:
			flush()
			ps.next()
			if ps.cur().kind == tkName {
				for _, e := range endTags {
					if ps.cur().s == e {
						return body, e
					}
				}
			}
			n := ps.parseStatement()
			if n != nil {
				body = append(body, n)
			}
			ps.expectKind(tkBlockEnd)
		default:
			ps.fail(t.line, "unexpected %s", t.describe())
		}
	}
}

// parseStatements parses a block body up to one of endTags.
func (ps *parser) parseStatements(endTags []string, dropNeedle bool) ([]node, string) {
	ps.skipOp(":")
	ps.expectKind(tkBlockEnd)
	body, tag := ps.subparse(endTags)
	if tag == "" {
		ps.fail(ps.cur().line, "Unexpected end of template. Jinja was looking for the following tags: %s", quoteTags(endTags))
	}
	if dropNeedle {
		ps.next()
	}
	return body, tag
}

func quoteTags(tags []string) string {
	s := ""
	for i, t := range tags {
		if i > 0 {
			s += " or "
		}
		s += "'" + t + "'"
	}
	return s
}

func (ps *parser) parseStatement() node {
	t := ps.cur()
	if t.kind != tkName {
		ps.fail(t.line, "tag name expected")
	}
	switch t.s {
	case "for":
		return ps.parseFor()
	case "if":
		return ps.parseIf()
	case "set":
		return ps.parseSet()
	case "macro":
		return ps.parseMacro()
	case "call":
		return ps.parseCallBlock()
	case "filter":
		return ps.parseFilterBlock()
	case "with":
		return ps.parseWith()
	case "print":
		ps.next()
		var exprs []expr
		for ps.cur().kind != tkBlockEnd {
			if len(exprs) > 0 {
				ps.expectOp(",")
			}
			exprs = append(exprs, ps.parseExpression(true))
		}
		return &outputNode{pos{t.line}, exprs}
	case "break":
		ps.next()
		return &breakNode{pos{t.line}}
	case "continue":
		ps.next()
		return &continueNode{pos{t.line}}
	case "generation":
		// transformers' AssistantTracker extension: renders its body.
		ps.next()
		body, _ := ps.parseStatements([]string{"endgeneration"}, true)
		return &scopeNode{pos{t.line}, body}
	case "include", "import", "from", "extends":
		ps.fail(t.line, "'%s' is not allowed: chat templates cannot load other templates", t.s)
	case "block", "autoescape":
		ps.fail(t.line, "'%s' tags are not supported in chat templates", t.s)
	}
	ps.fail(t.line, "Encountered unknown tag '%s'.", t.s)
	return nil
}

func (ps *parser) parseFor() node {
	line := ps.next().line
	tgt := ps.parseAssignTarget(true, false, []string{"in"}, false)
	ps.expectNameValue("in")
	iter := ps.parseTuple(false, false, []string{"recursive"}, false)
	var filter expr
	if ps.skipName("if") {
		filter = ps.parseExpression(true)
	}
	recursive := ps.skipName("recursive")
	if recursive {
		ps.fail(line, "recursive for loops are not supported")
	}
	body, tag := ps.parseStatements([]string{"endfor", "else"}, false)
	ps.next()
	var els []node
	if tag == "else" {
		els, _ = ps.parseStatements([]string{"endfor"}, true)
	}
	return &forNode{pos{line}, tgt, iter, filter, body, els, recursive}
}

func (ps *parser) parseIf() node {
	line := ps.next().line
	n := &ifNode{pos: pos{line}}
	for {
		cond := ps.parseTuple(false, false, nil, false)
		body, tag := ps.parseStatements([]string{"elif", "else", "endif"}, false)
		ps.next()
		n.branches = append(n.branches, ifBranch{cond, body})
		if tag == "elif" {
			continue
		}
		if tag == "else" {
			n.els, _ = ps.parseStatements([]string{"endif"}, true)
		}
		return n
	}
}

func (ps *parser) parseSet() node {
	line := ps.next().line
	tgt := ps.parseAssignTarget(true, false, nil, true)
	if ps.skipOp("=") {
		val := ps.parseTuple(false, true, nil, false)
		return &setNode{pos{line}, tgt, val}
	}
	filters := ps.parseFilterChain(false)
	body, _ := ps.parseStatements([]string{"endset"}, true)
	return &setBlockNode{pos{line}, tgt, filters, body}
}

func (ps *parser) parseMacro() node {
	line := ps.next().line
	name := ps.expectName().s
	params := ps.parseSignature()
	body, _ := ps.parseStatements([]string{"endmacro"}, true)
	return &macroNode{pos{line}, name, params, body}
}

func (ps *parser) parseSignature() []macroParam {
	ps.expectOp("(")
	var params []macroParam
	hasDefault := false
	for !ps.isOp(")") {
		if len(params) > 0 {
			ps.expectOp(",")
		}
		name := ps.expectName().s
		p := macroParam{name: name}
		if ps.skipOp("=") {
			p.def = ps.parseExpression(true)
			hasDefault = true
		} else if hasDefault {
			ps.fail(ps.cur().line, "non-default argument follows default argument")
		}
		params = append(params, p)
	}
	ps.expectOp(")")
	return params
}

func (ps *parser) parseCallBlock() node {
	line := ps.next().line
	var params []macroParam
	if ps.isOp("(") {
		params = ps.parseSignature()
	}
	e := ps.parseExpression(true)
	call, ok := e.(*callExpr)
	if !ok {
		ps.fail(line, "expected call")
	}
	body, _ := ps.parseStatements([]string{"endcall"}, true)
	return &callBlockNode{pos{line}, call, params, body}
}

func (ps *parser) parseFilterBlock() node {
	line := ps.next().line
	filters := ps.parseFilterChain(true)
	body, _ := ps.parseStatements([]string{"endfilter"}, true)
	return &filterBlockNode{pos{line}, filters, body}
}

func (ps *parser) parseWith() node {
	line := ps.next().line
	n := &withNode{pos: pos{line}}
	for ps.cur().kind != tkBlockEnd {
		if len(n.targets) > 0 {
			ps.expectOp(",")
		}
		n.targets = append(n.targets, ps.parseAssignTarget(true, false, nil, false))
		ps.expectOp("=")
		n.values = append(n.values, ps.parseExpression(true))
	}
	n.body, _ = ps.parseStatements([]string{"endwith"}, true)
	return n
}

// parseAssignTarget parses a name, a (nested) tuple of names or, when
// withNamespace, a namespace attribute reference "ns.attr".
func (ps *parser) parseAssignTarget(withTuple, nameOnly bool, extraEnd []string, withNamespace bool) target {
	t := ps.cur()
	if withNamespace && t.kind == tkName && ps.look().kind == tkOp && ps.look().s == "." {
		ps.next()
		ps.next()
		attr := ps.expectName()
		return &nsTarget{pos{t.line}, t.s, attr.s}
	}
	if nameOnly {
		n := ps.expectName()
		return &nameTarget{pos{n.line}, n.s}
	}
	if !withTuple {
		return ps.parseTargetPrimary()
	}
	var items []target
	isTuple := false
	for {
		if len(items) > 0 {
			ps.expectOp(",")
		}
		if ps.isTupleEnd(extraEnd) {
			break
		}
		items = append(items, ps.parseTargetPrimary())
		if ps.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) == 0 {
			ps.fail(t.line, "Expected an expression, got '%s'", ps.cur().describe())
		}
		return items[0]
	}
	return &tupleTarget{pos{t.line}, items}
}

func (ps *parser) parseTargetPrimary() target {
	t := ps.cur()
	switch {
	case t.kind == tkName:
		switch t.s {
		case "true", "false", "True", "False", "none", "None":
			ps.fail(t.line, "can't assign to 'const'")
		}
		ps.next()
		return &nameTarget{pos{t.line}, t.s}
	case t.kind == tkOp && t.s == "(":
		ps.next()
		ps.enter()
		tg := ps.parseAssignTarget(true, false, nil, false)
		ps.leave()
		ps.expectOp(")")
		return tg
	}
	ps.fail(t.line, "can't assign to '%s'", t.describe())
	return nil
}

func (ps *parser) isTupleEnd(extraEnd []string) bool {
	t := ps.cur()
	if t.kind == tkVarEnd || t.kind == tkBlockEnd || (t.kind == tkOp && t.s == ")") || t.kind == tkEOF {
		return true
	}
	for _, e := range extraEnd {
		if t.kind == tkName && t.s == e {
			return true
		}
	}
	return false
}

// parseTuple mirrors jinja2 Parser.parse_tuple (simplified is not needed:
// assignment targets use parseAssignTarget).
func (ps *parser) parseTuple(_ bool, withCondexpr bool, extraEnd []string, explicitParens bool) expr {
	line := ps.cur().line
	var args []expr
	isTuple := false
	for {
		if len(args) > 0 {
			ps.expectOp(",")
		}
		if ps.isTupleEnd(extraEnd) {
			break
		}
		args = append(args, ps.parseExpression(withCondexpr))
		if ps.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(args) > 0 {
			return args[0]
		}
		if !explicitParens {
			ps.fail(ps.cur().line, "Expected an expression, got '%s'", ps.cur().describe())
		}
	}
	return &listExpr{pos{line}, args, true}
}

func (ps *parser) parseExpression(withCondexpr bool) expr {
	ps.enter()
	defer ps.leave()
	if withCondexpr {
		return ps.parseCondexpr()
	}
	return ps.parseOr()
}

func (ps *parser) parseCondexpr() expr {
	line := ps.cur().line
	e1 := ps.parseOr()
	for ps.skipName("if") {
		e2 := ps.parseOr()
		var e3 expr
		if ps.skipName("else") {
			ps.enter()
			e3 = ps.parseCondexpr()
			ps.leave()
		}
		e1 = &condExpr{pos{line}, e2, e1, e3}
		line = ps.cur().line
	}
	return e1
}

func (ps *parser) parseOr() expr {
	line := ps.cur().line
	l := ps.parseAnd()
	for ps.skipName("or") {
		r := ps.parseAnd()
		l = &orExpr{pos{line}, l, r}
		line = ps.cur().line
	}
	return l
}

func (ps *parser) parseAnd() expr {
	line := ps.cur().line
	l := ps.parseNot()
	for ps.skipName("and") {
		r := ps.parseNot()
		l = &andExpr{pos{line}, l, r}
		line = ps.cur().line
	}
	return l
}

func (ps *parser) parseNot() expr {
	if ps.isName("not") {
		line := ps.next().line
		ps.enter()
		defer ps.leave()
		return &notExpr{pos{line}, ps.parseNot()}
	}
	return ps.parseCompare()
}

var cmpOps = map[string]string{"==": "eq", "!=": "ne", "<": "lt", "<=": "lteq", ">": "gt", ">=": "gteq"}

func (ps *parser) parseCompare() expr {
	line := ps.cur().line
	e := ps.parseMath1()
	var ops []cmpOp
	for {
		t := ps.cur()
		if t.kind == tkOp {
			if op, ok := cmpOps[t.s]; ok {
				ps.next()
				ops = append(ops, cmpOp{op, ps.parseMath1()})
				continue
			}
		}
		if ps.skipName("in") {
			ops = append(ops, cmpOp{"in", ps.parseMath1()})
			continue
		}
		if ps.isName("not") && ps.look().kind == tkName && ps.look().s == "in" {
			ps.next()
			ps.next()
			ops = append(ops, cmpOp{"notin", ps.parseMath1()})
			continue
		}
		break
	}
	if len(ops) == 0 {
		return e
	}
	return &compareExpr{pos{line}, e, ops}
}

func (ps *parser) parseMath1() expr {
	line := ps.cur().line
	l := ps.parseConcat()
	for ps.isOp("+") || ps.isOp("-") {
		op := ps.next().s
		r := ps.parseConcat()
		l = &binExpr{pos{line}, op, l, r}
		line = ps.cur().line
	}
	return l
}

func (ps *parser) parseConcat() expr {
	line := ps.cur().line
	args := []expr{ps.parseMath2()}
	for ps.skipOp("~") {
		args = append(args, ps.parseMath2())
	}
	if len(args) == 1 {
		return args[0]
	}
	return &concatExpr{pos{line}, args}
}

func (ps *parser) parseMath2() expr {
	line := ps.cur().line
	l := ps.parsePow()
	for ps.isOp("*") || ps.isOp("/") || ps.isOp("//") || ps.isOp("%") {
		op := ps.next().s
		r := ps.parsePow()
		l = &binExpr{pos{line}, op, l, r}
		line = ps.cur().line
	}
	return l
}

func (ps *parser) parsePow() expr {
	line := ps.cur().line
	l := ps.parseUnary(true)
	for ps.skipOp("**") {
		r := ps.parseUnary(true)
		l = &binExpr{pos{line}, "**", l, r}
		line = ps.cur().line
	}
	return l
}

func (ps *parser) parseUnary(withFilter bool) expr {
	ps.enter()
	defer ps.leave()
	t := ps.cur()
	var n expr
	if t.kind == tkOp && (t.s == "-" || t.s == "+") {
		ps.next()
		n = &unaryExpr{pos{t.line}, t.s, ps.parseUnary(false)}
	} else {
		n = ps.parsePrimary()
	}
	n = ps.parsePostfix(n)
	if withFilter {
		n = ps.parseFilterExpr(n)
	}
	return n
}

func (ps *parser) parsePrimary() expr {
	t := ps.cur()
	switch t.kind {
	case tkName:
		ps.next()
		switch t.s {
		case "true", "True":
			return &constExpr{pos{t.line}, true}
		case "false", "False":
			return &constExpr{pos{t.line}, false}
		case "none", "None":
			return &constExpr{pos{t.line}, None}
		}
		return &nameExpr{pos{t.line}, t.s}
	case tkString:
		ps.next()
		s := t.s
		for ps.cur().kind == tkString {
			s += ps.next().s
		}
		return &constExpr{pos{t.line}, s}
	case tkInt:
		ps.next()
		return &constExpr{pos{t.line}, t.i}
	case tkFloat:
		ps.next()
		return &constExpr{pos{t.line}, t.f}
	case tkOp:
		switch t.s {
		case "(":
			ps.next()
			e := ps.parseTuple(false, true, nil, true)
			ps.expectOp(")")
			return e
		case "[":
			return ps.parseList()
		case "{":
			return ps.parseDict()
		}
	}
	ps.fail(t.line, "unexpected '%s'", t.describe())
	return nil
}

func (ps *parser) parseList() expr {
	t := ps.expectOp("[")
	var items []expr
	for !ps.isOp("]") {
		if len(items) > 0 {
			ps.expectOp(",")
		}
		if ps.isOp("]") {
			break
		}
		items = append(items, ps.parseExpression(true))
	}
	ps.expectOp("]")
	return &listExpr{pos{t.line}, items, false}
}

func (ps *parser) parseDict() expr {
	t := ps.expectOp("{")
	d := &dictExpr{pos: pos{t.line}}
	for !ps.isOp("}") {
		if len(d.keys) > 0 {
			ps.expectOp(",")
		}
		if ps.isOp("}") {
			break
		}
		k := ps.parseExpression(true)
		ps.expectOp(":")
		v := ps.parseExpression(true)
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, v)
	}
	ps.expectOp("}")
	return d
}

func (ps *parser) parsePostfix(n expr) expr {
	for {
		if ps.isOp(".") || ps.isOp("[") {
			n = ps.parseSubscript(n)
		} else if ps.isOp("(") {
			n = ps.parseCall(n)
		} else {
			return n
		}
	}
}

func (ps *parser) parseFilterExpr(n expr) expr {
	for {
		switch {
		case ps.isOp("|"):
			ps.next()
			n = ps.parseOneFilter(n)
		case ps.isName("is"):
			n = ps.parseTest(n)
		case ps.isOp("("):
			n = ps.parseCall(n)
		default:
			return n
		}
	}
}

func (ps *parser) parseSubscript(n expr) expr {
	t := ps.next()
	if t.s == "." {
		a := ps.cur()
		ps.next()
		if a.kind == tkName {
			return &getattrExpr{pos{t.line}, n, a.s}
		}
		if a.kind != tkInt {
			ps.fail(a.line, "expected name or number")
		}
		return &getitemExpr{pos{t.line}, n, &constExpr{pos{a.line}, a.i}}
	}
	var args []expr
	for !ps.isOp("]") {
		if len(args) > 0 {
			ps.expectOp(",")
		}
		args = append(args, ps.parseSubscribed())
	}
	ps.expectOp("]")
	if len(args) == 1 {
		return &getitemExpr{pos{t.line}, n, args[0]}
	}
	return &getitemExpr{pos{t.line}, n, &listExpr{pos{t.line}, args, true}}
}

func (ps *parser) parseSubscribed() expr {
	line := ps.cur().line
	var start expr
	if ps.isOp(":") {
		ps.next()
	} else {
		e := ps.parseExpression(true)
		if !ps.isOp(":") {
			return e
		}
		ps.next()
		start = e
	}
	s := &sliceExpr{pos: pos{line}, start: start}
	if !ps.isOp(":") && !ps.isOp("]") && !ps.isOp(",") {
		s.stop = ps.parseExpression(true)
	}
	if ps.skipOp(":") {
		if !ps.isOp("]") && !ps.isOp(",") {
			s.step = ps.parseExpression(true)
		}
	}
	return s
}

func (ps *parser) parseCallArgs() callArgs {
	lp := ps.expectOp("(")
	var ca callArgs
	requireComma := false
	for !ps.isOp(")") {
		if requireComma {
			ps.expectOp(",")
			if ps.isOp(")") {
				break
			}
		}
		switch {
		case ps.isOp("*"):
			if ca.dynArgs != nil || ca.dynKwarg != nil {
				ps.fail(lp.line, "invalid syntax for function call expression")
			}
			ps.next()
			ca.dynArgs = ps.parseExpression(true)
		case ps.isOp("**"):
			if ca.dynKwarg != nil {
				ps.fail(lp.line, "invalid syntax for function call expression")
			}
			ps.next()
			ca.dynKwarg = ps.parseExpression(true)
		case ps.cur().kind == tkName && ps.look().kind == tkOp && ps.look().s == "=":
			if ca.dynKwarg != nil {
				ps.fail(lp.line, "invalid syntax for function call expression")
			}
			key := ps.next().s
			ps.next()
			ca.kwargs = append(ca.kwargs, kwArg{key, ps.parseExpression(true)})
		default:
			if ca.dynArgs != nil || ca.dynKwarg != nil || len(ca.kwargs) > 0 {
				ps.fail(lp.line, "invalid syntax for function call expression")
			}
			ca.args = append(ca.args, ps.parseExpression(true))
		}
		requireComma = true
	}
	ps.expectOp(")")
	return ca
}

func (ps *parser) parseCall(n expr) expr {
	line := ps.cur().line
	return &callExpr{pos{line}, n, ps.parseCallArgs()}
}

// parseFilterChain parses "name(args)|name2..." (the leading '|' is absent
// for the first filter when startInline).
func (ps *parser) parseFilterChain(startInline bool) []*filterExpr {
	var out []*filterExpr
	for ps.isOp("|") || startInline {
		if !startInline {
			ps.next()
		}
		startInline = false
		out = append(out, ps.parseOneFilter(nil).(*filterExpr))
	}
	return out
}

func (ps *parser) parseOneFilter(n expr) expr {
	t := ps.expectName()
	name := t.s
	for ps.isOp(".") {
		ps.next()
		name += "." + ps.expectName().s
	}
	f := &filterExpr{pos: pos{t.line}, obj: n, name: name}
	if ps.isOp("(") {
		f.callArgs = ps.parseCallArgs()
	}
	return f
}

func (ps *parser) parseTest(n expr) expr {
	t := ps.next() // "is"
	negated := ps.skipName("not")
	nt := ps.expectName()
	name := nt.s
	for ps.isOp(".") {
		ps.next()
		name += "." + ps.expectName().s
	}
	te := &testExpr{pos: pos{t.line}, obj: n, name: name}
	c := ps.cur()
	switch {
	case ps.isOp("("):
		te.callArgs = ps.parseCallArgs()
	case (c.kind == tkName || c.kind == tkString || c.kind == tkInt || c.kind == tkFloat ||
		(c.kind == tkOp && (c.s == "(" || c.s == "[" || c.s == "{"))) &&
		!(c.kind == tkName && (c.s == "else" || c.s == "or" || c.s == "and")):
		if c.kind == tkName && c.s == "is" {
			ps.fail(c.line, "You cannot chain multiple tests with is")
		}
		arg := ps.parsePrimary()
		arg = ps.parsePostfix(arg)
		te.args = []expr{arg}
	}
	if negated {
		return &notExpr{pos{t.line}, te}
	}
	return te
}
