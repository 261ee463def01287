package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Value is a template value. The dynamic types are:
//
//	NoneType (None), *Undefined, bool, int64, float64, string, Markup,
//	*List (list or tuple), *Dict, *Namespace, *Iter (one-shot generator),
//	*Callable, *Macro, *loopObj.
//
// Lists and dicts are immutable once built (the environment is an
// ImmutableSandboxedEnvironment); only namespaces are mutable.
type Value = any

// NoneType is Python's None.
type NoneType struct{}

// None is the None value.
var None = NoneType{}

// Markup is a string marked safe (markupsafe.Markup): it prints as-is but
// escapes plain strings concatenated to it with +.
type Markup string

// Undefined is jinja2's default Undefined.
type Undefined struct {
	Hint     string // message used when the value is used in a failing way
	Security bool   // access to an unsafe attribute (SecurityError)
}

func (u *Undefined) err() error {
	if u.Security {
		return &RuntimeError{Kind: "SecurityError", Msg: u.Hint}
	}
	return &RuntimeError{Kind: "UndefinedError", Msg: u.Hint}
}

// undefinedName builds the Undefined for a missing variable.
func undefinedName(name string) *Undefined {
	return &Undefined{Hint: fmt.Sprintf("'%s' is undefined", name)}
}

// undefinedAttr builds the Undefined for a missing attribute/item of obj.
func undefinedAttr(obj Value, name Value) *Undefined {
	if s, ok := name.(string); ok {
		return &Undefined{Hint: fmt.Sprintf("'%s' has no attribute '%s'", objectTypeRepr(obj), s)}
	}
	return &Undefined{Hint: fmt.Sprintf("'%s' has no attribute %s", objectTypeRepr(obj), reprOrErr(name))}
}

func reprOrErr(v Value) string {
	s, err := reprValue(v, 0)
	if err != nil {
		return "?"
	}
	return s
}

// List is a Python list or tuple.
type List struct {
	Items []Value
	Tuple bool
	group bool // groupby result: has .grouper and .list attributes
}

// Iter is a one-shot iterator (a Python generator / list iterator).
type Iter struct {
	items []Value
	pos   int
}

func (it *Iter) drain() []Value {
	rest := it.items[it.pos:]
	it.pos = len(it.items)
	return rest
}

// hkey is a hashable key following Python's hash/eq rules for the key types
// that can occur (None, bool/int/float, str, tuples of those).
type hkey struct {
	kind byte // 'n' none, 'i' int, 'f' float, 's' str, 't' tuple, 'u' undefined
	i    int64
	f    float64
	s    string
}

func hashKey(v Value, depth int) (hkey, error) {
	if depth > maxValueDepth {
		return hkey{}, errTooDeep
	}
	switch x := v.(type) {
	case NoneType:
		return hkey{kind: 'n'}, nil
	case bool:
		if x {
			return hkey{kind: 'i', i: 1}, nil
		}
		return hkey{kind: 'i'}, nil
	case int64:
		return hkey{kind: 'i', i: x}, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return hkey{kind: 'i', i: int64(x)}, nil
		}
		return hkey{kind: 'f', f: x}, nil
	case string:
		return hkey{kind: 's', s: x}, nil
	case Markup:
		return hkey{kind: 's', s: string(x)}, nil
	case *Undefined:
		return hkey{kind: 'u'}, nil
	case *List:
		if !x.Tuple {
			return hkey{}, typeErr("unhashable type: 'list'")
		}
		var sb strings.Builder
		for _, it := range x.Items {
			k, err := hashKey(it, depth+1)
			if err != nil {
				return hkey{}, err
			}
			fmt.Fprintf(&sb, "%c%d:%v:%d:%s|", k.kind, k.i, k.f, len(k.s), k.s)
		}
		return hkey{kind: 't', s: sb.String()}, nil
	case *Dict:
		return hkey{}, typeErr("unhashable type: 'dict'")
	}
	// Identity-hashed objects (namespaces, callables): use the pointer.
	return hkey{kind: 'p', s: fmt.Sprintf("%p", v)}, nil
}

// Dict is an insertion-ordered Python dict.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[hkey]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{index: map[hkey]int{}} }

