package jinja

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// getAttr implements jinja2's sandboxed getattr: Python attribute first
// (methods of str/dict/list, namespace attributes, loop fields), then item.
func (e *evaluator) getAttr(obj Value, name string) (Value, error) {
	if u, ok := obj.(*Undefined); ok {
		return nil, u.err()
	}
	if strings.HasPrefix(name, "_") {
		// Python objects have no such attributes except dunders, which the
		// sandbox blocks; a dict falls back to its item.
		if d, ok := obj.(*Dict); ok {
			if v, ok := d.GetStr(name); ok {
				return v, nil
			}
		}
		return &Undefined{Hint: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj)), Security: true}, nil
	}
	switch x := obj.(type) {
	case *Namespace:
		if v, ok := x.attrs.GetStr(name); ok {
			return v, nil
		}
		return undefinedAttr(obj, name), nil
	case *loopObj:
		return e.loopAttr(x, name), nil
	case *List:
		if x.group && name == "grouper" {
			return x.Items[0], nil
		}
		if x.group && name == "list" {
			return x.Items[1], nil
		}
	}
	if m, ok := e.method(obj, name); ok {
		return m, nil
	}
	if d, ok := obj.(*Dict); ok {
		if v, ok := d.GetStr(name); ok {
			return v, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getItem implements jinja2's sandboxed getitem: item first, then attribute
// for string keys.
func (e *evaluator) getItem(obj Value, key Value) (Value, error) {
	if u, ok := obj.(*Undefined); ok {
		return nil, u.err()
	}
	switch x := obj.(type) {
	case *Dict:
		v, ok, err := x.Get(key)
		if err != nil {
			return nil, err
		}
		if ok {
			return v, nil
		}
	case *List:
		if i, ok := asInt(key); ok {
			n := int64(len(x.Items))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return x.Items[i], nil
			}
			return undefinedAttr(obj, key), nil
		}
	case string, Markup:
		if i, ok := asInt(key); ok {
			s, _ := asString(x)
			r, found := runeAt(s, i)
			if found {
				return string(r), nil
			}
			return undefinedAttr(obj, key), nil
		}
	case *Namespace:
		// Namespace supports item access only via attributes in jinja2
		// (no __getitem__), so fall through to the attribute lookup.
	case *loopObj:
	}
	if name, ok := key.(string); ok {
		return e.getAttr(obj, name)
	}
	return undefinedAttr(obj, key), nil
}

// runeAt returns the i-th code point of s (negative i counts from the end).
func runeAt(s string, i int64) (rune, bool) {
	n := int64(utf8.RuneCountInString(s))
	if i < 0 {
		i += n
	}
	if i < 0 || i >= n {
		return 0, false
	}
	k := int64(0)
	for _, r := range s {
		if k == i {
			return r, true
		}
		k++
	}
	return 0, false
}

func (e *evaluator) evalSlice(obj Value, s *sliceExpr, sc *scope) (Value, error) {
	var parts [3]Value
	for i, x := range []expr{s.start, s.stop, s.step} {
		if x == nil {
			parts[i] = None
			continue
		}
		v, err := e.eval(x, sc)
		if err != nil {
			return nil, err
		}
		parts[i] = v
	}
	return e.sliceValue(obj, parts[0], parts[1], parts[2])
}

// sliceIndices implements Python's slice.indices(n).
func sliceIndices(start, stop, step Value, n int) (lo, hi, st int, err error) {
	st = 1
	if _, none := step.(NoneType); !none {
		v, ok := asInt(step)
		if !ok {
			return 0, 0, 0, typeErr("slice indices must be integers or None")
		}
		if v == 0 {
			return 0, 0, 0, valueErr("slice step cannot be zero")
		}
		if v > math.MaxInt32 {
			v = math.MaxInt32
		} else if v < -math.MaxInt32 {
			v = -math.MaxInt32
		}
		st = int(v)
	}
	conv := func(v Value, def int) (int, error) {
		if _, none := v.(NoneType); none {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, typeErr("slice indices must be integers or None")
		}
		if i < 0 {
			i += int64(n)
			if i < 0 {
				if st < 0 {
					return -1, nil
				}
				return 0, nil
			}
		} else if i >= int64(n) {
			if st < 0 {
				return n - 1, nil
			}
			return n, nil
		}
		return int(i), nil
	}
	if st > 0 {
		lo, err = conv(start, 0)
		if err == nil {
			hi, err = conv(stop, n)
		}
	} else {
		lo, err = conv(start, n-1)
		if err == nil {
			hi, err = conv(stop, -1)
		}
	}
	return lo, hi, st, err
}

func sliceIdx(n int, lo, hi, st int) []int {
	var idx []int
	if st > 0 {
		for i := lo; i < hi; i += st {
			idx = append(idx, i)
		}
	} else {
		for i := lo; i > hi; i += st {
			idx = append(idx, i)
		}
	}
	return idx
}

func (e *evaluator) sliceValue(obj, start, stop, step Value) (Value, error) {
	switch x := obj.(type) {
	case *List:
		lo, hi, st, err := sliceIndices(start, stop, step, len(x.Items))
		if err != nil {
			return nil, err
		}
		idx := sliceIdx(len(x.Items), lo, hi, st)
		if err := e.chargeItems(len(idx)); err != nil {
			return nil, err
		}
		out := make([]Value, len(idx))
		for k, i := range idx {
			out[k] = x.Items[i]
		}
		return &List{Items: out, Tuple: x.Tuple}, nil
	case string, Markup:
		s, _ := asString(x)
		var res string
		if st, ok := step.(NoneType); ok && isASCII(s) {
			_ = st
			lo, hi, _, err := sliceIndices(start, stop, step, len(s))
			if err != nil {
				return nil, err
			}
			if lo < hi {
				res = s[lo:hi]
			}
		} else {
			rs := []rune(s)
			if err := e.chargeBytes(len(rs) * 4); err != nil {
				return nil, err
			}
			lo, hi, st, err := sliceIndices(start, stop, step, len(rs))
			if err != nil {
				return nil, err
			}
			idx := sliceIdx(len(rs), lo, hi, st)
			out := make([]rune, len(idx))
			for k, i := range idx {
				out[k] = rs[i]
			}
			res = string(out)
		}
		if _, ok := x.(Markup); ok {
			return Markup(res), nil
		}
		return res, nil
	case *Undefined:
		return nil, x.err()
	}
	return nil, typeErr(fmt.Sprintf("'%s' object is not subscriptable", typeName(obj)))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func unaryOp(op string, v Value) (Value, error) {
	if u, ok := v.(*Undefined); ok {
		return nil, u.err()
	}
	switch x := v.(type) {
	case bool, int64:
		i, _ := asInt(x)
		if op == "-" {
			if i == math.MinInt64 {
				return nil, errOverflow
			}
			return -i, nil
		}
		return i, nil
	case float64:
		if op == "-" {
			return -x, nil
		}
		return x, nil
	}
	return nil, typeErr(fmt.Sprintf("bad operand type for unary %s: '%s'", op, typeName(v)))
}

var errOverflow = &RuntimeError{"OverflowError", "integer result does not fit in 64 bits"}

func addInt(a, b int64) (int64, error) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, errOverflow
	}
	return c, nil
}

