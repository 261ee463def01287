package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

func isPyPrintable(r rune) bool { return unicode.IsPrint(r) }

// fTojson is transformers' tojson override:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
func fTojson(e *evaluator, v Value, args []Value, kw *kwargs) (Value, error) {
	a, err := bind("tojson", args, kw, p("ensure_ascii", false), p("indent", None), p("separators", None), p("sort_keys", false))
	if err != nil {
		return nil, err
	}
	enc := &jsonEncoder{e: e, ensureASCII: truthy(a[0]), sortKeys: truthy(a[3])}
	switch ind := a[1].(type) {
	case NoneType:
	case string:
		enc.indent, enc.useIndent = ind, true
	case Markup:
		enc.indent, enc.useIndent = string(ind), true
	default:
		n, err := argInt("tojson", ind)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if err := e.chargeBytes(int(n)); err != nil {
				return nil, err
			}
			enc.indent = strings.Repeat(" ", int(n))
		}
		enc.useIndent = true
	}
	enc.itemSep, enc.keySep = ", ", ": "
	if enc.useIndent {
		enc.itemSep = ","
	}
	if !isNone(a[2]) {
		seps, err := e.iterate(a[2])
		if err != nil {
			return nil, err
		}
		if len(seps) != 2 {
			return nil, valueErr("separators must be a (item_separator, key_separator) pair")
		}
		if enc.itemSep, err = argStr("tojson", seps[0]); err != nil {
			return nil, err
		}
		if enc.keySep, err = argStr("tojson", seps[1]); err != nil {
			return nil, err
		}
	}
	if err := enc.encode(v, 0); err != nil {
		return nil, err
	}
	if err := e.chargeBytes(enc.sb.Len()); err != nil {
		return nil, err
	}
	return enc.sb.String(), nil
}

type jsonEncoder struct {
	e               *evaluator
	sb              strings.Builder
	ensureASCII     bool
	sortKeys        bool
	useIndent       bool
	indent          string
	itemSep, keySep string
}

func (j *jsonEncoder) newline(level int) error {
	if !j.useIndent {
		return nil
	}
	j.sb.WriteByte('\n')
	for i := 0; i < level; i++ {
		j.sb.WriteString(j.indent)
	}
	return nil
}

func (j *jsonEncoder) encode(v Value, level int) error {
	if level > maxValueDepth {
		return errTooDeep
	}
	if j.sb.Len() > j.e.maxOutput {
		return &LimitError{Msg: fmt.Sprintf("template value exceeds the output limit of %d bytes", j.e.maxOutput)}
	}
	switch x := v.(type) {
	case NoneType:
		j.sb.WriteString("null")
	case bool:
		if x {
			j.sb.WriteString("true")
		} else {
			j.sb.WriteString("false")
		}
	case int64:
		j.sb.WriteString(strconv.FormatInt(x, 10))
	case float64:
		j.sb.WriteString(jsonFloat(x))
	case string:
		j.writeString(x)
	case Markup:
		j.writeString(string(x))
	case *List:
		if len(x.Items) == 0 {
			j.sb.WriteString("[]")
			return nil
		}
		j.sb.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				j.sb.WriteString(j.itemSep)
			}
			if err := j.newline(level + 1); err != nil {
				return err
			}
			if err := j.encode(it, level+1); err != nil {
				return err
			}
		}
		if err := j.newline(level); err != nil {
			return err
		}
		j.sb.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			j.sb.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if j.sortKeys {
			var sortErr error
			sort.SliceStable(order, func(a, b int) bool {
				c, err := compareValues(x.keys[order[a]], x.keys[order[b]], 0)
				if err != nil {
					sortErr = err
				}
				return c < 0
			})
			if sortErr != nil {
				return sortErr
			}
		}
		j.sb.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				j.sb.WriteString(j.itemSep)
			}
			if err := j.newline(level + 1); err != nil {
				return err
			}
			var ks string
			switch k := x.keys[i].(type) {
			case string:
				ks = k
			case Markup:
				ks = string(k)
			case bool:
				ks = map[bool]string{true: "true", false: "false"}[k]
			case int64:
				ks = strconv.FormatInt(k, 10)
			case float64:
				ks = jsonFloat(k)
			case NoneType:
				ks = "null"
			default:
				return typeErr(fmt.Sprintf("keys must be str, int, float, bool or None, not %s", typeName(k)))
			}
			j.writeString(ks)
			j.sb.WriteString(j.keySep)
			if err := j.encode(x.vals[i], level+1); err != nil {
				return err
			}
		}
		if err := j.newline(level); err != nil {
			return err
		}
		j.sb.WriteByte('}')
	default:
		return typeErr(fmt.Sprintf("Object of type %s is not JSON serializable", typeName(v)))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return pyFloatRepr(f)
}

