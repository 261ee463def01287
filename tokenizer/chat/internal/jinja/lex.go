package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokKind identifies a lexical token.
type tokKind int

const (
	tkEOF tokKind = iota
	tkData
	tkBlockBegin
	tkBlockEnd
	tkVarBegin
	tkVarEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
)

func (k tokKind) String() string {
	switch k {
	case tkEOF:
		return "end of template"
	case tkData:
		return "template data"
	case tkBlockBegin:
		return "begin of statement block"
	case tkBlockEnd:
		return "end of statement block"
	case tkVarBegin:
		return "begin of print statement"
	case tkVarEnd:
		return "end of print statement"
	case tkName:
		return "name"
	case tkString:
		return "string"
	case tkInt:
		return "integer"
	case tkFloat:
		return "float"
	case tkOp:
		return "operator"
	}
	return "token"
}

// token is one lexical token. For tkName/tkString/tkOp/tkData the text is
// in s; numbers are in i / f.
type token struct {
	kind tokKind
	s    string
	i    int64
	f    float64
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tkName, tkOp:
		return t.s
	case tkString:
		return "string"
	}
	return t.kind.String()
}

// lexer state mirrors jinja2.lexer.Lexer with trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False and the default delimiters.
type lexer struct {
	src          string
	pos          int
	line         int
	toks         []token
	lineStarting bool
	maxTokens    int
}

// lexError is a syntax error found while tokenizing.
type lexError struct {
	line int
	msg  string
}

func (e *lexError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// normalizeNewlines converts \r\n and \r to \n and drops one trailing
// newline, exactly like jinja2's tokeniter with keep_trailing_newline=False.
func normalizeNewlines(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// tokenize splits a template source into tokens.
func tokenize(src string, maxTokens int) ([]token, error) {
	lx := &lexer{src: normalizeNewlines(src), line: 1, lineStarting: true, maxTokens: maxTokens}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tkEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) emit(t token) error {
	if len(lx.toks) >= lx.maxTokens {
		return &lexError{lx.line, "template too large (token limit)"}
	}
	lx.toks = append(lx.toks, t)
	return nil
}

// isPySpace reports whether r is whitespace for Python's str.isspace() and
// the re module's \s on str patterns.
func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0,
		0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// pyRstrip removes trailing Python whitespace.
func pyRstrip(s string) string {
	return strings.TrimRightFunc(s, isPySpace)
}

// allPySpace reports whether s is non-empty and consists only of whitespace.
func allPySpace(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isPySpace(r) {
			return false
		}
	}
	return true
}

// skipSpace returns the index after a run of whitespace starting at i.
func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isPySpace(r) {
			break
		}
		i += n
	}
	return i
}

// findTagStart finds the next "{{", "{%" or "{#" at or after pos.
func findTagStart(s string, pos int) int {
	for {
		i := strings.IndexByte(s[pos:], '{')
		if i < 0 || pos+i+1 >= len(s) {
			return -1
		}
		c := s[pos+i+1]
		if c == '{' || c == '%' || c == '#' {
			return pos + i
		}
		pos += i + 1
	}
}

// matchRawBegin checks for "{%[-+]? raw [-]?%}" at i and returns the end of
// the match (after the block end and, for "-%}", trailing whitespace).
func matchRawBegin(s string, i int) (end int, sign byte, ok bool) {
	j := i + 2
	if j < len(s) && (s[j] == '-' || s[j] == '+') {
		sign = s[j]
		j++
	}
	j = skipSpace(s, j)
	if !strings.HasPrefix(s[j:], "raw") {
		return 0, 0, false
	}
	j = skipSpace(s, j+3)
	if strings.HasPrefix(s[j:], "-%}") {
		return skipSpace(s, j+3), sign, true
	}
	if strings.HasPrefix(s[j:], "%}") {
		return j + 2, sign, true
	}
	return 0, 0, false
}