// Len returns the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Set inserts or replaces key.
func (d *Dict) Set(k, v Value) error {
	h, err := hashKey(k, 0)
	if err != nil {
		return err
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// SetStr inserts a string key.
func (d *Dict) SetStr(k string, v Value) {
	h := hkey{kind: 's', s: k}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

// Get looks up key.
func (d *Dict) Get(k Value) (Value, bool, error) {
	h, err := hashKey(k, 0)
	if err != nil {
		return nil, false, err
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false, nil
	}
	return d.vals[i], true, nil
}

// GetStr looks up a string key.
func (d *Dict) GetStr(k string) (Value, bool) {
	i, ok := d.index[hkey{kind: 's', s: k}]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *Dict) copyDict() *Dict {
	n := &Dict{keys: append([]Value(nil), d.keys...), vals: append([]Value(nil), d.vals...), index: make(map[hkey]int, len(d.keys))}
	for k, v := range d.index {
		n.index[k] = v
	}
	return n
}

// Namespace is jinja2's namespace() object: the only mutable value.
type Namespace struct {
	attrs *Dict
}

// Callable is a builtin function or a bound method.
type Callable struct {
	Name string
	Fn   func(e *evaluator, args []Value, kw *kwargs) (Value, error)
}

// kwargs is an ordered list of keyword arguments.
type kwargs struct {
	names []string
	vals  []Value
}

func (k *kwargs) len() int {
	if k == nil {
		return 0
	}
	return len(k.names)
}

func (k *kwargs) get(name string) (Value, bool) {
	if k == nil {
		return nil, false
	}
	for i, n := range k.names {
		if n == name {
			return k.vals[i], true
		}
	}
	return nil, false
}

func (k *kwargs) add(name string, v Value) error {
	if _, dup := k.get(name); dup {
		return typeErr(fmt.Sprintf("got multiple values for keyword argument '%s'", name))
	}
	k.names = append(k.names, name)
	k.vals = append(k.vals, v)
	return nil
}

// RuntimeError is an error raised while rendering (the Python exception
// class is in Kind).
type RuntimeError struct {
	Kind string
	Msg  string
}

func (e *RuntimeError) Error() string { return e.Kind + ": " + e.Msg }

func typeErr(msg string) error  { return &RuntimeError{"TypeError", msg} }
func valueErr(msg string) error { return &RuntimeError{"ValueError", msg} }

var errTooDeep = &RuntimeError{"RecursionError", "maximum value nesting depth exceeded"}

// maxValueDepth bounds recursion over nested values (repr, tojson, ==).
const maxValueDepth = 400

// typeName returns Python's type name for v.
func typeName(v Value) string {
	switch x := v.(type) {
	case NoneType:
		return "NoneType"
	case *Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Markup:
		return "Markup"
	case *List:
		if x.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Iter:
		return "generator"
	case *Callable:
		return "builtin_function_or_method"
	case *Macro:
		return "Macro"
	case *loopObj:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// objectTypeRepr mimics jinja2's object_type_repr used in undefined hints.
func objectTypeRepr(v Value) string {
	switch v.(type) {
	case NoneType:
		return "None"
	}
	return typeName(v) + " object"
}

// truthy implements Python truthiness.
func truthy(v Value) bool {
	switch x := v.(type) {
	case NoneType, *Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case Markup:
		return x != ""
	case *List:
		return len(x.Items) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

// asString returns the text of a str or Markup.
func asString(v Value) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case Markup:
		return string(x), true
	}
	return "", false
}

// asNumber returns v as int or float (bool counts as int).
func asInt(v Value) (int64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int64:
		return x, true
	}
	return 0, false
}

func asFloat(v Value) (float64, bool) {
	switch x := v.(type) {
	case bool, int64:
		i, _ := asInt(x)
		return float64(i), true
	case float64:
		return x, true
	}
	return 0, false
}

func isNumber(v Value) bool {
	switch v.(type) {
	case bool, int64, float64:
		return true
	}
	return false
}

// maxCompareItems bounds the number of element comparisons one == or <
// may perform on nested containers.
const maxCompareItems = 1 << 24

var errCompareTooLarge = &LimitError{Msg: "comparison of values too large"}

// valuesEqual implements Python ==.
func valuesEqual(a, b Value, depth int) (bool, error) {
	eq, _, err := valuesEqualCost(a, b, depth)
	return eq, err
}

// valuesEqualCost is valuesEqual that also reports how many values it
// compared.
func valuesEqualCost(a, b Value, depth int) (bool, int64, error) {
	budget := int64(maxCompareItems)
	eq, err := eqRec(a, b, depth, &budget)
	return eq, maxCompareItems - budget, err
}

// compareValues implements Python ordering (<, >) returning -1, 0, 1, or 2
// when unordered (NaN).
func compareValues(a, b Value, depth int) (int, error) {
	c, _, err := compareValuesCost(a, b, depth)
	return c, err
}

// compareValuesCost is compareValues that also reports how many values it
// compared.
func compareValuesCost(a, b Value, depth int) (int, int64, error) {
	budget := int64(maxCompareItems)
	c, err := cmpRec(a, b, depth, &budget)
	return c, maxCompareItems - budget, err
}

func eqRec(a, b Value, depth int, budget *int64) (bool, error) {
	if depth > maxValueDepth {
		return false, errTooDeep
	}
	*budget--
	if *budget < 0 {
		return false, errCompareTooLarge
	}
	switch x := a.(type) {
	case NoneType:
		_, ok := b.(NoneType)
		return ok, nil
	case *Undefined:
		_, ok := b.(*Undefined)
		return ok, nil
	case bool, int64, float64:
		if !isNumber(b) {
			return false, nil
		}
		if ai, ok := asInt(a); ok {
			if bi, ok := asInt(b); ok {
				return ai == bi, nil
			}
		}
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		return af == bf, nil
	case string, Markup:
		as, _ := asString(x)
		bs, ok := asString(b)
		return ok && as == bs, nil
	case *List:
		y, ok := b.(*List)
		if !ok || x.Tuple != y.Tuple || len(x.Items) != len(y.Items) {
			return false, nil
		}
		if x == y { // CPython compares identical containers as equal
			return true, nil
		}
		for i := range x.Items {
			eq, err := eqRec(x.Items[i], y.Items[i], depth+1, budget)
			if err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false, nil
		}
		if x == y {
			return true, nil
		}
		for i, k := range x.keys {
			v2, found, err := y.Get(k)
			if err != nil || !found {
				return false, err
			}
			eq, err := eqRec(x.vals[i], v2, depth+1, budget)
			if err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	}
	return a == b, nil
}

func cmpRec(a, b Value, depth int, budget *int64) (int, error) {
	if depth > maxValueDepth {
		return 0, errTooDeep
	}
	*budget--
	if *budget < 0 {
		return 0, errCompareTooLarge
	}
	if isNumber(a) && isNumber(b) {
		if ai, ok := asInt(a); ok {
			if bi, ok := asInt(b); ok {
				switch {
				case ai < bi:
					return -1, nil
				case ai > bi:
					return 1, nil
				}
				return 0, nil
			}
		}
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		switch {
		case af < bf:
			return -1, nil
		case af > bf:
			return 1, nil
		case af == bf:
			return 0, nil
		}
		return 2, nil // NaN: every comparison false
	}
	if as, ok := asString(a); ok {
		if bs, ok := asString(b); ok {
			return strings.Compare(as, bs), nil
		}
	}
	if x, ok := a.(*List); ok {
		if y, ok := b.(*List); ok && x.Tuple == y.Tuple {
			if x == y {
				return 0, nil
			}
			for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
				eq, err := eqRec(x.Items[i], y.Items[i], depth+1, budget)
				if err != nil {
					return 0, err
				}
				if !eq {
					return cmpRec(x.Items[i], y.Items[i], depth+1, budget)
				}
			}
			switch {
			case len(x.Items) < len(y.Items):
				return -1, nil
			case len(x.Items) > len(y.Items):
				return 1, nil
			}
			return 0, nil
		}
	}
	if u, ok := a.(*Undefined); ok {
		return 0, u.err()
	}
	if u, ok := b.(*Undefined); ok {
		return 0, u.err()
	}
	return 0, typeErr(fmt.Sprintf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b)))
}

// pyFloatRepr formats f like Python's repr(float).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	neg := false
	if e[0] == '-' {
		neg = true
		e = e[1:]
	}
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	} else if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		return "-" + out
	}
	return out
}