const hexDigits = "0123456789abcdef"

func (j *jsonEncoder) writeString(s string) {
	sb := &j.sb
	sb.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				sb.WriteString(`\"`)
			case c == '\\':
				sb.WriteString(`\\`)
			case c == '\n':
				sb.WriteString(`\n`)
			case c == '\r':
				sb.WriteString(`\r`)
			case c == '\t':
				sb.WriteString(`\t`)
			case c == '\b':
				sb.WriteString(`\b`)
			case c == '\f':
				sb.WriteString(`\f`)
			case c < 0x20 || (c == 0x7f && j.ensureASCII):
				sb.WriteString(`\u00`)
				sb.WriteByte(hexDigits[c>>4])
				sb.WriteByte(hexDigits[c&15])
			default:
				sb.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !j.ensureASCII {
			sb.WriteString(s[i : i+n])
		} else if r < 0x10000 {
			fmt.Fprintf(sb, `\u%04x`, r)
		} else {
			r -= 0x10000
			fmt.Fprintf(sb, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
		i += n
	}
	sb.WriteByte('"')
}

// percentFormat implements Python's "fmt % values".
func (e *evaluator) percentFormat(f string, values Value) (string, error) {
	var args []Value
	var mapping *Dict
	switch x := values.(type) {
	case *List:
		if x.Tuple {
			args = x.Items
		} else {
			args = []Value{x}
		}
	case *Dict:
		mapping = x
		args = []Value{x}
	default:
		args = []Value{values}
	}
	argi := 0
	usedMapping := false
	next := func() (Value, error) {
		if argi >= len(args) {
			return nil, typeErr("not enough arguments for format string")
		}
		argi++
		return args[argi-1], nil
	}
	var sb strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		i++
		if i >= len(f) {
			return "", valueErr("incomplete format")
		}
		var key *string
		if f[i] == '(' {
			depth, j := 1, i+1
			for j < len(f) && depth > 0 {
				if f[j] == '(' {
					depth++
				} else if f[j] == ')' {
					depth--
				}
				j++
			}
			if depth > 0 {
				return "", valueErr("incomplete format key")
			}
			k := f[i+1 : j-1]
			key = &k
			i = j
		}
		var flags string
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			flags += string(f[i])
			i++
		}
		width := -1
		if i < len(f) && f[i] == '*' {
			v, err := next()
			if err != nil {
				return "", err
			}
			w, err := argInt("format", v)
			if err != nil {
				return "", err
			}
			if w < 0 {
				flags += "-"
				w = -w
			}
			width = int(w)
			i++
		} else {
			st := i
			for i < len(f) && isDigit(f[i]) {
				i++
			}
			if i > st {
				width, _ = strconv.Atoi(f[st:i])
			}
		}
		prec := -1
		if i < len(f) && f[i] == '.' {
			i++
			if i < len(f) && f[i] == '*' {
				v, err := next()
				if err != nil {
					return "", err
				}
				pv, err := argInt("format", v)
				if err != nil {
					return "", err
				}
				prec = int(pv)
				i++
			} else {
				st := i
				for i < len(f) && isDigit(f[i]) {
					i++
				}
				prec, _ = strconv.Atoi(f[st:i])
			}
		}
		for i < len(f) && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L') {
			i++
		}
		if i >= len(f) {
			return "", valueErr("incomplete format")
		}
		conv := f[i]
		if conv == '%' {
			sb.WriteByte('%')
			continue
		}
		var arg Value
		if key != nil {
			if mapping == nil {
				return "", typeErr("format requires a mapping")
			}
			usedMapping = true
			v, ok, err := mapping.Get(*key)
			if err != nil {
				return "", err
			}
			if !ok {
				return "", &RuntimeError{"KeyError", pyStrRepr(*key)}
			}
			arg = v
		} else {
			var err error
			if arg, err = next(); err != nil {
				return "", err
			}
		}
		if width > 1<<20 || prec > 1<<20 {
			return "", valueErr("format width too large")
		}
		s, err := formatOne(conv, flags, prec, arg)
		if err != nil {
			return "", err
		}
		s = padField(s, width, flags, conv)
		if err := e.chargeAppend(sb.Len(), len(s)); err != nil {
			return "", err
		}
		sb.WriteString(s)
	}
	if mapping == nil && argi < len(args) {
		return "", typeErr("not all arguments converted during string formatting")
	}
	_ = usedMapping
	return sb.String(), nil
}

