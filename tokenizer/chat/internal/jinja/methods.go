package jinja

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// method returns the bound method name of obj, or false when obj has no
// such method. Methods that would mutate a list or dict return an unsafe
// Undefined (ImmutableSandboxedEnvironment).
func (e *evaluator) method(obj Value, name string) (Value, bool) {
	switch x := obj.(type) {
	case string:
		return strMethod(x, false, name)
	case Markup:
		return strMethod(string(x), true, name)
	case *Dict:
		return dictMethod(x, name)
	case *List:
		return listMethod(x, name)
	case *Callable, *Macro:
		return nil, false
	}
	return nil, false
}

func unsafeMethod(obj Value, name string) *Undefined {
	return &Undefined{Hint: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj)), Security: true}
}

func bound(name string, fn func(e *evaluator, args []Value, kw *kwargs) (Value, error)) *Callable {
	return &Callable{Name: name, Fn: fn}
}

func dictMethod(d *Dict, name string) (Value, bool) {
	switch name {
	case "get":
		return bound("get", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if kw.len() > 0 {
				return nil, typeErr("get() takes no keyword arguments")
			}
			a, err := bind("get", args, nil, p("key", reqd), p("default", None))
			if err != nil {
				return nil, err
			}
			v, ok, err := d.Get(a[0])
			if err != nil {
				return nil, err
			}
			if !ok {
				return a[1], nil
			}
			return v, nil
		}), true
	case "items":
		return bound("items", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, typeErr("items() takes no arguments")
			}
			if err := e.chargeItems(d.Len()); err != nil {
				return nil, err
			}
			items := make([]Value, d.Len())
			for i, k := range d.keys {
				items[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
			}
			return &List{Items: items}, nil
		}), true
	case "keys":
		return bound("keys", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, typeErr("keys() takes no arguments")
			}
			return &List{Items: append([]Value(nil), d.keys...)}, nil
		}), true
	case "values":
		return bound("values", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, typeErr("values() takes no arguments")
			}
			return &List{Items: append([]Value(nil), d.vals...)}, nil
		}), true
	case "copy":
		return bound("copy", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			return d.copyDict(), nil
		}), true
	case "pop", "popitem", "setdefault", "update", "clear":
		return unsafeMethod(d, name), true
	}
	return nil, false
}

func listMethod(l *List, name string) (Value, bool) {
	switch name {
	case "index":
		return bound("index", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) < 1 {
				return nil, typeErr("index expected at least 1 argument, got 0")
			}
			if err := e.chargeItems(len(l.Items)); err != nil {
				return nil, err
			}
			for i, it := range l.Items {
				eq, err := valuesEqual(it, args[0], 0)
				if err != nil {
					return nil, err
				}
				if eq {
					return int64(i), nil
				}
			}
			return nil, valueErr("value is not in list")
		}), true
	case "count":
		return bound("count", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) != 1 {
				return nil, typeErr("count() takes exactly one argument")
			}
			if err := e.chargeItems(len(l.Items)); err != nil {
				return nil, err
			}
			n := int64(0)
			for _, it := range l.Items {
				eq, err := valuesEqual(it, args[0], 0)
				if err != nil {
					return nil, err
				}
				if eq {
					n++
				}
			}
			return n, nil
		}), true
	case "copy":
		if l.Tuple {
			return nil, false
		}
		return bound("copy", func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			return &List{Items: append([]Value(nil), l.Items...)}, nil
		}), true
	case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
		if l.Tuple {
			return nil, false
		}
		return unsafeMethod(l, name), true
	}
	return nil, false
}

// strResult keeps the Markup flag of the receiver.
func strResult(s string, markup bool) Value {
	if markup {
		return Markup(s)
	}
	return s
}

