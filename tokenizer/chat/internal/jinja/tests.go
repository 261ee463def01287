package jinja

import (
	"fmt"
	"sync"
	"time"
)

type testFn func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error)

var tests map[string]testFn

func init() {
	cmp := func(op string) testFn {
		return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(op, args, kw, p("other", reqd))
			if err != nil {
				return nil, err
			}
			return e.compare(op, v, a[0])
		}
	}
	pred := func(f func(v Value) bool) testFn {
		return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, typeErr("test takes no arguments")
			}
			return f(v), nil
		}
	}
	tests = map[string]testFn{
		"odd":  modTest(1),
		"even": modTest(0),
		"divisibleby": func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			a, err := bind("divisibleby", args, kw, p("num", reqd))
			if err != nil {
				return nil, err
			}
			m, err := e.binOp("%", v, a[0])
			if err != nil {
				return nil, err
			}
			return valuesEqual(m, int64(0), 0)
		},
		"defined":   pred(func(v Value) bool { _, u := v.(*Undefined); return !u }),
		"undefined": pred(func(v Value) bool { _, u := v.(*Undefined); return u }),
		"filter": pred(func(v Value) bool {
			s, ok := v.(string)
			_, found := filters[s]
			return ok && found
		}),
		"test": pred(func(v Value) bool {
			s, ok := v.(string)
			_, found := tests[s]
			return ok && found
		}),
		"none":    pred(isNone),
		"boolean": pred(func(v Value) bool { _, ok := v.(bool); return ok }),
		"false":   pred(func(v Value) bool { b, ok := v.(bool); return ok && !b }),
		"true":    pred(func(v Value) bool { b, ok := v.(bool); return ok && b }),
		"integer": pred(func(v Value) bool { _, ok := v.(int64); return ok }),
		"float":   pred(func(v Value) bool { _, ok := v.(float64); return ok }),
		"lower": func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			s, err := strValue(v)
			return strPredicate("islower", s), err
		},
		"upper": func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			s, err := strValue(v)
			return strPredicate("isupper", s), err
		},
		"string":  pred(func(v Value) bool { _, ok := asString(v); return ok }),
		"mapping": pred(func(v Value) bool { _, ok := v.(*Dict); return ok }),
		"number":  pred(isNumber),
		"sequence": pred(func(v Value) bool {
			switch v.(type) {
			case string, Markup, *List, *Dict, *Undefined:
				return true
			}
			return false
		}),
		"iterable": pred(func(v Value) bool {
			switch v.(type) {
			case string, Markup, *List, *Dict, *Undefined, *Iter, *loopObj:
				return true
			}
			return false
		}),
		"callable": pred(func(v Value) bool {
			switch v.(type) {
			case *Callable, *Macro, *Undefined, *loopObj:
				return true
			}
			return false
		}),
		"sameas": func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			a, err := bind("sameas", args, kw, p("other", reqd))
			if err != nil {
				return nil, err
			}
			return sameAs(v, a[0]), nil
		},
		"escaped": pred(func(v Value) bool { _, ok := v.(Markup); return ok }),
		"in": func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
			a, err := bind("in", args, kw, p("seq", reqd))
			if err != nil {
				return nil, err
			}
			return e.contains(a[0], v)
		},
	}
	for _, names := range [][]string{{"==", "eq", "equalto"}, {"!=", "ne"}, {">", "gt", "greaterthan"}, {">=", "ge"}, {"<", "lt", "lessthan"}, {"<=", "le"}} {
		op := map[string]string{"==": "eq", "!=": "ne", ">": "gt", ">=": "gteq", "<": "lt", "<=": "lteq"}[names[0]]
		for _, n := range names {
			tests[n] = cmp(op)
		}
	}
}

func modTest(want int64) testFn {
	return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
		if len(args) > 0 || kw.len() > 0 {
			return nil, typeErr("test takes no arguments")
		}
		m, err := e.binOp("%", v, int64(2))
		if err != nil {
			return nil, err
		}
		return valuesEqual(m, want, 0)
	}
}

// sameAs approximates Python's "is".
func sameAs(a, b Value) bool {
	switch x := a.(type) {
	case NoneType:
		return isNone(b)
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y && x >= -5 && x <= 256
	case string, float64, Markup:
		return false
	case *Undefined:
		return a == b
	}
	return a == b
}

// global returns a builtin global function.
func (e *evaluator) global(name string) (Value, bool) {
	switch name {
	case "range":
		return &Callable{Name: "range", Fn: builtinRange}, true
	case "dict":
		return &Callable{Name: "dict", Fn: builtinDict}, true
	case "namespace":
		return &Callable{Name: "namespace", Fn: builtinNamespace}, true
	case "cycler":
		return &Callable{Name: "cycler", Fn: builtinCycler}, true
	case "joiner":
		return &Callable{Name: "joiner", Fn: builtinJoiner}, true
	case "raise_exception":
		return &Callable{Name: "raise_exception", Fn: func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind("raise_exception", args, kw, p("message", reqd))
			if err != nil {
				return nil, err
			}
			msg, err := strValue(a[0])
			if err != nil {
				return nil, err
			}
			return nil, &RuntimeError{"TemplateError", msg}
		}}, true
	case "strftime_now":
		return &Callable{Name: "strftime_now", Fn: func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind("strftime_now", args, kw, p("format", reqd))
			if err != nil {
				return nil, err
			}
			f, err := argStr("strftime_now", a[0])
			if err != nil {
				return nil, err
			}
			now := time.Now()
			if e.now != nil {
				now = e.now()
			}
			return strftime(now, f), nil
		}}, true
	}
	return nil, false
}