func padField(s string, width int, flags string, conv byte) string {
	n := utf8.RuneCountInString(s)
	if width <= n {
		return s
	}
	pad := width - n
	switch {
	case strings.Contains(flags, "-"):
		return s + strings.Repeat(" ", pad)
	case strings.Contains(flags, "0") && strings.IndexByte("diueEfFgGxXo", conv) >= 0:
		sign := ""
		if s != "" && (s[0] == '-' || s[0] == '+' || s[0] == ' ') {
			sign, s = s[:1], s[1:]
		}
		prefix := ""
		if len(s) > 1 && s[0] == '0' && strings.IndexByte("xXo", s[1]) >= 0 {
			prefix, s = s[:2], s[2:]
		}
		return sign + prefix + strings.Repeat("0", pad) + s
	}
	return strings.Repeat(" ", pad) + s
}

func formatOne(conv byte, flags string, prec int, arg Value) (string, error) {
	if u, ok := arg.(*Undefined); ok && conv != 's' {
		return "", u.err()
	}
	signed := func(s string, neg bool) string {
		switch {
		case neg:
			return "-" + s
		case strings.Contains(flags, "+"):
			return "+" + s
		case strings.Contains(flags, " "):
			return " " + s
		}
		return s
	}
	switch conv {
	case 's':
		s, err := strValue(arg)
		if err != nil {
			return "", err
		}
		if prec >= 0 {
			rs := []rune(s)
			if prec < len(rs) {
				s = string(rs[:prec])
			}
		}
		return s, nil
	case 'r', 'a':
		s, err := reprValue(arg, 0)
		if err != nil {
			return "", err
		}
		if prec >= 0 {
			rs := []rune(s)
			if prec < len(rs) {
				s = string(rs[:prec])
			}
		}
		return s, nil
	case 'd', 'i', 'u', 'x', 'X', 'o', 'c':
		var i int64
		switch x := arg.(type) {
		case bool, int64:
			i, _ = asInt(x)
		case float64:
			if conv == 'c' || conv == 'x' || conv == 'X' || conv == 'o' {
				return "", typeErr(fmt.Sprintf("%%%c format: an integer is required, not float", conv))
			}
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "", valueErr("cannot convert float to integer")
			}
			i = int64(x)
		default:
			if s, ok := asString(arg); ok && conv == 'c' && utf8.RuneCountInString(s) == 1 {
				return s, nil
			}
			return "", typeErr(fmt.Sprintf("%%%c format: a real number is required, not %s", conv, typeName(arg)))
		}
		if conv == 'c' {
			return string(rune(i)), nil
		}
		neg := i < 0
		u := absU(i)
		var digits string
		switch conv {
		case 'x':
			digits = strconv.FormatUint(u, 16)
			if strings.Contains(flags, "#") {
				digits = "0x" + digits
			}
		case 'X':
			digits = strings.ToUpper(strconv.FormatUint(u, 16))
			if strings.Contains(flags, "#") {
				digits = "0X" + digits
			}
		case 'o':
			digits = strconv.FormatUint(u, 8)
			if strings.Contains(flags, "#") {
				digits = "0o" + digits
			}
		default:
			digits = strconv.FormatUint(u, 10)
		}
		if prec > len(digits) {
			digits = strings.Repeat("0", prec-len(digits)) + digits
		}
		return signed(digits, neg), nil
	case 'f', 'F', 'e', 'E', 'g', 'G':
		f, ok := asFloat(arg)
		if !ok {
			if s, isStr := asString(arg); isStr {
				_ = s
			}
			return "", typeErr(fmt.Sprintf("must be real number, not %s", typeName(arg)))
		}
		return signed(formatFloatC(math.Abs(f), conv, prec, strings.Contains(flags, "#")), math.Signbit(f) && !math.IsNaN(f)), nil
	}
	return "", valueErr(fmt.Sprintf("unsupported format character '%c'", conv))
}