func strMethod(s string, markup bool, name string) (Value, bool) {
	var fn func(e *evaluator, args []Value, kw *kwargs) (Value, error)
	switch name {
	case "startswith", "endswith":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("prefix", reqd), p("start", None), p("end", None))
			if err != nil {
				return nil, err
			}
			sub, inRange, err := subRange(s, a[1], a[2])
			if err != nil {
				return nil, err
			}
			if !inRange {
				return false, nil
			}
			var cands []Value
			if t, ok := a[0].(*List); ok && t.Tuple {
				cands = t.Items
			} else {
				cands = []Value{a[0]}
			}
			for _, c := range cands {
				cs, ok := asString(c)
				if !ok {
					return nil, typeErr(fmt.Sprintf("%s first arg must be str or a tuple of str, not %s", name, typeName(c)))
				}
				if name == "startswith" && strings.HasPrefix(sub, cs) || name == "endswith" && strings.HasSuffix(sub, cs) {
					return true, nil
				}
			}
			return false, nil
		}
	case "split", "rsplit":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("sep", None), p("maxsplit", int64(-1)))
			if err != nil {
				return nil, err
			}
			maxsplit, err := argInt(name, a[1])
			if err != nil {
				return nil, err
			}
			if err := e.chargeBytes(len(s)); err != nil {
				return nil, err
			}
			var parts []string
			if isNone(a[0]) {
				parts = pySplitWhitespace(s, int(maxsplit), name == "rsplit")
			} else {
				sep, err := argStr(name, a[0])
				if err != nil {
					return nil, err
				}
				if sep == "" {
					return nil, valueErr("empty separator")
				}
				if name == "split" {
					parts = strings.SplitN(s, sep, splitN(maxsplit))
				} else {
					parts = rsplitN(s, sep, int(maxsplit))
				}
			}
			out := make([]Value, len(parts))
			for i, pt := range parts {
				out[i] = strResult(pt, markup)
			}
			return &List{Items: out}, nil
		}
	case "splitlines":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("keepends", false))
			if err != nil {
				return nil, err
			}
			lines := pySplitlines(s, truthy(a[0]))
			out := make([]Value, len(lines))
			for i, l := range lines {
				out[i] = strResult(l, markup)
			}
			return &List{Items: out}, nil
		}
	case "strip", "lstrip", "rstrip":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("chars", None))
			if err != nil {
				return nil, err
			}
			r, err := pyStrip(s, a[0], name != "rstrip", name != "lstrip")
			if err != nil {
				return nil, err
			}
			return strResult(r, markup), nil
		}
	case "upper", "lower", "title", "capitalize", "swapcase", "casefold":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, typeErr(name + "() takes no arguments")
			}
			if err := e.chargeBytes(len(s)); err != nil {
				return nil, err
			}
			var r string
			switch name {
			case "upper":
				r = pyUpper(s)
			case "lower":
				r = pyLower(s)
			case "casefold":
				r = cases.Fold().String(s)
			case "title":
				r = pyTitle(s)
			case "capitalize":
				r = pyCapitalize(s)
			case "swapcase":
				var sb strings.Builder
				for _, c := range s {
					switch {
					case unicode.IsUpper(c):
						sb.WriteString(pyLower(string(c)))
					case unicode.IsLower(c):
						sb.WriteString(pyUpper(string(c)))
					default:
						sb.WriteRune(c)
					}
				}
				r = sb.String()
			}
			return strResult(r, markup), nil
		}
	case "replace":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("old", reqd), p("new", reqd), p("count", int64(-1)))
			if err != nil {
				return nil, err
			}
			old, err := argStr(name, a[0])
			if err != nil {
				return nil, err
			}
			nw, err := argStr(name, a[1])
			if err != nil {
				return nil, err
			}
			n, err := argInt(name, a[2])
			if err != nil {
				return nil, err
			}
			r, err := e.pyReplace(s, old, nw, n)
			if err != nil {
				return nil, err
			}
			return strResult(r, markup), nil
		}
	case "find", "rfind", "index", "rindex", "count":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			if kw.len() > 0 {
				return nil, typeErr(name + "() takes no keyword arguments")
			}
			a, err := bind(name, args, nil, p("sub", reqd), p("start", None), p("end", None))
			if err != nil {
				return nil, err
			}
			sub, err := argStr(name, a[0])
			if err != nil {
				return nil, err
			}
			rs := []rune(s)
			lo, hi, err := runeRange(len(rs), a[1], a[2])
			if err != nil {
				return nil, err
			}
			if err := e.chargeBytes(len(s)); err != nil {
				return nil, err
			}
			if lo > hi {
				if name == "count" {
					return int64(0), nil
				}
				if name == "index" || name == "rindex" {
					return nil, valueErr("substring not found")
				}
				return int64(-1), nil
			}
			hay := string(rs[lo:hi])
			switch name {
			case "count":
				if sub == "" {
					return int64(utf8.RuneCountInString(hay) + 1), nil
				}
				return int64(strings.Count(hay, sub)), nil
			case "find", "index":
				i := strings.Index(hay, sub)
				if i < 0 {
					if name == "index" {
						return nil, valueErr("substring not found")
					}
					return int64(-1), nil
				}
				return int64(lo + utf8.RuneCountInString(hay[:i])), nil
			default:
				i := strings.LastIndex(hay, sub)
				if i < 0 {
					if name == "rindex" {
						return nil, valueErr("substring not found")
					}
					return int64(-1), nil
				}
				return int64(lo + utf8.RuneCountInString(hay[:i])), nil
			}
		}
	case "join":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("iterable", reqd))
			if err != nil {
				return nil, err
			}
			items, err := e.iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			total := 0
			for i, it := range items {
				ps, ok := asString(it)
				if !ok {
					return nil, typeErr(fmt.Sprintf("sequence item %d: expected str instance, %s found", i, typeName(it)))
				}
				parts[i] = ps
				total += len(ps) + len(s)
			}
			if err := e.chargeBytes(total); err != nil {
				return nil, err
			}
			return strResult(strings.Join(parts, s), markup), nil
		}
	case "format":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			r, err := e.strFormat(s, args, kw)
			if err != nil {
				return nil, err
			}
			return strResult(r, markup), nil
		}
	case "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "islower", "isupper", "istitle":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			return strPredicate(name, s), nil
		}
	case "zfill":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("width", reqd))
			if err != nil {
				return nil, err
			}
			w, err := argInt(name, a[0])
			if err != nil {
				return nil, err
			}
			n := int64(utf8.RuneCountInString(s))
			if w <= n {
				return strResult(s, markup), nil
			}
			if err := e.chargeBytes(int(w)); err != nil {
				return nil, err
			}
			pad := strings.Repeat("0", int(w-n))
			if s != "" && (s[0] == '+' || s[0] == '-') {
				return strResult(s[:1]+pad+s[1:], markup), nil
			}
			return strResult(pad+s, markup), nil
		}
	case "center", "ljust", "rjust":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("width", reqd), p("fillchar", " "))
			if err != nil {
				return nil, err
			}
			w, err := argInt(name, a[0])
			if err != nil {
				return nil, err
			}
			fc, err := argStr(name, a[1])
			if err != nil {
				return nil, err
			}
			if utf8.RuneCountInString(fc) != 1 {
				return nil, typeErr("The fill character must be exactly one character long")
			}
			r, err := e.pad(s, w, fc, name)
			if err != nil {
				return nil, err
			}
			return strResult(r, markup), nil
		}
	case "partition", "rpartition":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("sep", reqd))
			if err != nil {
				return nil, err
			}
			sep, err := argStr(name, a[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, valueErr("empty separator")
			}
			var i int
			if name == "partition" {
				i = strings.Index(s, sep)
			} else {
				i = strings.LastIndex(s, sep)
			}
			var parts [3]string
			switch {
			case i >= 0:
				parts = [3]string{s[:i], sep, s[i+len(sep):]}
			case name == "partition":
				parts = [3]string{s, "", ""}
			default:
				parts = [3]string{"", "", s}
			}
			return &List{Items: []Value{strResult(parts[0], markup), strResult(parts[1], markup), strResult(parts[2], markup)}, Tuple: true}, nil
		}
	case "removeprefix", "removesuffix":
		fn = func(e *evaluator, args []Value, kw *kwargs) (Value, error) {
			a, err := bind(name, args, kw, p("affix", reqd))
			if err != nil {
				return nil, err
			}
			af, err := argStr(name, a[0])
			if err != nil {
				return nil, err
			}
			if name == "removeprefix" {
				return strResult(strings.TrimPrefix(s, af), markup), nil
			}
			return strResult(strings.TrimSuffix(s, af), markup), nil
		}
	default:
		return nil, false
	}
	return bound(name, fn), true
}