func mulInt(a, b int64) (int64, error) {
	if a == 0 || b == 0 {
		return 0, nil
	}
	neg := (a < 0) != (b < 0)
	ua, ub := absU(a), absU(b)
	hi, lo := bits.Mul64(ua, ub)
	if hi != 0 || (!neg && lo > math.MaxInt64) || (neg && lo > 1<<63) {
		return 0, errOverflow
	}
	if neg {
		return int64(-lo), nil
	}
	return int64(lo), nil
}

func absU(a int64) uint64 {
	if a < 0 {
		return uint64(-a)
	}
	return uint64(a)
}

// floorDivMod implements Python // and % for ints.
func floorDivMod(a, b int64) (int64, int64, error) {
	if b == 0 {
		return 0, 0, &RuntimeError{"ZeroDivisionError", "integer division or modulo by zero"}
	}
	if a == math.MinInt64 && b == -1 {
		return 0, 0, errOverflow
	}
	q, r := a/b, a%b
	if r != 0 && (r < 0) != (b < 0) {
		q--
		r += b
	}
	return q, r, nil
}

// floatDivMod implements Python's float // and %.
func floatDivMod(vx, wx float64) (float64, float64, error) {
	if wx == 0 {
		return 0, 0, &RuntimeError{"ZeroDivisionError", "float divmod()"}
	}
	mod := math.Mod(vx, wx)
	div := (vx - mod) / wx
	if mod != 0 {
		if (wx < 0) != (mod < 0) {
			mod += wx
			div -= 1.0
		}
	} else {
		mod = math.Copysign(0, wx)
	}
	var floordiv float64
	if div != 0 {
		floordiv = math.Floor(div)
		if div-floordiv > 0.5 {
			floordiv += 1.0
		}
	} else {
		floordiv = math.Copysign(0, vx/wx)
	}
	return floordiv, mod, nil
}