// formatFloatC formats a non-negative float like C printf / Python %-format.
func formatFloatC(f float64, conv byte, prec int, alt bool) string {
	if prec < 0 {
		prec = 6
	}
	upper := conv == 'F' || conv == 'E' || conv == 'G'
	if math.IsInf(f, 0) {
		if upper {
			return "INF"
		}
		return "inf"
	}
	if math.IsNaN(f) {
		if upper {
			return "NAN"
		}
		return "nan"
	}
	var s string
	switch conv {
	case 'f', 'F':
		s = strconv.FormatFloat(f, 'f', prec, 64)
	case 'e', 'E':
		s = strconv.FormatFloat(f, 'e', prec, 64)
	case 'g', 'G':
		if prec == 0 {
			prec = 1
		}
		exp := 0
		if f != 0 {
			es := strconv.FormatFloat(f, 'e', prec-1, 64)
			exp, _ = strconv.Atoi(es[strings.IndexByte(es, 'e')+1:])
		}
		if exp < -4 || exp >= prec {
			s = strconv.FormatFloat(f, 'e', prec-1, 64)
			if !alt {
				mant, ex, _ := strings.Cut(s, "e")
				if strings.Contains(mant, ".") {
					mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
				}
				s = mant + "e" + ex
			}
		} else {
			s = strconv.FormatFloat(f, 'f', prec-1-exp, 64)
			if !alt && strings.Contains(s, ".") {
				s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
			}
		}
	}
	if upper {
		s = strings.ToUpper(s)
	}
	return s
}