func strPredicate(name, s string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "islower", "isupper":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				if name == "islower" {
					return false
				}
				if unicode.IsTitle(r) {
					return false
				}
				cased = true
			} else if unicode.IsLower(r) {
				if name == "isupper" {
					return false
				}
				cased = true
			}
		}
		return cased
	case "istitle":
		prevCased, cased := false, false
		for _, r := range s {
			switch {
			case unicode.IsUpper(r) || unicode.IsTitle(r):
				if prevCased {
					return false
				}
				prevCased, cased = true, true
			case unicode.IsLower(r):
				if !prevCased {
					return false
				}
				prevCased, cased = true, true
			default:
				prevCased = false
			}
		}
		return cased
	}
	for _, r := range s {
		var ok bool
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r) || unicode.Is(unicode.No, r) && r >= 0xb2 && r <= 0xb9
		case "isdecimal":
			ok = unicode.Is(unicode.Nd, r)
		case "isnumeric":
			ok = unicode.IsNumber(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		case "isspace":
			ok = isPySpace(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

func splitN(maxsplit int64) int {
	if maxsplit < 0 {
		return -1
	}
	return int(maxsplit) + 1
}

func rsplitN(s, sep string, maxsplit int) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	var parts []string
	for maxsplit > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		parts = append(parts, s[i+len(sep):])
		s = s[:i]
		maxsplit--
	}
	parts = append(parts, s)
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return parts
}

