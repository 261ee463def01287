package jinja

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	errBreak    = errors.New("break outside of a loop")
	errContinue = errors.New("continue outside of a loop")
)

// lineError attaches the template line to the innermost failing statement
// or expression.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// LimitError reports that a render exceeded one of its resource limits.
type LimitError struct {
	Msg  string
	Kind string // "" (reported as LimitError) or RecursionError
}

func (e *LimitError) Error() string { return e.Msg }

// scope is one level of variables. Scopes are small (loop variables,
// macro parameters, a few sets), so a slice with inline storage beats a map.
type scope struct {
	b      []binding
	inline [3]binding
	parent *scope
}

type binding struct {
	name string
	val  Value
}

func newScope(parent *scope) *scope {
	s := &scope{parent: parent}
	s.b = s.inline[:0]
	return s
}

// get looks name up in this level only.
func (s *scope) get(name string) (Value, bool) {
	for i := len(s.b) - 1; i >= 0; i-- {
		if s.b[i].name == name {
			return s.b[i].val, true
		}
	}
	return nil, false
}

// set binds name in this level.
func (s *scope) set(name string, v Value) {
	for i := len(s.b) - 1; i >= 0; i-- {
		if s.b[i].name == name {
			s.b[i].val = v
			return
		}
	}
	s.b = append(s.b, binding{name, v})
}

func (s *scope) lookup(name string) (Value, bool) {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.get(name); ok {
			return v, true
		}
	}
	return nil, false
}

// Macro is a template macro (also used for call-block bodies).
type Macro struct {
	name       string
	params     []macroParam
	body       []node
	closure    *scope
	catchArgs  bool // body references varargs
	catchKw    bool // body references kwargs
	usesCaller bool // body references caller
}

type evaluator struct {
	ctx       context.Context
	deadline  time.Time
	steps     int64 // remaining work units
	checkIn   int   // steps until the next deadline check
	maxOutput int
	maxDepth  int
	depth     int
	now       func() time.Time
	line      int // line of the statement being executed (for panics)
	out       *strings.Builder
	outs      []*strings.Builder
}

func (e *evaluator) step() error {
	e.steps--
	if e.steps < 0 {
		return &LimitError{Msg: "template exceeded its work budget"}
	}
	e.checkIn--
	if e.checkIn <= 0 {
		e.checkIn = 512
		if e.ctx != nil {
			if err := e.ctx.Err(); err != nil {
				return &LimitError{Msg: "template rendering cancelled: " + err.Error()}
			}
		}
		if !e.deadline.IsZero() && time.Now().After(e.deadline) {
			return &LimitError{Msg: "template rendering exceeded its time limit"}
		}
	}
	return nil
}

// maxItems bounds the length of any list the template builds.
const maxItems = 1 << 20

// chargeBytes accounts for building a string of n bytes (1 unit per 16
// bytes) and rejects strings longer than the output limit.
func (e *evaluator) chargeBytes(n int) error {
	if n > e.maxOutput || n < 0 {
		return &LimitError{Msg: fmt.Sprintf("template value exceeds the output limit of %d bytes", e.maxOutput)}
	}
	e.steps -= int64(n/16) + 1
	if e.steps < 0 {
		return &LimitError{Msg: "template exceeded its work budget"}
	}
	return nil
}

// chargeCompare accounts for a comparison that visited n values (one unit
// per 8 values, plus one).
func (e *evaluator) chargeCompare(n int64) error {
	e.steps -= n / 8
	return e.step()
}

// chargeAppend accounts for appending n bytes to a string of cur bytes.
func (e *evaluator) chargeAppend(cur, n int) error {
	if cur+n > e.maxOutput {
		return &LimitError{Msg: fmt.Sprintf("template value exceeds the output limit of %d bytes", e.maxOutput)}
	}
	return e.chargeBytes(n)
}

// chargeItems accounts for building or scanning n values (1 unit each) and
// rejects lists longer than maxItems.
func (e *evaluator) chargeItems(n int) error {
	if n > maxItems || n < 0 {
		return &LimitError{Msg: fmt.Sprintf("template list exceeds %d items", maxItems)}
	}
	e.steps -= int64(n) + 1
	if e.steps < 0 {
		return &LimitError{Msg: "template exceeded its work budget"}
	}
	return nil
}