// pyStrRepr formats s like Python's repr(str).
func pyStrRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var sb strings.Builder
	sb.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, r)
		case r < 0x7f:
			sb.WriteRune(r)
		case !isPyPrintable(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(&sb, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(&sb, `\u%04x`, r)
			default:
				fmt.Fprintf(&sb, `\U%08x`, r)
			}
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte(q)
	return sb.String()
}

// strValue implements Python str(v) as used for template output.
func strValue(v Value) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case Markup:
		return string(x), nil
	case *Undefined:
		return "", nil
	}
	return reprValue(v, 0)
}

// reprValue implements Python repr(v) (str(v) for containers).
func reprValue(v Value, depth int) (string, error) {
	if depth > maxValueDepth {
		return "", errTooDeep
	}
	switch x := v.(type) {
	case NoneType:
		return "None", nil
	case *Undefined:
		return "Undefined", nil
	case bool:
		if x {
			return "True", nil
		}
		return "False", nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return pyFloatRepr(x), nil
	case string:
		return pyStrRepr(x), nil
	case Markup:
		return "Markup(" + pyStrRepr(string(x)) + ")", nil
	case *List:
		var sb strings.Builder
		if x.Tuple {
			sb.WriteByte('(')
		} else {
			sb.WriteByte('[')
		}
		for i, it := range x.Items {
			if i > 0 {
				sb.WriteString(", ")
			}
			s, err := reprValue(it, depth+1)
			if err != nil {
				return "", err
			}
			sb.WriteString(s)
		}
		if x.Tuple {
			if len(x.Items) == 1 {
				sb.WriteByte(',')
			}
			sb.WriteByte(')')
		} else {
			sb.WriteByte(']')
		}
		return sb.String(), nil
	case *Dict:
		return reprDict(x, depth)
	case *Namespace:
		s, err := reprDict(x.attrs, depth)
		if err != nil {
			return "", err
		}
		return "<Namespace " + s + ">", nil
	case *Iter:
		return "<generator object>", nil
	case *Callable:
		return "<built-in function " + x.Name + ">", nil
	case *Macro:
		return "<Macro '" + x.name + "'>", nil
	case *loopObj:
		return fmt.Sprintf("<LoopContext %d/%d>", x.index+1, len(x.items)), nil
	}
	return fmt.Sprintf("%v", v), nil
}