// pySplitWhitespace implements str.split()/rsplit() without a separator.
func pySplitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.FieldsFunc(s, isPySpace)
	}
	if fromRight {
		var parts []string
		rs := []rune(s)
		end := len(rs)
		for maxsplit > 0 {
			for end > 0 && isPySpace(rs[end-1]) {
				end--
			}
			if end == 0 {
				break
			}
			start := end
			for start > 0 && !isPySpace(rs[start-1]) {
				start--
			}
			if start == 0 {
				parts = append(parts, string(rs[:end]))
				end = 0
				break
			}
			parts = append(parts, string(rs[start:end]))
			end = start
			maxsplit--
		}
		for end > 0 && isPySpace(rs[end-1]) {
			end--
		}
		if end > 0 {
			parts = append(parts, string(rs[:end]))
		}
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		return parts
	}
	var parts []string
	rs := []rune(s)
	i := 0
	for maxsplit > 0 {
		for i < len(rs) && isPySpace(rs[i]) {
			i++
		}
		if i == len(rs) {
			break
		}
		j := i
		for j < len(rs) && !isPySpace(rs[j]) {
			j++
		}
		if j == len(rs) {
			parts = append(parts, string(rs[i:]))
			i = j
			break
		}
		parts = append(parts, string(rs[i:j]))
		i = j
		maxsplit--
	}
	for i < len(rs) && isPySpace(rs[i]) {
		i++
	}
	if i < len(rs) {
		parts = append(parts, string(rs[i:]))
	}
	return parts
}

// pySplitlines implements str.splitlines.
func pySplitlines(s string, keepends bool) []string {
	var out []string
	rs := []rune(s)
	start := 0
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		isBreak := false
		width := 1
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			isBreak = true
		case '\r':
			isBreak = true
			if i+1 < len(rs) && rs[i+1] == '\n' {
				width = 2
			}
		}
		if !isBreak {
			continue
		}
		end := i
		if keepends {
			end = i + width
		}
		out = append(out, string(rs[start:end]))
		i += width - 1
		start = i + 1
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