func (e *evaluator) binOp(op string, l, r Value) (Value, error) {
	if u, ok := l.(*Undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(*Undefined); ok {
		return nil, u.err()
	}
	li, lInt := asInt(l)
	ri, rInt := asInt(r)
	lf, lNum := asFloat(l)
	rf, rNum := asFloat(r)
	bothNum := lNum && rNum
	bothInt := lInt && rInt
	switch op {
	case "+":
		switch {
		case bothInt:
			return addInt(li, ri)
		case bothNum:
			return lf + rf, nil
		}
		if ls, ok := asString(l); ok {
			if rs, ok := asString(r); ok {
				if err := e.chargeBytes(len(ls) + len(rs)); err != nil {
					return nil, err
				}
				_, lm := l.(Markup)
				_, rm := r.(Markup)
				switch {
				case lm && !rm:
					return Markup(ls + htmlEscape(rs)), nil
				case rm && !lm:
					return Markup(htmlEscape(ls) + rs), nil
				case lm && rm:
					return Markup(ls + rs), nil
				}
				return ls + rs, nil
			}
		}
		if ll, ok := l.(*List); ok {
			if rl, ok := r.(*List); ok && ll.Tuple == rl.Tuple {
				if err := e.chargeItems(len(ll.Items) + len(rl.Items)); err != nil {
					return nil, err
				}
				items := make([]Value, 0, len(ll.Items)+len(rl.Items))
				items = append(items, ll.Items...)
				items = append(items, rl.Items...)
				return &List{Items: items, Tuple: ll.Tuple}, nil
			}
		}
	case "-":
		switch {
		case bothInt:
			if ri == math.MinInt64 {
				return nil, errOverflow
			}
			return addInt(li, -ri)
		case bothNum:
			return lf - rf, nil
		}
	case "*":
		switch {
		case bothInt:
			return mulInt(li, ri)
		case bothNum:
			return lf * rf, nil
		}
		if n, ok := asInt(r); ok {
			if v, ok, err := e.repeat(l, n); ok || err != nil {
				return v, err
			}
		}
		if n, ok := asInt(l); ok {
			if v, ok, err := e.repeat(r, n); ok || err != nil {
				return v, err
			}
		}
	case "/":
		if bothNum {
			if rf == 0 {
				return nil, &RuntimeError{"ZeroDivisionError", "division by zero"}
			}
			return lf / rf, nil
		}
	case "//":
		switch {
		case bothInt:
			q, _, err := floorDivMod(li, ri)
			return q, err
		case bothNum:
			q, _, err := floatDivMod(lf, rf)
			return q, err
		}
	case "%":
		switch {
		case bothInt:
			_, m, err := floorDivMod(li, ri)
			return m, err
		case bothNum:
			_, m, err := floatDivMod(lf, rf)
			return m, err
		}
		if ls, ok := asString(l); ok {
			s, err := e.percentFormat(ls, r)
			if err != nil {
				return nil, err
			}
			if _, m := l.(Markup); m {
				return Markup(s), nil
			}
			return s, nil
		}
	case "**":
		switch {
		case bothInt && ri >= 0:
			return powInt(li, ri)
		case bothNum:
			if lf == 0 && rf < 0 {
				return nil, &RuntimeError{"ZeroDivisionError", "0.0 cannot be raised to a negative power"}
			}
			return math.Pow(lf, rf), nil
		}
	}
	return nil, typeErr(fmt.Sprintf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r)))
}