func (lx *lexer) run() error {
	s := lx.src
	for lx.pos < len(s) {
		start := findTagStart(s, lx.pos)
		if start < 0 {
			text := s[lx.pos:]
			if err := lx.emit(token{kind: tkData, s: text, line: lx.line}); err != nil {
				return err
			}
			lx.line += strings.Count(text, "\n")
			lx.pos = len(s)
			return nil
		}
		text := s[lx.pos:start]
		kindCh := s[start+1]
		rawEnd, rawSign, isRaw := 0, byte(0), false
		if kindCh == '%' {
			rawEnd, rawSign, isRaw = matchRawBegin(s, start)
		}
		var sign byte
		tagLen := 2
		if isRaw {
			sign = rawSign
		} else if start+2 < len(s) && (s[start+2] == '-' || s[start+2] == '+') {
			sign = s[start+2]
			tagLen = 3
		}
		// Whitespace control on the data before the tag.
		newlinesStripped := 0
		if sign == '-' {
			stripped := pyRstrip(text)
			newlinesStripped = strings.Count(text[len(stripped):], "\n")
			text = stripped
		} else if sign != '+' && kindCh != '{' {
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || lx.lineStarting {
				if allPySpace(text[lpos:]) {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			if err := lx.emit(token{kind: tkData, s: text, line: lx.line}); err != nil {
				return err
			}
		}
		lx.line += strings.Count(text, "\n") + newlinesStripped
		if isRaw {
			if err := lx.lexRaw(rawEnd); err != nil {
				return err
			}
			continue
		}
		lx.pos = start + tagLen
		lx.lineStarting = false
		var err error
		switch kindCh {
		case '#':
			err = lx.lexComment()
		case '%':
			err = lx.lexTag(tkBlockBegin)
		case '{':
			err = lx.lexTag(tkVarBegin)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lexRaw handles {% raw %}...{% endraw %}; pos is just after the raw begin tag.
func (lx *lexer) lexRaw(pos int) error {
	s := lx.src
	lx.line += strings.Count(s[lx.pos:pos], "\n")
	search := pos
	for {
		i := strings.Index(s[search:], "{%")
		if i < 0 {
			return &lexError{lx.line, "Missing end of raw directive"}
		}
		at := search + i
		j := at + 2
		var sign byte
		if j < len(s) && (s[j] == '-' || s[j] == '+') {
			sign = s[j]
			j++
		}
		j = skipSpace(s, j)
		if !strings.HasPrefix(s[j:], "endraw") {
			search = at + 2
			continue
		}
		j = skipSpace(s, j+6)
		end := -1
		switch {
		case strings.HasPrefix(s[j:], "+%}"):
			end = j + 3
		case strings.HasPrefix(s[j:], "-%}"):
			end = skipSpace(s, j+3)
		case strings.HasPrefix(s[j:], "%}"):
			end = j + 2
			if end < len(s) && s[end] == '\n' {
				end++
			}
		}
		if end < 0 {
			search = at + 2
			continue
		}
		text := s[pos:at]
		if sign == '-' {
			text = pyRstrip(text)
		} else if sign != '+' {
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || lx.lineStarting {
				if allPySpace(text[lpos:]) {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			if err := lx.emit(token{kind: tkData, s: text, line: lx.line}); err != nil {
				return err
			}
		}
		lx.line += strings.Count(s[pos:end], "\n")
		lx.lineStarting = s[end-1] == '\n'
		lx.pos = end
		return nil
	}
}

func (lx *lexer) lexComment() error {
	s := lx.src
	for i := lx.pos; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "+#}"):
			lx.finishComment(i + 3)
			return nil
		case strings.HasPrefix(s[i:], "-#}"):
			lx.finishComment(skipSpace(s, i+3))
			return nil
		case strings.HasPrefix(s[i:], "#}"):
			end := i + 2
			if end < len(s) && s[end] == '\n' {
				end++
			}
			lx.finishComment(end)
			return nil
		}
	}
	return &lexError{lx.line, "Missing end of comment tag"}
}

func (lx *lexer) finishComment(end int) {
	lx.line += strings.Count(lx.src[lx.pos:end], "\n")
	lx.lineStarting = lx.src[end-1] == '\n'
	lx.pos = end
}

var operators3 = []string{"//", "**", "==", "!=", ">=", "<="}

const singleOps = "+-/*%~[](){}><=.:|,;"

// lexTag tokenizes the inside of a {{ }} or {% %} tag.
func (lx *lexer) lexTag(begin tokKind) error {
	if err := lx.emit(token{kind: begin, line: lx.line}); err != nil {
		return err
	}
	s := lx.src
	var balance []byte
	for {
		if lx.pos >= len(s) {
			return &lexError{lx.line, "unexpected end of template, expected end of tag"}
		}
		// End of tag (only when brackets are balanced).
		if len(balance) == 0 {
			if end, ok := lx.matchTagEnd(begin); ok {
				lx.line += strings.Count(s[lx.pos:end], "\n")
				lx.lineStarting = s[end-1] == '\n'
				lx.pos = end
				k := tkBlockEnd
				if begin == tkVarBegin {
					k = tkVarEnd
				}
				return lx.emit(token{kind: k, line: lx.line})
			}
		}
		r, n := utf8.DecodeRuneInString(s[lx.pos:])
		switch {
		case isPySpace(r):
			end := skipSpace(s, lx.pos)
			lx.line += strings.Count(s[lx.pos:end], "\n")
			lx.lineStarting = s[end-1] == '\n'
			lx.pos = end
			continue
		case r >= '0' && r <= '9':
			if err := lx.lexNumber(); err != nil {
				return err
			}
		case r == '_' || unicode.IsLetter(r):
			end := lx.pos + n
			for end < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[end:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) && !unicode.Is(unicode.Mn, r2) && !unicode.Is(unicode.Mc, r2) {
					break
				}
				end += n2
			}
			if err := lx.emit(token{kind: tkName, s: s[lx.pos:end], line: lx.line}); err != nil {
				return err
			}
			lx.pos = end
		case r == '\'' || r == '"':
			if err := lx.lexString(byte(r)); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range operators3 {
				if strings.HasPrefix(s[lx.pos:], o) {
					op = o
					break
				}
			}
			if op == "" && r < utf8.RuneSelf && strings.IndexByte(singleOps, byte(r)) >= 0 {
				op = string(rune(r))
			}
			if op == "" {
				return &lexError{lx.line, fmt.Sprintf("unexpected char %q", r)}
			}
			switch op {
			case "(":
				balance = append(balance, ')')
			case "[":
				balance = append(balance, ']')
			case "{":
				balance = append(balance, '}')
			case ")", "]", "}":
				if len(balance) == 0 {
					return &lexError{lx.line, fmt.Sprintf("unexpected '%s'", op)}
				}
				want := balance[len(balance)-1]
				balance = balance[:len(balance)-1]
				if want != op[0] {
					return &lexError{lx.line, fmt.Sprintf("unexpected '%s', expected '%c'", op, want)}
				}
			}
			if err := lx.emit(token{kind: tkOp, s: op, line: lx.line}); err != nil {
				return err
			}
			lx.pos += len(op)
		}
		lx.lineStarting = false
	}
}

// matchTagEnd checks for the closing delimiter of the current tag at pos.
func (lx *lexer) matchTagEnd(begin tokKind) (int, bool) {
	s, p := lx.src, lx.pos
	if begin == tkVarBegin {
		if strings.HasPrefix(s[p:], "-}}") {
			return skipSpace(s, p+3), true
		}
		if strings.HasPrefix(s[p:], "}}") {
			return p + 2, true
		}
		return 0, false
	}
	if strings.HasPrefix(s[p:], "+%}") {
		return p + 3, true
	}
	if strings.HasPrefix(s[p:], "-%}") {
		return skipSpace(s, p+3), true
	}
	if strings.HasPrefix(s[p:], "%}") {
		end := p + 2
		if end < len(s) && s[end] == '\n' {
			end++
		}
		return end, true
	}
	return 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanDigits scans (\d+_)*\d+ at i and returns the end, or i if none.
func scanDigits(s string, i int) int {
	j := i
	for {
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			return j
		}
		if k < len(s) && s[k] == '_' && k+1 < len(s) && isDigit(s[k+1]) {
			j = k + 1
			continue
		}
		return k
	}
}

func (lx *lexer) lexNumber() error {
	s, p := lx.src, lx.pos
	// float_re: digits ( (. digits)? e[+-]?digits | . digits ); not preceded by '.'
	if p == 0 || s[p-1] != '.' {
		d := scanDigits(s, p)
		end := -1
		j := d
		if j < len(s) && s[j] == '.' {
			f := scanDigits(s, j+1)
			if f > j+1 {
				end = f
				j = f
			}
		}
		if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
			k := j + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			e := scanDigits(s, k)
			if e > k {
				end = e
			}
		}
		if end > 0 {
			text := strings.ReplaceAll(s[p:end], "_", "")
			f, err := strconv.ParseFloat(text, 64)
			if err != nil && !isRangeErr(err) {
				return &lexError{lx.line, "invalid float literal " + text}
			}
			lx.pos = end
			return lx.emit(token{kind: tkFloat, f: f, line: lx.line})
		}
	}
	// integer_re
	base := 10
	end := p
	if s[p] == '0' && p+1 < len(s) && strings.IndexByte("bBoOxX", s[p+1]) >= 0 {
		switch s[p+1] {
		case 'b', 'B':
			base = 2
		case 'o', 'O':
			base = 8
		default:
			base = 16
		}
		j := p + 2
		for {
			k := j
			if k < len(s) && s[k] == '_' {
				k++
			}
			if k < len(s) && isBaseDigit(s[k], base) {
				j = k + 1
				continue
			}
			break
		}
		if j == p+2 {
			// "0" followed by a letter: just the zero.
			end = p + 1
			base = 10
		} else {
			end = j
		}
	} else if s[p] == '0' {
		j := p + 1
		for {
			k := j
			if k < len(s) && s[k] == '_' {
				k++
			}
			if k < len(s) && s[k] == '0' {
				j = k + 1
				continue
			}
			break
		}
		end = j
	} else {
		end = scanDigits(s, p)
	}
	text := strings.ReplaceAll(s[p:end], "_", "")
	if base != 10 {
		text = text[2:]
	}
	v, err := strconv.ParseInt(text, base, 64)
	if err != nil {
		return &lexError{lx.line, "integer literal out of range: " + s[p:end]}
	}
	lx.pos = end
	return lx.emit(token{kind: tkInt, i: v, line: lx.line})
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func isBaseDigit(c byte, base int) bool {
	switch base {
	case 2:
		return c == '0' || c == '1'
	case 8:
		return c >= '0' && c <= '7'
	}
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (lx *lexer) lexString(q byte) error {
	s := lx.src
	i := lx.pos + 1
	for i < len(s) {
		c := s[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == q {
			raw := s[lx.pos+1 : i]
			val, err := pyUnescape(raw)
			if err != nil {
				return &lexError{lx.line, err.Error()}
			}
			if err := lx.emit(token{kind: tkString, s: val, line: lx.line}); err != nil {
				return err
			}
			lx.line += strings.Count(s[lx.pos:i+1], "\n")
			lx.pos = i + 1
			return nil
		}
		i++
	}
	return &lexError{lx.line, fmt.Sprintf("unexpected char %q", rune(q))}
}

// pyUnescape decodes a string literal body the way jinja2 does:
// value.encode("ascii", "backslashreplace").decode("unicode-escape").
func pyUnescape(raw string) (string, error) {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, nil
	}
	// backslashreplace non-ASCII characters first so that the decoding step
	// sees exactly what Python sees.
	var asc strings.Builder
	for _, r := range raw {
		switch {
		case r < 0x80:
			asc.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&asc, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&asc, `\u%04x`, r)
		default:
			fmt.Fprintf(&asc, `\U%08x`, r)
		}
	}
	a := asc.String()
	var out strings.Builder
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c != '\\' {
			out.WriteByte(c)
			continue
		}
		if i+1 >= len(a) {
			return "", fmt.Errorf("\\ at end of string")
		}
		i++
		c = a[i]
		switch c {
		case '\n':
		case '\\', '\'', '"':
			out.WriteByte(c)
		case 'a':
			out.WriteByte(7)
		case 'b':
			out.WriteByte(8)
		case 'f':
			out.WriteByte(12)
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'v':
			out.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(a) && a[i+1] >= '0' && a[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(a[i]-'0')
			}
			out.WriteRune(rune(v))
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+n > len(a) {
				return "", fmt.Errorf("truncated \\%cXX escape", c)
			}
			v, err := strconv.ParseUint(a[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", fmt.Errorf("truncated \\%cXX escape", c)
			}
			if v > unicode.MaxRune {
				return "", fmt.Errorf("illegal Unicode character")
			}
			out.WriteRune(rune(v))
			i += n
		case 'N':
			return "", fmt.Errorf("\\N{...} escapes are not supported")
		default:
			out.WriteByte('\\')
			out.WriteByte(c)
		}
	}
	return out.String(), nil
}