// pyStrip implements str.strip/lstrip/rstrip with optional chars.
func pyStrip(s string, chars Value, left, right bool) (string, error) {
	pred := isPySpace
	if !isNone(chars) {
		cs, ok := asString(chars)
		if !ok {
			if u, isU := chars.(*Undefined); isU {
				return "", u.err()
			}
			return "", typeErr("strip arg must be None or str")
		}
		pred = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, pred)
	}
	if right {
		s = strings.TrimRightFunc(s, pred)
	}
	return s, nil
}

func (e *evaluator) pyReplace(s, old, nw string, count int64) (string, error) {
	n := int(count)
	if count < 0 || count > int64(len(s)+1) {
		n = -1
	}
	occurrences := strings.Count(s, old)
	if n >= 0 && n < occurrences {
		occurrences = n
	}
	if err := e.chargeBytes(len(s) + occurrences*(len(nw)-len(old))); err != nil {
		return "", err
	}
	return strings.Replace(s, old, nw, n), nil
}

func (e *evaluator) pad(s string, width int64, fill, mode string) (string, error) {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s, nil
	}
	if err := e.chargeBytes(int(width) * len(fill)); err != nil {
		return "", err
	}
	total := int(width - n)
	var left int
	switch mode {
	case "ljust":
		left = 0
	case "rjust":
		left = total
	default: // center, like CPython: extra space goes right unless odd width
		left = total/2 + (total & int(width) & 1)
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, total-left), nil
}

// subRange returns s[start:end] with the index rules of str.startswith /
// str.endswith (code points; negative indices count from the end; ok is
// false when the range is empty because start lies beyond end or the
// string).
func subRange(s string, start, end Value) (sub string, ok bool, err error) {
	if isNone(start) && isNone(end) {
		return s, true, nil
	}
	rs := []rune(s)
	n := int64(len(rs))
	lo, hi := int64(0), n
	if !isNone(start) {
		v, isInt := asInt(start)
		if !isInt {
			return "", false, typeErr("slice indices must be integers or None")
		}
		lo = v
		if lo < 0 {
			lo = max(lo+n, 0)
		}
	}
	if !isNone(end) {
		v, isInt := asInt(end)
		if !isInt {
			return "", false, typeErr("slice indices must be integers or None")
		}
		hi = v
		if hi < 0 {
			hi = max(hi+n, 0)
		}
		hi = min(hi, n)
	}
	if lo > hi {
		return "", false, nil
	}
	return string(rs[lo:hi]), true, nil
}

func runeRange(n int, start, end Value) (int, int, error) {
	conv := func(v Value, def int) (int, error) {
		if isNone(v) {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, typeErr("slice indices must be integers or None")
		}
		if i < 0 {
			i += int64(n)
			if i < 0 {
				i = 0
			}
		}
		if i > int64(n) {
			i = int64(n)
		}
		return int(i), nil
	}
	lo, err := conv(start, 0)
	if err != nil {
		return 0, 0, err
	}
	hi, err := conv(end, n)
	return lo, hi, err
}

func pyUpper(s string) string { return cases.Upper(language.Und).String(s) }
func pyLower(s string) string { return cases.Lower(language.Und).String(s) }

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle implements str.title().
func pyTitle(s string) string {
	var sb strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			sb.WriteString(pyLower(string(r)))
		} else {
			sb.WriteString(toTitle(r))
		}
		prevCased = isCased(r)
	}
	return sb.String()
}

func toTitle(r rune) string {
	switch r {
	case 'ß':
		return "Ss"
	}
	return string(unicode.ToTitle(r))
}

// pyCapitalize implements str.capitalize() (Python >= 3.8).
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return toTitle(r) + pyLower(s[n:])
}