func reprDict(d *Dict, depth int) (string, error) {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, k := range d.keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		ks, err := reprValue(k, depth+1)
		if err != nil {
			return "", err
		}
		vs, err := reprValue(d.vals[i], depth+1)
		if err != nil {
			return "", err
		}
		sb.WriteString(ks)
		sb.WriteString(": ")
		sb.WriteString(vs)
	}
	sb.WriteByte('}')
	return sb.String(), nil
}

// FromGo converts plain Go data (as produced by encoding/json or built by
// callers) to template values. Maps with string keys become dicts whose keys
// are sorted (Go maps have no order); json.RawMessage is parsed preserving
// the key order of the JSON text.
func FromGo(v any) (Value, error) {
	return fromGo(v, 0)
}

func fromGo(v any, depth int) (Value, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels (cycle?)", maxValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return None, nil
	case NoneType, *Undefined, bool, int64, float64, string, Markup, *List, *Dict, *Namespace, *Callable:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return parseJSONNumber(string(x))
	case json.RawMessage:
		return ParseJSON([]byte(x))
	case []any:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			c, err := fromGo(it, depth+1)
			if err != nil {
				return nil, err
			}
			l.Items[i] = c
		}
		return l, nil
	case []string:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			l.Items[i] = it
		}
		return l, nil
	case []map[string]any:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			c, err := fromGo(it, depth+1)
			if err != nil {
				return nil, err
			}
			l.Items[i] = c
		}
		return l, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			c, err := fromGo(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			d.SetStr(k, c)
		}
		return d, nil
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			d.SetStr(k, x[k])
		}
		return d, nil
	}
	// Fall back to reflection for other slices/maps.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		l := &List{Items: make([]Value, rv.Len())}
		for i := 0; i < rv.Len(); i++ {
			c, err := fromGo(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			l.Items[i] = c
		}
		return l, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			c, err := fromGo(rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			d.SetStr(k, c)
		}
		return d, nil
	case reflect.Pointer:
		if rv.IsNil() {
			return None, nil
		}
		return fromGo(rv.Elem().Interface(), depth+1)
	}
	return nil, fmt.Errorf("unsupported Go value of type %T", v)
}

func parseJSONNumber(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return nil, fmt.Errorf("bad JSON number %q", s)
	}
	return f, nil
}

// ParseJSON parses JSON text into template values, preserving object key
// order (like Python's json.loads).
func ParseJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	v, err := parseJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func parseJSONValue(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			l := &List{}
			for dec.More() {
				v, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("JSON object key is not a string")
				}
				v, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.SetStr(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		}
		return nil, fmt.Errorf("unexpected JSON delimiter %v", t)
	case nil:
		return None, nil
	case bool:
		return t, nil
	case string:
		return t, nil
	case json.Number:
		return parseJSONNumber(string(t))
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}
