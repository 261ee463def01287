package jinja

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

type filterFn func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error)

var filters map[string]filterFn

func init() {
	filters = map[string]filterFn{
		"abs":            fAbs,
		"attr":           fAttr,
		"batch":          fBatch,
		"capitalize":     strFilter("capitalize", pyCapitalize),
		"center":         fCenter,
		"count":          fLength,
		"d":              fDefault,
		"default":        fDefault,
		"dictsort":       fDictsort,
		"e":              fEscape,
		"escape":         fEscape,
		"first":          fFirst,
		"float":          fFloat,
		"forceescape":    fForceEscape,
		"format":         fFormat,
		"groupby":        fGroupby,
		"indent":         fIndent,
		"int":            fInt,
		"items":          fItems,
		"join":           fJoin,
		"last":           fLast,
		"length":         fLength,
		"list":           fList,
		"lower":          strFilter("lower", pyLower),
		"map":            fMap,
		"max":            fMinMax(false),
		"min":            fMinMax(true),
		"reject":         fSelect(false, false),
		"rejectattr":     fSelect(false, true),
		"replace":        fReplace,
		"reverse":        fReverse,
		"round":          fRound,
		"safe":           fSafe,
		"select":         fSelect(true, false),
		"selectattr":     fSelect(true, true),
		"slice":          fSlice,
		"sort":           fSort,
		"string":         fString,
		"sum":            fSum,
		"title":          strFilter("title", jinjaTitle),
		"tojson":         fTojson,
		"trim":           fTrim,
		"truncate":       fTruncate,
		"unique":         fUnique,
		"upper":          strFilter("upper", pyUpper),
		"wordcount":      fWordcount,
		"striptags":      fStriptags,
		"filesizeformat": fFilesizeformat,
	}
}

// softStr is markupsafe.soft_str: Markup stays Markup, everything else str().
func softStr(v Value) (Value, string, error) {
	if m, ok := v.(Markup); ok {
		return m, string(m), nil
	}
	s, err := strValue(v)
	return s, s, err
}

func strFilter(name string, f func(string) string) filterFn {
	return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
		if _, err := bind(name, args, kw); err != nil {
			return nil, err
		}
		orig, s, err := softStr(v)
		if err != nil {
			return nil, err
		}
		if err := e.chargeBytes(len(s)); err != nil {
			return nil, err
		}
		_, m := orig.(Markup)
		return strResult(f(s), m), nil
	}
}

var wordBeginSplit = regexp.MustCompile(`[-\s({\[<]+`)

// jinjaTitle implements jinja2's do_title.
func jinjaTitle(s string) string {
	var sb strings.Builder
	last := 0
	write := func(item string) {
		if item == "" {
			return
		}
		r, n := utf8.DecodeRuneInString(item)
		sb.WriteString(pyUpper(string(r)))
		sb.WriteString(pyLower(item[n:]))
	}
	for _, loc := range wordBeginSplit.FindAllStringIndex(s, -1) {
		write(s[last:loc[0]])
		write(s[loc[0]:loc[1]])
		last = loc[1]
	}
	write(s[last:])
	return sb.String()
}

func fAbs(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	switch x := v.(type) {
	case bool, int64:
		i, _ := asInt(x)
		if i == math.MinInt64 {
			return nil, errOverflow
		}
		if i < 0 {
			return -i, nil
		}
		return i, nil
	case float64:
		return math.Abs(x), nil
	case *Undefined:
		return nil, x.err()
	}
	return nil, typeErr(fmt.Sprintf("bad operand type for abs(): '%s'", typeName(v)))
}

func fAttr(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("attr", args, kw, p("name", reqd))
	if err != nil {
		return nil, err
	}
	name, err := strValue(a[0])
	if err != nil {
		return nil, err
	}
	if u, ok := v.(*Undefined); ok {
		return nil, u.err()
	}
	if strings.HasPrefix(name, "_") {
		return unsafeMethod(v, name), nil
	}
	switch x := v.(type) {
	case *Namespace:
		if val, ok := x.attrs.GetStr(name); ok {
			return val, nil
		}
	case *loopObj:
		return e.loopAttr(x, name), nil
	}
	if m, ok := e.method(v, name); ok {
		return m, nil
	}
	return undefinedAttr(v, name), nil
}