func (e *evaluator) write(s string) error {
	if e.out.Len()+len(s) > e.maxOutput {
		return &LimitError{Msg: fmt.Sprintf("template output exceeds the limit of %d bytes", e.maxOutput)}
	}
	e.steps -= int64(len(s) / 16)
	e.out.WriteString(s)
	return nil
}

func (e *evaluator) pushOut() {
	e.outs = append(e.outs, e.out)
	e.out = &strings.Builder{}
}

func (e *evaluator) popOut() string {
	s := e.out.String()
	e.out = e.outs[len(e.outs)-1]
	e.outs = e.outs[:len(e.outs)-1]
	return s
}

func wrapLine(line int, err error) error {
	if err == nil || err == errBreak || err == errContinue {
		return err
	}
	var le *lineError
	if errors.As(err, &le) {
		return err
	}
	var lim *LimitError
	if errors.As(err, &lim) {
		return err
	}
	return &lineError{line, err}
}

func (e *evaluator) execNodes(nodes []node, sc *scope) error {
	for _, n := range nodes {
		if err := e.execNode(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (e *evaluator) execNode(n node, sc *scope) error {
	e.line = n.nodeLine()
	if err := e.step(); err != nil {
		return err
	}
	return wrapLine(n.nodeLine(), e.execNodeInner(n, sc))
}

func (e *evaluator) execNodeInner(n node, sc *scope) error {
	switch nd := n.(type) {
	case *outputNode:
		for _, x := range nd.exprs {
			if c, ok := x.(*constExpr); ok {
				if s, ok := c.val.(string); ok {
					if err := e.write(s); err != nil {
						return err
					}
					continue
				}
			}
			v, err := e.eval(x, sc)
			if err != nil {
				return err
			}
			s, err := strValue(v)
			if err != nil {
				return err
			}
			if err := e.write(s); err != nil {
				return err
			}
		}
		return nil
	case *ifNode:
		for _, b := range nd.branches {
			c, err := e.eval(b.cond, sc)
			if err != nil {
				return err
			}
			if truthy(c) {
				return e.execNodes(b.body, sc)
			}
		}
		return e.execNodes(nd.els, sc)
	case *forNode:
		return e.execFor(nd, sc)
	case *setNode:
		v, err := e.eval(nd.value, sc)
		if err != nil {
			return err
		}
		return e.assign(nd.target, v, sc)
	case *setBlockNode:
		e.pushOut()
		err := e.execNodes(nd.body, newScopeShared(sc))
		s := e.popOut()
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range nd.filters {
			v, err = e.applyFilter(f, v, sc)
			if err != nil {
				return err
			}
		}
		return e.assign(nd.target, v, sc)
	case *macroNode:
		m := e.makeMacro(nd.name, nd.params, nd.body, sc)
		sc.set(nd.name, m)
		return nil
	case *callBlockNode:
		caller := e.makeMacro("caller", nd.params, nd.body, sc)
		fn, err := e.eval(nd.call.fn, sc)
		if err != nil {
			return err
		}
		args, kw, err := e.evalCallArgs(&nd.call.callArgs, sc)
		if err != nil {
			return err
		}
		if kw == nil {
			kw = &kwargs{}
		}
		if err := kw.add("caller", caller); err != nil {
			return err
		}
		v, err := e.callValue(fn, args, kw)
		if err != nil {
			return err
		}
		s, err := strValue(v)
		if err != nil {
			return err
		}
		return e.write(s)
	case *filterBlockNode:
		e.pushOut()
		err := e.execNodes(nd.body, sc)
		s := e.popOut()
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range nd.filters {
			v, err = e.applyFilter(f, v, sc)
			if err != nil {
				return err
			}
		}
		str, err := strValue(v)
		if err != nil {
			return err
		}
		return e.write(str)
	case *withNode:
		inner := newScope(sc)
		for i, t := range nd.targets {
			v, err := e.eval(nd.values[i], sc)
			if err != nil {
				return err
			}
			if err := e.assign(t, v, inner); err != nil {
				return err
			}
		}
		return e.execNodes(nd.body, inner)
	case *scopeNode:
		return e.execNodes(nd.body, sc)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("internal error: unknown node %T", n)
}

// newScopeShared returns sc itself: set blocks and if blocks do not open a
// new scope in Jinja.
func newScopeShared(sc *scope) *scope { return sc }

func (e *evaluator) makeMacro(name string, params []macroParam, body []node, sc *scope) *Macro {
	return &Macro{
		name: name, params: params, body: body, closure: sc,
		catchArgs:  bodyUsesName(body, "varargs"),
		catchKw:    bodyUsesName(body, "kwargs"),
		usesCaller: bodyUsesName(body, "caller"),
	}
}

func (e *evaluator) assign(t target, v Value, sc *scope) error {
	switch tg := t.(type) {
	case *nameTarget:
		sc.set(tg.name, v)
		return nil
	case *nsTarget:
		obj, ok := sc.lookup(tg.name)
		if !ok {
			return &RuntimeError{"UndefinedError", fmt.Sprintf("'%s' is undefined", tg.name)}
		}
		ns, ok := obj.(*Namespace)
		if !ok {
			return &RuntimeError{"TemplateRuntimeError", "cannot assign attribute on non-namespace object"}
		}
		ns.attrs.SetStr(tg.attr, v)
		return nil
	case *tupleTarget:
		items, err := e.iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(tg.items) {
			if len(items) > len(tg.items) {
				return valueErr(fmt.Sprintf("too many values to unpack (expected %d)", len(tg.items)))
			}
			return valueErr(fmt.Sprintf("not enough values to unpack (expected %d, got %d)", len(tg.items), len(items)))
		}
		for i, sub := range tg.items {
			if err := e.assign(sub, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("internal error: unknown target %T", t)
}

// loopObj is jinja2's LoopContext.
type loopObj struct {
	items   []Value
	index   int
	changed *Value
}

func (e *evaluator) execFor(n *forNode, sc *scope) error {
	itv, err := e.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := e.iterate(itv)
	if err != nil {
		return err
	}
	if n.filter != nil {
		var kept []Value
		for _, it := range items {
			if err := e.step(); err != nil {
				return err
			}
			fs := newScope(sc)
			if err := e.assign(n.target, it, fs); err != nil {
				return err
			}
			c, err := e.eval(n.filter, fs)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return e.execNodes(n.els, newScope(sc))
	}
	lp := &loopObj{items: items}
	for i, it := range items {
		if err := e.step(); err != nil {
			return err
		}
		lp.index = i
		is := newScope(sc)
		is.set("loop", lp)
		if err := e.assign(n.target, it, is); err != nil {
			return err
		}
		err := e.execNodes(n.body, is)
		if err == errBreak {
			break
		}
		if err == errContinue {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *evaluator) loopAttr(lp *loopObj, name string) Value {
	n := len(lp.items)
	switch name {
	case "index":
		return int64(lp.index + 1)
	case "index0":
		return int64(lp.index)
	case "revindex":
		return int64(n - lp.index)
	case "revindex0":
		return int64(n - lp.index - 1)
	case "first":
		return lp.index == 0
	case "last":
		return lp.index == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if lp.index == 0 {
			return &Undefined{Hint: "there is no previous item"}
		}
		return lp.items[lp.index-1]
	case "nextitem":
		if lp.index >= n-1 {
			return &Undefined{Hint: "there is no next item"}
		}
		return lp.items[lp.index+1]
	case "cycle":
		return &Callable{Name: "cycle", Fn: func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) == 0 {
				return nil, typeErr("no items for cycling given")
			}
			return args[lp.index%len(args)], nil
		}}
	case "changed":
		return &Callable{Name: "changed", Fn: func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			var cur Value = &List{Items: args}
			if lp.changed != nil {
				eq, err := valuesEqual(*lp.changed, cur, 0)
				if err != nil {
					return nil, err
				}
				if eq {
					return false, nil
				}
			}
			lp.changed = &cur
			return true, nil
		}}
	}
	return undefinedAttr(lp, name)
}

// iterate returns the items of an iterable value (consuming iterators). For a list or a dict
// the slice is the value's own storage: callers must not modify it.
func (e *evaluator) iterate(v Value) ([]Value, error) {
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case *Dict:
		return x.keys, nil
	case string, Markup:
		s, _ := asString(x)
		if err := e.chargeItems(len(s)); err != nil {
			return nil, err
		}
		out := make([]Value, 0, len(s))
		for _, r := range s {
			out = append(out, string(r))
		}
		return out, nil
	case *Undefined:
		if x.Security {
			return nil, x.err()
		}
		return nil, nil
	case *Iter:
		return x.drain(), nil
	case *loopObj:
		return nil, typeErr("'LoopContext' object is not iterable")
	}
	return nil, typeErr(fmt.Sprintf("'%s' object is not iterable", typeName(v)))
}

func (e *evaluator) lookup(name string, sc *scope) Value {
	if v, ok := sc.lookup(name); ok {
		return v
	}
	if g, ok := e.global(name); ok {
		return g
	}
	return undefinedName(name)
}

func (e *evaluator) eval(x expr, sc *scope) (Value, error) {
	if err := e.step(); err != nil {
		return nil, err
	}
	v, err := e.evalInner(x, sc)
	if err != nil {
		return nil, wrapLine(x.exprLine(), err)
	}
	return v, nil
}

func (e *evaluator) evalInner(x expr, sc *scope) (Value, error) {
	switch ex := x.(type) {
	case *constExpr:
		return ex.val, nil
	case *nameExpr:
		return e.lookup(ex.name, sc), nil
	case *listExpr:
		items := make([]Value, len(ex.items))
		for i, it := range ex.items {
			v, err := e.eval(it, sc)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return &List{Items: items, Tuple: ex.tuple}, nil
	case *dictExpr:
		d := NewDict()
		for i := range ex.keys {
			k, err := e.eval(ex.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := e.eval(ex.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.Set(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *getattrExpr:
		obj, err := e.eval(ex.obj, sc)
		if err != nil {
			return nil, err
		}
		return e.getAttr(obj, ex.attr)
	case *getitemExpr:
		obj, err := e.eval(ex.obj, sc)
		if err != nil {
			return nil, err
		}
		if s, ok := ex.arg.(*sliceExpr); ok {
			return e.evalSlice(obj, s, sc)
		}
		key, err := e.eval(ex.arg, sc)
		if err != nil {
			return nil, err
		}
		return e.getItem(obj, key)
	case *sliceExpr:
		return nil, typeErr("slice outside of subscript")
	case *callExpr:
		fn, err := e.eval(ex.fn, sc)
		if err != nil {
			return nil, err
		}
		args, kw, err := e.evalCallArgs(&ex.callArgs, sc)
		if err != nil {
			return nil, err
		}
		return e.callValue(fn, args, kw)
	case *filterExpr:
		v, err := e.eval(ex.obj, sc)
		if err != nil {
			return nil, err
		}
		return e.applyFilter(ex, v, sc)
	case *testExpr:
		v, err := e.eval(ex.obj, sc)
		if err != nil {
			return nil, err
		}
		args, kw, err := e.evalCallArgs(&ex.callArgs, sc)
		if err != nil {
			return nil, err
		}
		tf, ok := tests[ex.name]
		if !ok {
			return nil, &RuntimeError{"TemplateRuntimeError", fmt.Sprintf("No test named '%s' found.", ex.name)}
		}
		return tf(e, v, args, kw)
	case *notExpr:
		v, err := e.eval(ex.x, sc)
		if err != nil {
			return nil, err
		}
		return !truthy(v), nil
	case *unaryExpr:
		v, err := e.eval(ex.x, sc)
		if err != nil {
			return nil, err
		}
		return unaryOp(ex.op, v)
	case *binExpr:
		l, err := e.eval(ex.l, sc)
		if err != nil {
			return nil, err
		}
		r, err := e.eval(ex.r, sc)
		if err != nil {
			return nil, err
		}
		return e.binOp(ex.op, l, r)
	case *concatExpr:
		var sb strings.Builder
		for _, p := range ex.parts {
			v, err := e.eval(p, sc)
			if err != nil {
				return nil, err
			}
			s, err := strValue(v)
			if err != nil {
				return nil, err
			}
			if err := e.chargeAppend(sb.Len(), len(s)); err != nil {
				return nil, err
			}
			sb.WriteString(s)
		}
		return sb.String(), nil
	case *compareExpr:
		left, err := e.eval(ex.first, sc)
		if err != nil {
			return nil, err
		}
		for _, op := range ex.ops {
			right, err := e.eval(op.x, sc)
			if err != nil {
				return nil, err
			}
			ok, err := e.compare(op.op, left, right)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			left = right
		}
		return true, nil
	case *andExpr:
		l, err := e.eval(ex.l, sc)
		if err != nil {
			return nil, err
		}
		if !truthy(l) {
			return l, nil
		}
		return e.eval(ex.r, sc)
	case *orExpr:
		l, err := e.eval(ex.l, sc)
		if err != nil {
			return nil, err
		}
		if truthy(l) {
			return l, nil
		}
		return e.eval(ex.r, sc)
	case *condExpr:
		c, err := e.eval(ex.test, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return e.eval(ex.yes, sc)
		}
		if ex.no == nil {
			return &Undefined{Hint: "the inline if-expression evaluated to false and no else section was defined."}, nil
		}
		return e.eval(ex.no, sc)
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", x)
}

func (e *evaluator) evalCallArgs(ca *callArgs, sc *scope) ([]Value, *kwargs, error) {
	var args []Value
	for _, a := range ca.args {
		v, err := e.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	if ca.dynArgs != nil {
		v, err := e.eval(ca.dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		more, err := e.iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, more...)
	}
	var kw *kwargs
	if len(ca.kwargs) > 0 || ca.dynKwarg != nil {
		kw = &kwargs{}
	}
	for _, k := range ca.kwargs {
		v, err := e.eval(k.val, sc)
		if err != nil {
			return nil, nil, err
		}
		if err := kw.add(k.name, v); err != nil {
			return nil, nil, err
		}
	}
	if ca.dynKwarg != nil {
		v, err := e.eval(ca.dynKwarg, sc)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, typeErr("argument after ** must be a mapping")
		}
		for i, k := range d.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, nil, typeErr("keywords must be strings")
			}
			if err := kw.add(ks, d.vals[i]); err != nil {
				return nil, nil, err
			}
		}
	}
	return args, kw, nil
}

func (e *evaluator) applyFilter(f *filterExpr, v Value, sc *scope) (Value, error) {
	ff, ok := filters[f.name]
	if !ok {
		return nil, &RuntimeError{"TemplateRuntimeError", fmt.Sprintf("No filter named '%s' found.", f.name)}
	}
	args, kw, err := e.evalCallArgs(&f.callArgs, sc)
	if err != nil {
		return nil, err
	}
	return ff(e, v, args, kw)
}

// callValue calls a macro or builtin.
func (e *evaluator) callValue(fn Value, args []Value, kw *kwargs) (Value, error) {
	switch f := fn.(type) {
	case *Callable:
		return f.Fn(e, args, kw)
	case *Macro:
		return e.callMacro(f, args, kw)
	case *Undefined:
		return nil, f.err()
	}
	return nil, typeErr(fmt.Sprintf("'%s' object is not callable", typeName(fn)))
}

func (e *evaluator) callMacro(m *Macro, args []Value, kw *kwargs) (Value, error) {
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > e.maxDepth {
		return nil, &LimitError{Msg: fmt.Sprintf("macro recursion deeper than %d calls", e.maxDepth), Kind: "RecursionError"}
	}
	ms := newScope(m.closure)
	if len(args) > len(m.params) && !m.catchArgs {
		return nil, typeErr(fmt.Sprintf("macro '%s' takes not more than %d argument(s)", m.name, len(m.params)))
	}
	used := map[string]bool{}
	for i, p := range m.params {
		if i < len(args) {
			if _, dup := kw.get(p.name); dup {
				return nil, typeErr(fmt.Sprintf("macro '%s' got multiple values for argument '%s'", m.name, p.name))
			}
			ms.set(p.name, args[i])
			continue
		}
		if v, ok := kw.get(p.name); ok {
			ms.set(p.name, v)
			used[p.name] = true
			continue
		}
		if p.def != nil {
			v, err := e.eval(p.def, ms)
			if err != nil {
				return nil, err
			}
			ms.set(p.name, v)
			continue
		}
		ms.set(p.name, &Undefined{Hint: fmt.Sprintf("parameter '%s' was not provided", p.name)})
	}
	var extraArgs []Value
	if len(args) > len(m.params) {
		extraArgs = args[len(m.params):]
	}
	if m.catchArgs {
		ms.set("varargs", &List{Items: extraArgs, Tuple: true})
	}
	extraKw := NewDict()
	if kw != nil {
		for i, name := range kw.names {
			if used[name] {
				continue
			}
			if name == "caller" && m.usesCaller {
				ms.set("caller", kw.vals[i])
				continue
			}
			if !m.catchKw {
				return nil, typeErr(fmt.Sprintf("macro '%s' takes no keyword argument '%s'", m.name, name))
			}
			extraKw.SetStr(name, kw.vals[i])
		}
	}
	if m.catchKw {
		ms.set("kwargs", extraKw)
	}
	if m.usesCaller {
		if _, ok := ms.get("caller"); !ok {
			ms.set("caller", &Undefined{Hint: "No caller defined"})
		}
	}
	e.pushOut()
	err := e.execNodes(m.body, ms)
	s := e.popOut()
	if err == errBreak || err == errContinue {
		err = &RuntimeError{"TemplateSyntaxError", err.Error()}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// bodyUsesName reports whether name is referenced in the nodes (used to
// decide whether a macro accepts varargs/kwargs/caller, like jinja2).
func bodyUsesName(nodes []node, name string) bool {
	for _, n := range nodes {
		if nodeUsesName(n, name) {
			return true
		}
	}
	return false
}

func nodeUsesName(n node, name string) bool {
	switch nd := n.(type) {
	case *outputNode:
		for _, x := range nd.exprs {
			if exprUsesName(x, name) {
				return true
			}
		}
	case *ifNode:
		for _, b := range nd.branches {
			if exprUsesName(b.cond, name) || bodyUsesName(b.body, name) {
				return true
			}
		}
		return bodyUsesName(nd.els, name)
	case *forNode:
		return exprUsesName(nd.iter, name) || exprUsesName(nd.filter, name) ||
			bodyUsesName(nd.body, name) || bodyUsesName(nd.els, name)
	case *setNode:
		return exprUsesName(nd.value, name)
	case *setBlockNode:
		for _, f := range nd.filters {
			if callArgsUse(&f.callArgs, name) {
				return true
			}
		}
		return bodyUsesName(nd.body, name)
	case *callBlockNode:
		return exprUsesName(nd.call, name) || bodyUsesName(nd.body, name)
	case *filterBlockNode:
		for _, f := range nd.filters {
			if callArgsUse(&f.callArgs, name) {
				return true
			}
		}
		return bodyUsesName(nd.body, name)
	case *withNode:
		for _, v := range nd.values {
			if exprUsesName(v, name) {
				return true
			}
		}
		return bodyUsesName(nd.body, name)
	case *scopeNode:
		return bodyUsesName(nd.body, name)
	}
	return false
}

func callArgsUse(ca *callArgs, name string) bool {
	for _, a := range ca.args {
		if exprUsesName(a, name) {
			return true
		}
	}
	for _, k := range ca.kwargs {
		if exprUsesName(k.val, name) {
			return true
		}
	}
	return exprUsesName(ca.dynArgs, name) || exprUsesName(ca.dynKwarg, name)
}

func exprUsesName(x expr, name string) bool {
	switch ex := x.(type) {
	case nil:
		return false
	case *nameExpr:
		return ex.name == name
	case *listExpr:
		for _, it := range ex.items {
			if exprUsesName(it, name) {
				return true
			}
		}
	case *dictExpr:
		for i := range ex.keys {
			if exprUsesName(ex.keys[i], name) || exprUsesName(ex.vals[i], name) {
				return true
			}
		}
	case *getattrExpr:
		return exprUsesName(ex.obj, name)
	case *getitemExpr:
		return exprUsesName(ex.obj, name) || exprUsesName(ex.arg, name)
	case *sliceExpr:
		return exprUsesName(ex.start, name) || exprUsesName(ex.stop, name) || exprUsesName(ex.step, name)
	case *callExpr:
		return exprUsesName(ex.fn, name) || callArgsUse(&ex.callArgs, name)
	case *filterExpr:
		return exprUsesName(ex.obj, name) || callArgsUse(&ex.callArgs, name)
	case *testExpr:
		return exprUsesName(ex.obj, name) || callArgsUse(&ex.callArgs, name)
	case *notExpr:
		return exprUsesName(ex.x, name)
	case *unaryExpr:
		return exprUsesName(ex.x, name)
	case *binExpr:
		return exprUsesName(ex.l, name) || exprUsesName(ex.r, name)
	case *concatExpr:
		for _, p := range ex.parts {
			if exprUsesName(p, name) {
				return true
			}
		}
	case *compareExpr:
		if exprUsesName(ex.first, name) {
			return true
		}
		for _, o := range ex.ops {
			if exprUsesName(o.x, name) {
				return true
			}
		}
	case *andExpr:
		return exprUsesName(ex.l, name) || exprUsesName(ex.r, name)
	case *orExpr:
		return exprUsesName(ex.l, name) || exprUsesName(ex.r, name)
	case *condExpr:
		return exprUsesName(ex.test, name) || exprUsesName(ex.yes, name) || exprUsesName(ex.no, name)
	}
	return false
}
