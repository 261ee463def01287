package jinja

// Statement nodes.

type node interface{ nodeLine() int }

type pos struct{ line int }

func (p pos) nodeLine() int { return p.line }

type textNode struct {
	pos
	text string
}

type outputNode struct {
	pos
	exprs []expr
}

type ifBranch struct {
	cond expr
	body []node
}

type ifNode struct {
	pos
	branches []ifBranch
	els      []node
}

type forNode struct {
	pos
	target    target
	iter      expr
	filter    expr
	body      []node
	els       []node
	recursive bool
}

type setNode struct {
	pos
	target target
	value  expr
}

type setBlockNode struct {
	pos
	target  target
	filters []*filterExpr // applied in order to the captured body
	body    []node
}

type macroParam struct {
	name string
	def  expr // nil: no default
}

type macroNode struct {
	pos
	name   string
	params []macroParam
	body   []node
}

type callBlockNode struct {
	pos
	call   *callExpr
	params []macroParam
	body   []node
}

type filterBlockNode struct {
	pos
	filters []*filterExpr
	body    []node
}

type withNode struct {
	pos
	targets []target
	values  []expr
	body    []node
}

type breakNode struct{ pos }

type continueNode struct{ pos }

// scopeNode renders its body in place (used for {% generation %}).
type scopeNode struct {
	pos
	body []node
}

// Assignment targets.

type target interface{ targetLine() int }

type nameTarget struct {
	pos
	name string
}

type tupleTarget struct {
	pos
	items []target
}

type nsTarget struct {
	pos
	name, attr string
}

func (t *nameTarget) targetLine() int  { return t.line }
func (t *tupleTarget) targetLine() int { return t.line }
func (t *nsTarget) targetLine() int    { return t.line }

// Expression nodes.

type expr interface{ exprLine() int }

func (p pos) exprLine() int { return p.line }

type constExpr struct {
	pos
	val Value
}

type nameExpr struct {
	pos
	name string
}

type listExpr struct {
	pos
	items []expr
	tuple bool
}

type dictExpr struct {
	pos
	keys, vals []expr
}

type getattrExpr struct {
	pos
	obj  expr
	attr string
}

type getitemExpr struct {
	pos
	obj expr
	arg expr
}

type sliceExpr struct {
	pos
	start, stop, step expr // nil when omitted
}

type kwArg struct {
	name string
	val  expr
}

type callArgs struct {
	args     []expr
	kwargs   []kwArg
	dynArgs  expr
	dynKwarg expr
}

type callExpr struct {
	pos
	fn expr
	callArgs
}

type filterExpr struct {
	pos
	obj  expr // nil inside filter blocks / set blocks
	name string
	callArgs
}

type testExpr struct {
	pos
	obj  expr
	name string
	callArgs
}

type notExpr struct {
	pos
	x expr
}

type unaryExpr struct {
	pos
	op string // "-" or "+"
	x  expr
}

type binExpr struct {
	pos
	op   string // + - * / // % **
	l, r expr
}

type concatExpr struct {
	pos
	parts []expr
}

type cmpOp struct {
	op string // eq ne lt lteq gt gteq in notin
	x  expr
}

type compareExpr struct {
	pos
	first expr
	ops   []cmpOp
}

type andExpr struct {
	pos
	l, r expr
}

type orExpr struct {
	pos
	l, r expr
}

type condExpr struct {
	pos
	test, yes, no expr // no may be nil
}