// strFormat implements str.format with the standard format-spec
// mini-language for str, int and float.
func (e *evaluator) strFormat(f string, args []Value, kw *kwargs) (string, error) {
	var sb strings.Builder
	auto := 0
	manual := false
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '}' {
			if i+1 < len(f) && f[i+1] == '}' {
				sb.WriteByte('}')
				i++
				continue
			}
			return "", valueErr("Single '}' encountered in format string")
		}
		if c != '{' {
			sb.WriteByte(c)
			continue
		}
		if i+1 < len(f) && f[i+1] == '{' {
			sb.WriteByte('{')
			i++
			continue
		}
		depth, j := 1, i+1
		for j < len(f) && depth > 0 {
			if f[j] == '{' {
				depth++
			} else if f[j] == '}' {
				depth--
			}
			j++
		}
		if depth > 0 {
			return "", valueErr("expected '}' before end of string")
		}
		field := f[i+1 : j-1]
		i = j - 1
		spec := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field, spec = field[:k], field[k+1:]
		}
		conv := byte(0)
		if k := strings.IndexByte(field, '!'); k >= 0 {
			if k+2 != len(field) {
				return "", valueErr("expected ':' after conversion specifier")
			}
			conv = field[k+1]
			field = field[:k]
		}
		// field name: first part, then .attr / [key] chain
		first := field
		rest := ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			first, rest = field[:k], field[k:]
		}
		var v Value
		if first == "" {
			if manual {
				return "", valueErr("cannot switch from manual field specification to automatic field numbering")
			}
			if auto >= len(args) {
				return "", &RuntimeError{"IndexError", "Replacement index " + strconv.Itoa(auto) + " out of range for positional args tuple"}
			}
			v = args[auto]
			auto++
		} else if n, err := strconv.Atoi(first); err == nil {
			manual = true
			if n < 0 || n >= len(args) {
				return "", &RuntimeError{"IndexError", "Replacement index " + first + " out of range for positional args tuple"}
			}
			v = args[n]
		} else {
			val, ok := kw.get(first)
			if !ok {
				return "", &RuntimeError{"KeyError", pyStrRepr(first)}
			}
			v = val
		}
		for rest != "" {
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[")
				name := rest[1:]
				if k >= 0 {
					name, rest = rest[1:1+k], rest[1+k:]
				} else {
					rest = ""
				}
				var err error
				if v, err = e.getAttr(v, name); err != nil {
					return "", err
				}
				if u, ok := v.(*Undefined); ok {
					return "", u.err()
				}
			} else {
				k := strings.IndexByte(rest, ']')
				if k < 0 {
					return "", valueErr("Missing ']' in format string")
				}
				key := rest[1:k]
				rest = rest[k+1:]
				var kv Value = key
				if n, err := strconv.ParseInt(key, 10, 64); err == nil {
					kv = n
				}
				var err error
				if v, err = e.getItem(v, kv); err != nil {
					return "", err
				}
			}
		}
		switch conv {
		case 'r', 'a':
			s, err := reprValue(v, 0)
			if err != nil {
				return "", err
			}
			v = s
		case 's':
			s, err := strValue(v)
			if err != nil {
				return "", err
			}
			v = s
		case 0:
		default:
			return "", valueErr(fmt.Sprintf("Unknown conversion specifier %c", conv))
		}
		if strings.Contains(spec, "{") {
			expanded, err := e.strFormat(spec, args[min(auto, len(args)):], kw)
			if err != nil {
				return "", err
			}
			spec = expanded
		}
		s, err := formatSpec(v, spec)
		if err != nil {
			return "", err
		}
		if err := e.chargeAppend(sb.Len(), len(s)); err != nil {
			return "", err
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

// formatSpec implements format(value, spec) for common types.
func formatSpec(v Value, spec string) (string, error) {
	if spec == "" {
		return strValue(v)
	}
	rs := []rune(spec)
	i := 0
	fill, align := ' ', rune(0)
	if len(rs) >= 2 && strings.ContainsRune("<>=^", rs[1]) {
		fill, align = rs[0], rs[1]
		i = 2
	} else if len(rs) >= 1 && strings.ContainsRune("<>=^", rs[0]) {
		align = rs[0]
		i = 1
	}
	sign := rune(0)
	if i < len(rs) && strings.ContainsRune("+- ", rs[i]) {
		sign = rs[i]
		i++
	}
	alt := false
	if i < len(rs) && rs[i] == '#' {
		alt = true
		i++
	}
	if i < len(rs) && rs[i] == '0' && align == 0 {
		fill, align = '0', '='
		i++
	}
	width := 0
	for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
		width = width*10 + int(rs[i]-'0')
		if width > 1<<20 {
			return "", valueErr("format width too large")
		}
		i++
	}
	grouping := rune(0)
	if i < len(rs) && (rs[i] == ',' || rs[i] == '_') {
		grouping = rs[i]
		i++
	}
	prec := -1
	if i < len(rs) && rs[i] == '.' {
		i++
		prec = 0
		for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
			prec = prec*10 + int(rs[i]-'0')
			if prec > 1<<10 {
				return "", valueErr("precision too large")
			}
			i++
		}
	}
	typ := rune(0)
	if i < len(rs) {
		typ = rs[i]
		i++
	}
	if i != len(rs) {
		return "", valueErr("Invalid format specifier")
	}
	var body string
	neg := false
	switch x := v.(type) {
	case string, Markup:
		if typ != 0 && typ != 's' {
			return "", valueErr(fmt.Sprintf("Unknown format code '%c' for object of type 'str'", typ))
		}
		body, _ = asString(x)
		if prec >= 0 {
			r := []rune(body)
			if prec < len(r) {
				body = string(r[:prec])
			}
		}
		if align == 0 {
			align = '<'
		}
	case bool, int64, float64:
		isFloat := false
		if _, ok := x.(float64); ok {
			isFloat = true
		}
		if typ == 0 && isFloat {
			f := x.(float64)
			neg = math.Signbit(f)
			if prec >= 0 {
				body = formatFloatC(math.Abs(f), 'g', prec, false)
				if !strings.ContainsAny(body, ".en") {
					// Python's general format without type keeps ".0" only when
					// no precision is given; with precision it behaves like 'g'.
				}
			} else {
				body = pyFloatRepr(math.Abs(f))
			}
		} else if typ == 0 || strings.ContainsRune("dbxXoc", typ) {
			if isFloat {
				return "", valueErr(fmt.Sprintf("Unknown format code '%c' for object of type 'float'", typ))
			}
			if _, isBool := x.(bool); isBool && typ == 0 {
				s, _ := strValue(x)
				body = s
				break
			}
			n, _ := asInt(x)
			neg = n < 0
			u := absU(n)
			switch typ {
			case 'b':
				body = strconv.FormatUint(u, 2)
			case 'x':
				body = strconv.FormatUint(u, 16)
			case 'X':
				body = strings.ToUpper(strconv.FormatUint(u, 16))
			case 'o':
				body = strconv.FormatUint(u, 8)
			case 'c':
				body = string(rune(n))
				neg = false
			default:
				body = strconv.FormatUint(u, 10)
			}
			if alt && typ != 0 && typ != 'd' && typ != 'c' {
				body = "0" + string(typ) + body
			}
		} else if strings.ContainsRune("eEfFgG%", typ) {
			f, _ := asFloat(x)
			neg = math.Signbit(f) && !math.IsNaN(f)
			if typ == '%' {
				body = formatFloatC(math.Abs(f)*100, 'f', prec, alt) + "%"
			} else {
				body = formatFloatC(math.Abs(f), byte(typ), prec, alt)
			}
		} else {
			return "", valueErr(fmt.Sprintf("Unknown format code '%c' for object of type '%s'", typ, typeName(v)))
		}
		if grouping != 0 {
			intPart, frac := body, ""
			if k := strings.IndexAny(body, ".eE%"); k >= 0 {
				intPart, frac = body[:k], body[k:]
			}
			if len(intPart) > 3 && strings.Trim(intPart, "0123456789") == "" {
				var g strings.Builder
				for k, ch := range intPart {
					if k > 0 && (len(intPart)-k)%3 == 0 {
						g.WriteRune(grouping)
					}
					g.WriteRune(ch)
				}
				intPart = g.String()
			}
			body = intPart + frac
		}
		switch {
		case neg:
			body = "-" + body
		case sign == '+':
			body = "+" + body
		case sign == ' ':
			body = " " + body
		}
		if align == 0 {
			align = '>'
		}
	default:
		return "", typeErr(fmt.Sprintf("unsupported format string passed to %s.__format__", typeName(v)))
	}
	n := utf8.RuneCountInString(body)
	if width <= n {
		return body, nil
	}
	padN := width - n
	f := string(fill)
	switch align {
	case '<':
		return body + strings.Repeat(f, padN), nil
	case '^':
		l := padN / 2
		return strings.Repeat(f, l) + body + strings.Repeat(f, padN-l), nil
	case '=':
		if body != "" && strings.ContainsRune("+- ", rune(body[0])) {
			return body[:1] + strings.Repeat(f, padN) + body[1:], nil
		}
		return strings.Repeat(f, padN) + body, nil
	}
	return strings.Repeat(f, padN) + body, nil
}