func (e *evaluator) listOf(v Value) ([]Value, error) {
	items, err := e.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := e.chargeItems(len(items)); err != nil {
		return nil, err
	}
	return items, nil
}

func fBatch(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("batch", args, kw, p("linecount", reqd), p("fill_with", None))
	if err != nil {
		return nil, err
	}
	n, err := argInt("batch", a[0])
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	var out []Value
	var tmp []Value
	for _, it := range items {
		if int64(len(tmp)) == n {
			out = append(out, &List{Items: tmp})
			tmp = nil
		}
		tmp = append(tmp, it)
	}
	if len(tmp) > 0 {
		if !isNone(a[1]) {
			if err := e.chargeItems(int(min(n, maxItems+1))); err != nil {
				return nil, err
			}
			for int64(len(tmp)) < n {
				tmp = append(tmp, a[1])
			}
		}
		out = append(out, &List{Items: tmp})
	}
	return &Iter{items: out}, nil
}

func fCenter(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("center", args, kw, p("width", int64(80)))
	if err != nil {
		return nil, err
	}
	w, err := argInt("center", a[0])
	if err != nil {
		return nil, err
	}
	orig, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	r, err := e.pad(s, w, " ", "center")
	if err != nil {
		return nil, err
	}
	_, m := orig.(Markup)
	return strResult(r, m), nil
}

func fLength(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	switch x := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(x)), nil
	case Markup:
		return int64(utf8.RuneCountInString(string(x))), nil
	case *List:
		return int64(len(x.Items)), nil
	case *Dict:
		return int64(x.Len()), nil
	case *Undefined:
		return int64(0), nil
	case *loopObj:
		return int64(len(x.items)), nil
	}
	return nil, typeErr(fmt.Sprintf("object of type '%s' has no len()", typeName(v)))
}

func fDefault(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("default", args, kw, p("default_value", ""), p("boolean", false))
	if err != nil {
		return nil, err
	}
	if _, ok := v.(*Undefined); ok || (truthy(a[1]) && !truthy(v)) {
		return a[0], nil
	}
	return v, nil
}

// sortKey applies jinja's ignore_case postprocessing.
func sortKey(v Value, caseSensitive bool) Value {
	if !caseSensitive {
		if s, ok := v.(string); ok {
			return pyLower(s)
		}
		if m, ok := v.(Markup); ok {
			return Markup(pyLower(string(m)))
		}
	}
	return v
}

// stableSort sorts items by keys with Python's sorted() semantics.
func stableSort(e *evaluator, items, keys []Value, reverse bool) error {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	sort.SliceStable(idx, func(a, b int) bool {
		if sortErr != nil {
			return false
		}
		ka, kb := keys[idx[a]], keys[idx[b]]
		if reverse {
			ka, kb = kb, ka
		}
		c, cost, err := compareValuesCost(ka, kb, 0)
		if err == nil {
			err = e.chargeCompare(cost)
		}
		if err != nil {
			sortErr = err
			return false
		}
		return c < 0
	})
	if sortErr != nil {
		return sortErr
	}
	out := make([]Value, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	copy(items, out)
	return nil
}

func fDictsort(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("dictsort", args, kw, p("case_sensitive", false), p("by", "key"), p("reverse", false))
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, &RuntimeError{"AttributeError", fmt.Sprintf("'%s' object has no attribute 'items'", typeName(v))}
	}
	pos := 0
	switch a[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, &RuntimeError{"FilterArgumentError", `You can only sort by either "key" or "value"`}
	}
	if err := e.chargeItems(d.Len() * 8); err != nil {
		return nil, err
	}
	items := make([]Value, d.Len())
	keys := make([]Value, d.Len())
	for i, k := range d.keys {
		pair := []Value{k, d.vals[i]}
		items[i] = &List{Items: pair, Tuple: true}
		keys[i] = sortKey(pair[pos], truthy(a[0]))
	}
	if err := stableSort(e, items, keys, truthy(a[2])); err != nil {
		return nil, err
	}
	return &List{Items: items}, nil
}

func htmlEscape(s string) string {
	if !strings.ContainsAny(s, `&<>"'`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '&':
			sb.WriteString("&amp;")
		case '<':
			sb.WriteString("&lt;")
		case '>':
			sb.WriteString("&gt;")
		case '"':
			sb.WriteString("&#34;")
		case '\'':
			sb.WriteString("&#39;")
		default:
			sb.WriteByte(s[i])
		}
	}
	return sb.String()
}