// maxRange is jinja2.sandbox.MAX_RANGE.
const maxRange = 100000

func builtinRange(e *evaluator, args []Value, kw *kwargs) (Value, error) {
	if kw.len() > 0 {
		return nil, typeErr("range() takes no keyword arguments")
	}
	var start, stop, step int64 = 0, 0, 1
	var err error
	ints := make([]int64, len(args))
	for i, a := range args {
		if ints[i], err = argInt("range", a); err != nil {
			return nil, err
		}
	}
	switch len(args) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, typeErr(fmt.Sprintf("range expected at most 3 arguments, got %d", len(args)))
	}
	if step == 0 {
		return nil, valueErr("range() arg 3 must not be zero")
	}
	var n int64
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
		if stop-start < 0 { // overflow
			n = maxRange + 1
		}
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / (-step)
		if start-stop < 0 {
			n = maxRange + 1
		}
	}
	if n > maxRange {
		return nil, &RuntimeError{"OverflowError", fmt.Sprintf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)}
	}
	if err := e.chargeItems(int(n)); err != nil {
		return nil, err
	}
	items := make([]Value, n)
	for i := int64(0); i < n; i++ {
		items[i] = boxInt(start + i*step)
	}
	return &List{Items: items}, nil
}

var (
	smallIntsOnce sync.Once
	smallInts     []Value
)

// boxInt returns v as a Value, sharing preallocated boxes for 0..maxRange-1
// so that range() does not allocate one object per element.
func boxInt(v int64) Value {
	if v >= 0 && v < maxRange {
		smallIntsOnce.Do(func() {
			smallInts = make([]Value, maxRange)
			for i := range smallInts {
				smallInts[i] = int64(i)
			}
		})
		return smallInts[v]
	}
	return v
}

func builtinDict(e *evaluator, args []Value, kw *kwargs) (Value, error) {
	d := NewDict()
	if len(args) > 1 {
		return nil, typeErr(fmt.Sprintf("dict expected at most 1 argument, got %d", len(args)))
	}
	if len(args) == 1 {
		if err := dictUpdate(e, d, args[0]); err != nil {
			return nil, err
		}
	}
	if kw != nil {
		for i, n := range kw.names {
			d.SetStr(n, kw.vals[i])
		}
	}
	return d, nil
}

func dictUpdate(e *evaluator, d *Dict, src Value) error {
	if sd, ok := src.(*Dict); ok {
		for i, k := range sd.keys {
			if err := d.Set(k, sd.vals[i]); err != nil {
				return err
			}
		}
		return nil
	}
	items, err := e.iterate(src)
	if err != nil {
		return err
	}
	for _, it := range items {
		pair, err := e.iterate(it)
		if err != nil {
			return err
		}
		if len(pair) != 2 {
			return valueErr("dictionary update sequence element has wrong length")
		}
		if err := d.Set(pair[0], pair[1]); err != nil {
			return err
		}
	}
	return nil
}

func builtinNamespace(e *evaluator, args []Value, kw *kwargs) (Value, error) {
	d := NewDict()
	if len(args) > 1 {
		return nil, typeErr(fmt.Sprintf("dict expected at most 1 argument, got %d", len(args)))
	}
	if len(args) == 1 {
		if err := dictUpdate(e, d, args[0]); err != nil {
			return nil, err
		}
	}
	if kw != nil {
		for i, n := range kw.names {
			d.SetStr(n, kw.vals[i])
		}
	}
	return &Namespace{attrs: d}, nil
}

func builtinCycler(e *evaluator, args []Value, kw *kwargs) (Value, error) {
	if len(args) == 0 {
		return nil, &RuntimeError{"RuntimeError", "at least one item has to be provided"}
	}
	items := append([]Value(nil), args...)
	pos := 0
	ns := NewDict()
	cy := &Namespace{attrs: ns}
	ns.SetStr("current", items[0])
	ns.SetStr("next", &Callable{Name: "next", Fn: func(e *evaluator, a []Value, k *kwargs) (Value, error) {
		rv := items[pos]
		pos = (pos + 1) % len(items)
		ns.SetStr("current", items[pos])
		return rv, nil
	}})
	ns.SetStr("reset", &Callable{Name: "reset", Fn: func(e *evaluator, a []Value, k *kwargs) (Value, error) {
		pos = 0
		ns.SetStr("current", items[0])
		return None, nil
	}})
	return cy, nil
}

func builtinJoiner(e *evaluator, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("joiner", args, kw, p("sep", ", "))
	if err != nil {
		return nil, err
	}
	used := false
	return &Callable{Name: "joiner", Fn: func(e *evaluator, _ []Value, _ *kwargs) (Value, error) {
		if !used {
			used = true
			return "", nil
		}
		return a[0], nil
	}}, nil
}