func powInt(b, ex int64) (Value, error) {
	result := int64(1)
	for ex > 0 {
		var err error
		if ex&1 == 1 {
			if result, err = mulInt(result, b); err != nil {
				return nil, err
			}
		}
		ex >>= 1
		if ex > 0 {
			if b, err = mulInt(b, b); err != nil {
				return nil, err
			}
		}
	}
	return result, nil
}

// repeat implements str*int and list*int.
func (e *evaluator) repeat(v Value, n int64) (Value, bool, error) {
	if n < 0 {
		n = 0
	}
	if l, ok := v.(*List); ok && (len(l.Items) == 0 || n == 0) {
		return &List{Tuple: l.Tuple}, true, nil
	}
	switch x := v.(type) {
	case string, Markup:
		s, _ := asString(x)
		if n > 0 && int64(len(s)) > int64(e.maxOutput)/n {
			return nil, true, &LimitError{Msg: fmt.Sprintf("template value exceeds the output limit of %d bytes", e.maxOutput)}
		}
		if err := e.chargeBytes(len(s) * int(n)); err != nil {
			return nil, true, err
		}
		r := strings.Repeat(s, int(n))
		if _, ok := x.(Markup); ok {
			return Markup(r), true, nil
		}
		return r, true, nil
	case *List:
		if n > 0 && int64(len(x.Items)) > int64(e.maxOutput)/n {
			return nil, true, &LimitError{Msg: "list repetition too large"}
		}
		if err := e.chargeItems(len(x.Items) * int(n)); err != nil {
			return nil, true, err
		}
		items := make([]Value, 0, len(x.Items)*int(n))
		for i := int64(0); i < n; i++ {
			items = append(items, x.Items...)
		}
		return &List{Items: items, Tuple: x.Tuple}, true, nil
	}
	return nil, false, nil
}

func (e *evaluator) compare(op string, l, r Value) (bool, error) {
	switch op {
	case "eq", "ne":
		eq, cost, err := valuesEqualCost(l, r, 0)
		if err != nil {
			return false, err
		}
		if err := e.chargeCompare(cost); err != nil {
			return false, err
		}
		return eq == (op == "eq"), nil
	case "in":
		return e.contains(r, l)
	case "notin":
		in, err := e.contains(r, l)
		return !in, err
	}
	c, cost, err := compareValuesCost(l, r, 0)
	if err != nil {
		return false, err
	}
	if err := e.chargeCompare(cost); err != nil {
		return false, err
	}
	if c == 2 { // NaN
		return false, nil
	}
	switch op {
	case "lt":
		return c < 0, nil
	case "lteq":
		return c <= 0, nil
	case "gt":
		return c > 0, nil
	case "gteq":
		return c >= 0, nil
	}
	return false, fmt.Errorf("internal error: unknown comparison %s", op)
}

// contains implements Python's "item in container".
func (e *evaluator) contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string, Markup:
		cs, _ := asString(c)
		is, ok := asString(item)
		if !ok {
			if u, isU := item.(*Undefined); isU {
				return false, u.err()
			}
			return false, typeErr(fmt.Sprintf("'in <string>' requires string as left operand, not %s", typeName(item)))
		}
		if err := e.chargeBytes(len(cs)); err != nil {
			return false, err
		}
		return strings.Contains(cs, is), nil
	case *List:
		if err := e.chargeItems(len(c.Items)); err != nil {
			return false, err
		}
		for _, it := range c.Items {
			eq, cost, err := valuesEqualCost(it, item, 0)
			if err == nil {
				err = e.chargeCompare(cost)
			}
			if err != nil {
				return false, err
			}
			if eq {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		_, ok, err := c.Get(item)
		return ok, err
	case *Undefined:
		if c.Security {
			return false, c.err()
		}
		return false, nil
	case *Iter:
		for c.pos < len(c.items) {
			it := c.items[c.pos]
			c.pos++
			eq, cost, err := valuesEqualCost(it, item, 0)
			if err == nil {
				err = e.chargeCompare(cost)
			}
			if err != nil {
				return false, err
			}
			if eq {
				return true, nil
			}
		}
		return false, nil
	}
	return false, typeErr(fmt.Sprintf("argument of type '%s' is not iterable", typeName(container)))
}