func fEscape(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if m, ok := v.(Markup); ok {
		return m, nil
	}
	s, err := strValue(v)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(*Undefined); ok {
		s = ""
	}
	if err := e.chargeBytes(len(s) * 2); err != nil {
		return nil, err
	}
	return Markup(htmlEscape(s)), nil
}

func fForceEscape(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	_, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	return Markup(htmlEscape(s)), nil
}

func fFirst(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if it, ok := v.(*Iter); ok {
		if it.pos < len(it.items) {
			it.pos++
			return it.items[it.pos-1], nil
		}
		return &Undefined{Hint: "No first item, sequence was empty."}, nil
	}
	if s, ok := asString(v); ok {
		if s == "" {
			return &Undefined{Hint: "No first item, sequence was empty."}, nil
		}
		r, _ := utf8.DecodeRuneInString(s)
		return string(r), nil
	}
	items, err := e.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{Hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func fLast(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	switch x := v.(type) {
	case *Iter:
		return nil, typeErr("'generator' object is not reversible")
	case string, Markup:
		s, _ := asString(x)
		if s == "" {
			return &Undefined{Hint: "No last item, sequence was empty."}, nil
		}
		r, _ := utf8.DecodeLastRuneInString(s)
		return string(r), nil
	}
	items, err := e.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{Hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

// pyFloatParse implements float(str).
func pyFloatParse(s string) (float64, bool) {
	t := strings.TrimFunc(s, isPySpace)
	low := strings.ToLower(t)
	switch strings.TrimLeft(low, "+-") {
	case "inf", "infinity":
		if strings.HasPrefix(low, "-") {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	if t == "" || strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") {
		return 0, false
	}
	for _, c := range t {
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || c == '_') {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

func fFloat(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("float", args, kw, p("default", 0.0))
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case bool, int64, float64:
		f, _ := asFloat(x)
		return f, nil
	case string, Markup:
		s, _ := asString(x)
		if f, ok := pyFloatParse(s); ok {
			return f, nil
		}
	case *Undefined:
		return nil, x.err()
	}
	return a[0], nil
}

// pyIntParse implements int(str, base).
func pyIntParse(s string, base int64) (int64, bool) {
	t := strings.TrimFunc(s, isPySpace)
	neg := false
	if strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+") {
		neg = t[0] == '-'
		t = t[1:]
	}
	low := strings.ToLower(t)
	if base == 0 || base == 16 && strings.HasPrefix(low, "0x") || base == 8 && strings.HasPrefix(low, "0o") || base == 2 && strings.HasPrefix(low, "0b") {
		switch {
		case strings.HasPrefix(low, "0x"):
			base, t = 16, t[2:]
			t = strings.TrimPrefix(t, "_")
		case strings.HasPrefix(low, "0o"):
			base, t = 8, t[2:]
			t = strings.TrimPrefix(t, "_")
		case strings.HasPrefix(low, "0b"):
			base, t = 2, t[2:]
			t = strings.TrimPrefix(t, "_")
		case base == 0:
			base = 10
		}
	}
	if t == "" || strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") || base < 2 || base > 36 {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), int(base), 64)
	if err != nil {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

func fInt(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("int", args, kw, p("default", int64(0)), p("base", int64(10)))
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case bool, int64:
		i, _ := asInt(x)
		return i, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return a[0], nil
		}
		if math.Abs(x) >= 1<<63 {
			return nil, errOverflow
		}
		return int64(x), nil
	case string, Markup:
		s, _ := asString(x)
		base, _ := asInt(a[1])
		if i, ok := pyIntParse(s, base); ok {
			return i, nil
		}
		if f, ok := pyFloatParse(s); ok && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	case *Undefined:
		return nil, x.err()
	}
	return a[0], nil
}

func fItems(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	switch x := v.(type) {
	case *Undefined:
		return &Iter{}, nil
	case *Dict:
		if err := e.chargeItems(x.Len()); err != nil {
			return nil, err
		}
		items := make([]Value, x.Len())
		for i, k := range x.keys {
			items[i] = &List{Items: []Value{k, x.vals[i]}, Tuple: true}
		}
		return &Iter{items: items}, nil
	}
	return nil, typeErr("Can only get item pairs from a mapping.")
}

// attrGetter implements make_attrgetter: dotted path, integer parts.
func (e *evaluator) attrGetter(attribute Value, caseSensitive bool, def Value) func(Value) (Value, error) {
	var parts []Value
	switch a := attribute.(type) {
	case NoneType:
	case string:
		for _, pt := range strings.Split(a, ".") {
			if pt != "" && strings.Trim(pt, "0123456789") == "" {
				n, err := strconv.ParseInt(pt, 10, 64)
				if err == nil {
					parts = append(parts, n)
					continue
				}
			}
			parts = append(parts, pt)
		}
	default:
		parts = []Value{attribute}
	}
	return func(item Value) (Value, error) {
		for _, pt := range parts {
			var err error
			item, err = e.getItem(item, pt)
			if err != nil {
				return nil, err
			}
			if def != nil && !isNone(def) {
				if _, ok := item.(*Undefined); ok {
					item = def
				}
			}
		}
		return sortKey(item, caseSensitive), nil
	}
}

func fJoin(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("join", args, kw, p("d", ""), p("attribute", None))
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	sep, err := strValue(a[0])
	if err != nil {
		return nil, err
	}
	if !isNone(a[1]) {
		get := e.attrGetter(a[1], true, nil)
		mapped := make([]Value, len(items))
		for i, it := range items {
			if mapped[i], err = get(it); err != nil {
				return nil, err
			}
		}
		items = mapped
	}
	var sb strings.Builder
	for i, it := range items {
		s, err := strValue(it)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			sb.WriteString(sep)
		}
		if err := e.chargeAppend(sb.Len(), len(s)); err != nil {
			return nil, err
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

func fList(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	return &List{Items: append([]Value(nil), items...)}, nil
}

func fMap(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if !truthy(v) { // jinja2: "if value:" guards the generator
		return &Iter{}, nil
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	var fn func(Value) (Value, error)
	if len(args) == 0 {
		attr, ok := kw.get("attribute")
		if !ok {
			return nil, &RuntimeError{"FilterArgumentError", "map requires a filter argument"}
		}
		def, _ := kw.get("default")
		for _, n := range kw.names {
			if n != "attribute" && n != "default" {
				return nil, &RuntimeError{"FilterArgumentError", fmt.Sprintf("Unexpected keyword argument '%s'", n)}
			}
		}
		fn = e.attrGetter(attr, true, def)
	} else {
		name, err := argStr("map", args[0])
		if err != nil {
			return nil, err
		}
		f, ok := filters[name]
		if !ok {
			return nil, &RuntimeError{"TemplateRuntimeError", fmt.Sprintf("No filter named '%s'.", name)}
		}
		rest := args[1:]
		fn = func(x Value) (Value, error) { return f(e, x, rest, kw) }
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if err := e.step(); err != nil {
			return nil, err
		}
		if out[i], err = fn(it); err != nil {
			return nil, err
		}
	}
	return &Iter{items: out}, nil
}

func fMinMax(isMin bool) filterFn {
	name := "max"
	if isMin {
		name = "min"
	}
	return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
		a, err := bind(name, args, kw, p("case_sensitive", false), p("attribute", None))
		if err != nil {
			return nil, err
		}
		items, err := e.listOf(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return &Undefined{Hint: "No aggregated item, sequence was empty."}, nil
		}
		get := e.attrGetter(a[1], truthy(a[0]), nil)
		best := items[0]
		bestKey, err := get(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := get(it)
			if err != nil {
				return nil, err
			}
			c, err := compareValues(k, bestKey, 0)
			if err != nil {
				return nil, err
			}
			if (isMin && c < 0) || (!isMin && c > 0 && c != 2) {
				best, bestKey = it, k
			}
		}
		return best, nil
	}
}

// fSelect implements select/reject/selectattr/rejectattr.
func fSelect(keep bool, byAttr bool) filterFn {
	return func(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
		if !truthy(v) { // jinja2: "if value:" guards the generator
			return &Iter{}, nil
		}
		items, err := e.listOf(v)
		if err != nil {
			return nil, err
		}
		get := func(x Value) (Value, error) { return x, nil }
		if byAttr {
			if len(args) == 0 {
				return nil, &RuntimeError{"FilterArgumentError", "Missing parameter for attribute name"}
			}
			get = e.attrGetter(args[0], true, nil)
			args = args[1:]
		}
		test := func(x Value) (bool, error) { return truthy(x), nil }
		if len(args) > 0 {
			name, err := argStr("select", args[0])
			if err != nil {
				return nil, err
			}
			t, ok := tests[name]
			if !ok {
				return nil, &RuntimeError{"TemplateRuntimeError", fmt.Sprintf("No test named '%s'.", name)}
			}
			rest := args[1:]
			test = func(x Value) (bool, error) {
				r, err := t(e, x, rest, kw)
				if err != nil {
					return false, err
				}
				return truthy(r), nil
			}
		}
		var out []Value
		for _, it := range items {
			if err := e.step(); err != nil {
				return nil, err
			}
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return &Iter{items: out}, nil
	}
}

func fReplace(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("replace", args, kw, p("old", reqd), p("new", reqd), p("count", None))
	if err != nil {
		return nil, err
	}
	s, err := strValue(v)
	if err != nil {
		return nil, err
	}
	old, err := strValue(a[0])
	if err != nil {
		return nil, err
	}
	nw, err := strValue(a[1])
	if err != nil {
		return nil, err
	}
	count := int64(-1)
	if !isNone(a[2]) {
		if count, err = argInt("replace", a[2]); err != nil {
			return nil, err
		}
	}
	return e.pyReplace(s, old, nw, count)
}

func fReverse(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if s, ok := asString(v); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		if _, m := v.(Markup); m {
			return Markup(string(rs)), nil
		}
		return string(rs), nil
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, &RuntimeError{"FilterArgumentError", "argument must be iterable"}
	}
	out := make([]Value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	if _, isIter := v.(*Iter); isIter {
		return &List{Items: out}, nil
	}
	return &Iter{items: out}, nil
}

// pyRound implements Python's round(x, ndigits) for floats.
func pyRound(x float64, nd int64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	if nd > 22 {
		return x
	}
	if nd < -308 {
		return math.Copysign(0, x)
	}
	if nd >= 0 {
		s := strconv.FormatFloat(x, 'f', int(nd), 64)
		r, _ := strconv.ParseFloat(s, 64)
		return r
	}
	pow := math.Pow(10, float64(-nd))
	y := x / pow
	z := math.RoundToEven(y)
	if math.Abs(y-z) == 0.5 {
		z = 2 * math.Round(y/2)
	}
	return z * pow
}

func fRound(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("round", args, kw, p("precision", int64(0)), p("method", "common"))
	if err != nil {
		return nil, err
	}
	prec, err := argInt("round", a[0])
	if err != nil {
		return nil, err
	}
	method, _ := a[1].(string)
	if method != "common" && method != "ceil" && method != "floor" {
		return nil, &RuntimeError{"FilterArgumentError", "method must be common, ceil or floor"}
	}
	if u, ok := v.(*Undefined); ok {
		return nil, u.err()
	}
	if method == "common" {
		switch x := v.(type) {
		case bool, int64:
			i, _ := asInt(x)
			if prec >= 0 {
				return i, nil
			}
			return int64(pyRound(float64(i), prec)), nil
		case float64:
			return pyRound(x, prec), nil
		}
		return nil, typeErr(fmt.Sprintf("type %s doesn't define __round__ method", typeName(v)))
	}
	f, ok := asFloat(v)
	if !ok {
		return nil, typeErr("must be real number, not " + typeName(v))
	}
	scale := math.Pow(10, float64(prec))
	var r float64
	if method == "ceil" {
		r = math.Ceil(f * scale)
	} else {
		r = math.Floor(f * scale)
	}
	return r / scale, nil
}

func fSafe(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if m, ok := v.(Markup); ok {
		return m, nil
	}
	s, err := strValue(v)
	if err != nil {
		return nil, err
	}
	return Markup(s), nil
}

func fSlice(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("slice", args, kw, p("slices", reqd), p("fill_with", None))
	if err != nil {
		return nil, err
	}
	slices, err := argInt("slice", a[0])
	if err != nil {
		return nil, err
	}
	if slices <= 0 || slices > 1<<20 {
		return nil, valueErr("slice count out of range")
	}
	seq, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	n := int64(len(seq))
	per := n / slices
	extra := n % slices
	offset := int64(0)
	var out []Value
	for sn := int64(0); sn < slices; sn++ {
		start := offset + sn*per
		if sn < extra {
			offset++
		}
		end := offset + (sn+1)*per
		tmp := append([]Value(nil), seq[start:end]...)
		if !isNone(a[1]) && sn >= extra {
			tmp = append(tmp, a[1])
		}
		out = append(out, &List{Items: tmp})
	}
	return &Iter{items: out}, nil
}

func fSort(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("sort", args, kw, p("reverse", false), p("case_sensitive", false), p("attribute", None))
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	if err := e.chargeItems(len(items) * 8); err != nil {
		return nil, err
	}
	var attrs []Value
	if s, ok := a[2].(string); ok {
		for _, pt := range strings.Split(s, ",") {
			attrs = append(attrs, pt)
		}
	} else {
		attrs = []Value{a[2]}
	}
	keys := make([]Value, len(items))
	for i, it := range items {
		ks := make([]Value, len(attrs))
		for j, at := range attrs {
			k, err := e.attrGetter(at, truthy(a[1]), nil)(it)
			if err != nil {
				return nil, err
			}
			ks[j] = k
		}
		keys[i] = &List{Items: ks}
	}
	if err := stableSort(e, items, keys, truthy(a[0])); err != nil {
		return nil, err
	}
	return &List{Items: items}, nil
}

func fString(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	orig, _, err := softStr(v)
	return orig, err
}

func fSum(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("sum", args, kw, p("attribute", None), p("start", int64(0)))
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	if !isNone(a[0]) {
		// A new slice: items may be the list's own (iterate does not copy), and sum must not
		// replace the caller's elements by their attributes (conformance case
		// chat_numeric_filters: nums|sum(attribute='v') then nums|max(attribute='v')).
		get := e.attrGetter(a[0], true, nil)
		vals := make([]Value, len(items))
		for i, it := range items {
			if vals[i], err = get(it); err != nil {
				return nil, err
			}
		}
		items = vals
	}
	acc := a[1]
	for _, it := range items {
		if _, ok := asString(it); ok {
			return nil, typeErr("unsupported operand type(s) for +: 'int' and 'str'")
		}
		if acc, err = e.binOp("+", acc, it); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func fTrim(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("trim", args, kw, p("chars", None))
	if err != nil {
		return nil, err
	}
	orig, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	r, err := pyStrip(s, a[0], true, true)
	if err != nil {
		return nil, err
	}
	_, m := orig.(Markup)
	return strResult(r, m), nil
}

func fTruncate(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("truncate", args, kw, p("length", int64(255)), p("killwords", false), p("end", "..."), p("leeway", None))
	if err != nil {
		return nil, err
	}
	s, err := strValue(v)
	if err != nil {
		return nil, err
	}
	length, err := argInt("truncate", a[0])
	if err != nil {
		return nil, err
	}
	end, err := argStr("truncate", a[2])
	if err != nil {
		return nil, err
	}
	leeway := int64(5)
	if !isNone(a[3]) {
		if leeway, err = argInt("truncate", a[3]); err != nil {
			return nil, err
		}
	}
	endLen := int64(utf8.RuneCountInString(end))
	if length < endLen {
		return nil, &RuntimeError{"AssertionError", fmt.Sprintf("expected length >= %d, got %d", endLen, length)}
	}
	if leeway < 0 {
		return nil, &RuntimeError{"AssertionError", fmt.Sprintf("expected leeway >= 0, got %d", leeway)}
	}
	rs := []rune(s)
	if int64(len(rs)) <= length+leeway {
		return s, nil
	}
	cut := string(rs[:length-endLen])
	if truthy(a[1]) {
		return cut + end, nil
	}
	if i := strings.LastIndex(cut, " "); i >= 0 {
		cut = cut[:i]
	}
	return cut + end, nil
}

func fUnique(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("unique", args, kw, p("case_sensitive", false), p("attribute", None))
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	get := e.attrGetter(a[1], truthy(a[0]), nil)
	seen := map[hkey]bool{}
	var out []Value
	for _, it := range items {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		h, err := hashKey(k, 0)
		if err != nil {
			return nil, err
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, it)
		}
	}
	return &Iter{items: out}, nil
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_\p{Mn}\p{Mc}]+`)

func fWordcount(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	_, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	return int64(len(wordRe.FindAllStringIndex(s, -1))), nil
}

func fIndent(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("indent", args, kw, p("width", int64(4)), p("first", false), p("blank", false))
	if err != nil {
		return nil, err
	}
	var ind string
	if s, ok := asString(a[0]); ok {
		ind = s
	} else {
		w, err := argInt("indent", a[0])
		if err != nil {
			return nil, err
		}
		if w < 0 {
			w = 0
		}
		if err := e.chargeBytes(int(w)); err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", int(w))
	}
	orig, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	s += "\n"
	lines := pySplitlines(s, false)
	if err := e.chargeBytes(len(s) + len(lines)*len(ind)); err != nil {
		return nil, err
	}
	var rv string
	if truthy(a[2]) {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		var sb strings.Builder
		sb.WriteString(lines[0])
		for _, l := range lines[1:] {
			sb.WriteString("\n")
			if l != "" {
				sb.WriteString(ind)
			}
			sb.WriteString(l)
		}
		rv = sb.String()
	}
	if truthy(a[1]) {
		rv = ind + rv
	}
	_, m := orig.(Markup)
	return strResult(rv, m), nil
}

func fFormat(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	if len(args) > 0 && kw.len() > 0 {
		return nil, &RuntimeError{"FilterArgumentError", "can't handle positional and keyword arguments at the same time"}
	}
	_, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	var operand Value
	if kw.len() > 0 {
		d := NewDict()
		for i, n := range kw.names {
			d.SetStr(n, kw.vals[i])
		}
		operand = d
	} else {
		operand = &List{Items: args, Tuple: true}
	}
	r, err := e.percentFormat(s, operand)
	if err != nil {
		return nil, err
	}
	if _, m := v.(Markup); m {
		return Markup(r), nil
	}
	return r, nil
}

func fGroupby(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("groupby", args, kw, p("attribute", reqd), p("default", None), p("case_sensitive", false))
	if err != nil {
		return nil, err
	}
	items, err := e.listOf(v)
	if err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	cs := truthy(a[2])
	get := e.attrGetter(a[0], cs, a[1])
	keys := make([]Value, len(items))
	for i, it := range items {
		if keys[i], err = get(it); err != nil {
			return nil, err
		}
	}
	order := make([]Value, len(items))
	for i := range items {
		order[i] = int64(i)
	}
	if err := stableSort(e, order, keys, false); err != nil {
		return nil, err
	}
	var out []Value
	var lastKey Value
	for _, ov := range order {
		i := ov.(int64)
		it, k := items[i], keys[i]
		if n := len(out); n > 0 {
			eq, err := valuesEqual(lastKey, k, 0)
			if err != nil {
				return nil, err
			}
			if eq {
				grp := out[n-1].(*List).Items[1].(*List)
				grp.Items = append(grp.Items, it)
				continue
			}
		}
		lastKey = k
		grouper := k
		if !cs {
			if grouper, err = e.attrGetter(a[0], true, a[1])(it); err != nil {
				return nil, err
			}
		}
		out = append(out, &List{Items: []Value{grouper, &List{Items: []Value{it}}}, Tuple: true, group: true})
	}
	return &List{Items: out}, nil
}

var tagRe = regexp.MustCompile(`(?s)<!--.*?-->|<.*?>`)

func fStriptags(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	_, s, err := softStr(v)
	if err != nil {
		return nil, err
	}
	s = tagRe.ReplaceAllString(s, "")
	s = strings.Join(strings.FieldsFunc(s, isPySpace), " ")
	r := strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&quot;", `"`)
	return r.Replace(s), nil
}

func fFilesizeformat(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("filesizeformat", args, kw, p("binary", false))
	if err != nil {
		return nil, err
	}
	f, ok := asFloat(v)
	if !ok {
		s, isStr := asString(v)
		if !isStr {
			return nil, typeErr("filesizeformat needs a number")
		}
		if f, ok = pyFloatParse(s); !ok {
			return nil, valueErr("could not convert string to float")
		}
	}
	base := 1000.0
	prefixes := []string{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	if truthy(a[0]) {
		base = 1024
		prefixes = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
	}
	if f == 1 {
		return "1 Byte", nil
	}
	if f < base {
		return fmt.Sprintf("%d Bytes", int64(f)), nil
	}
	unit := 1.0
	for i, pfx := range prefixes {
		unit = math.Pow(base, float64(i+2))
		if f < unit {
			return fmt.Sprintf("%.1f %s", base*f/unit, pfx), nil
		}
	}
	return fmt.Sprintf("%.1f %s", base*f/unit, prefixes[len(prefixes)-1]), nil
}