// strftime implements the common subset of C strftime used by chat
// templates (glibc semantics, C locale), including glibc's "%-d" padding
// suppression.
func strftime(t time.Time, f string) string {
	var sb strings.Builder
	days := []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months := []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			sb.WriteByte(f[i])
			continue
		}
		i++
		noPad := false
		if f[i] == '-' && i+1 < len(f) {
			noPad = true
			i++
		}
		num := func(v, width int) string {
			s := strconv.Itoa(v)
			if noPad {
				return s
			}
			for len(s) < width {
				s = "0" + s
			}
			return s
		}
		switch f[i] {
		case 'a':
			sb.WriteString(days[t.Weekday()][:3])
		case 'A':
			sb.WriteString(days[t.Weekday()])
		case 'b', 'h':
			sb.WriteString(months[t.Month()-1][:3])
		case 'B':
			sb.WriteString(months[t.Month()-1])
		case 'd':
			sb.WriteString(num(t.Day(), 2))
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 && !noPad {
				s = " " + s
			}
			sb.WriteString(s)
		case 'm':
			sb.WriteString(num(int(t.Month()), 2))
		case 'y':
			sb.WriteString(num(t.Year()%100, 2))
		case 'Y':
			sb.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			sb.WriteString(num(t.Hour(), 2))
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			sb.WriteString(num(h, 2))
		case 'p':
			if t.Hour() < 12 {
				sb.WriteString("AM")
			} else {
				sb.WriteString("PM")
			}
		case 'M':
			sb.WriteString(num(t.Minute(), 2))
		case 'S':
			sb.WriteString(num(t.Second(), 2))
		case 'f':
			sb.WriteString(num(t.Nanosecond()/1000, 6))
		case 'j':
			sb.WriteString(num(t.YearDay(), 3))
		case 'w':
			sb.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			sb.WriteString(strconv.Itoa(wd))
		case 'z':
			sb.WriteString(t.Format("-0700"))
		case 'Z':
			sb.WriteString(t.Format("MST"))
		case 'F':
			sb.WriteString(t.Format("2006-01-02"))
		case 'T':
			sb.WriteString(t.Format("15:04:05"))
		case 'D':
			sb.WriteString(t.Format("01/02/06"))
		case 'R':
			sb.WriteString(t.Format("15:04"))
		case 'c':
			sb.WriteString(fmt.Sprintf("%s %s %2d %s %d", days[t.Weekday()][:3], months[t.Month()-1][:3], t.Day(), t.Format("15:04:05"), t.Year()))
		case 'x':
			sb.WriteString(t.Format("01/02/06"))
		case 'X':
			sb.WriteString(t.Format("15:04:05"))
		case 'n':
			sb.WriteByte('\n')
		case 't':
			sb.WriteByte('\t')
		case '%':
			sb.WriteByte('%')
		default:
			sb.WriteByte('%')
			if noPad {
				sb.WriteByte('-')
			}
			sb.WriteByte(f[i])
		}
	}
	return sb.String()
}
