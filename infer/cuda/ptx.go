package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// ptxEntry is one kernel entry point of a PTX module with its parameter list.
type ptxEntry struct {
	name   string
	params []ptxParam
}

// ptxParam is one .param of an entry: its PTX type (".u64", ".f32", ".b8", ...) and size in bytes.
type ptxParam struct {
	typ  string
	size int
}

// maxPTXParams bounds the parameters accepted per entry (CUDA allows 4 KiB of them; ours use 14).
const maxPTXParams = 512

// parsePTX returns the .entry declarations of a PTX module in order. It reads only the entry
// headers: `[.visible] .entry NAME ( .param TYPE [.ptr ...] [.align N] PNAME[[COUNT]], ... )`.
// It returns an error naming the entry for a malformed header.
func parsePTX(src string) ([]ptxEntry, error) {
	src = stripPTXComments(src)
	var out []ptxEntry
	seen := map[string]bool{}
	for rest := src; ; {
		i := indexToken(rest, ".entry")
		if i < 0 {
			break
		}
		rest = rest[i+len(".entry"):]
		open := strings.IndexByte(rest, '(')
		if open < 0 {
			return nil, fmt.Errorf("ptx: .entry without a parameter list")
		}
		name := strings.TrimSpace(rest[:open])
		if !validIdent(name) {
			return nil, fmt.Errorf("ptx: bad entry name %q", truncate(name, 40))
		}
		closeIdx := strings.IndexByte(rest[open:], ')')
		if closeIdx < 0 {
			return nil, fmt.Errorf("ptx: entry %s: unterminated parameter list", name)
		}
		list := rest[open+1 : open+closeIdx]
		rest = rest[open+closeIdx+1:]
		e := ptxEntry{name: name}
		if strings.TrimSpace(list) != "" {
			for k, decl := range strings.Split(list, ",") {
				if k >= maxPTXParams {
					return nil, fmt.Errorf("ptx: entry %s: more than %d parameters", name, maxPTXParams)
				}
				p, err := parsePTXParam(decl)
				if err != nil {
					return nil, fmt.Errorf("ptx: entry %s, parameter %d: %v", name, k, err)
				}
				e.params = append(e.params, p)
			}
		}
		if seen[name] {
			return nil, fmt.Errorf("ptx: entry %s declared twice", name)
		}
		seen[name] = true
		out = append(out, e)
	}
	return out, nil
}

// parsePTXParam parses one ".param ..." declaration.
func parsePTXParam(decl string) (ptxParam, error) {
	f := strings.Fields(decl)
	if len(f) < 3 || f[0] != ".param" {
		return ptxParam{}, fmt.Errorf("malformed declaration %q", truncate(strings.TrimSpace(decl), 60))
	}
	var p ptxParam
	name := f[len(f)-1]
	for i := 1; i < len(f)-1; i++ {
		switch tok := f[i]; {
		case tok == ".align":
			i++ // the alignment value
		case tok == ".ptr" || tok == ".global" || tok == ".shared" || tok == ".const" || tok == ".local":
		case p.typ == "":
			sz, ok := ptxTypeSize(tok)
			if !ok {
				return ptxParam{}, fmt.Errorf("unknown type %q", truncate(tok, 20))
			}
			p.typ, p.size = tok, sz
		default:
			return ptxParam{}, fmt.Errorf("unexpected token %q", truncate(tok, 20))
		}
	}
	if p.typ == "" {
		return ptxParam{}, fmt.Errorf("no type in %q", truncate(strings.TrimSpace(decl), 60))
	}
	if lb := strings.IndexByte(name, '['); lb >= 0 {
		if !strings.HasSuffix(name, "]") {
			return ptxParam{}, fmt.Errorf("bad array parameter %q", truncate(name, 40))
		}
		n, err := strconv.Atoi(name[lb+1 : len(name)-1])
		if err != nil || n <= 0 || n > 4096 {
			return ptxParam{}, fmt.Errorf("bad array length in %q", truncate(name, 40))
		}
		p.size *= n
		name = name[:lb]
	}
	if !validIdent(name) {
		return ptxParam{}, fmt.Errorf("bad parameter name %q", truncate(name, 40))
	}
	return p, nil
}

// ptxTypeSize returns the size of a PTX fundamental type.
func ptxTypeSize(t string) (int, bool) {
	switch t {
	case ".u8", ".s8", ".b8":
		return 1, true
	case ".u16", ".s16", ".b16", ".f16":
		return 2, true
	case ".u32", ".s32", ".b32", ".f32":
		return 4, true
	case ".u64", ".s64", ".b64", ".f64":
		return 8, true
	}
	return 0, false
}

// compatible reports whether a PTX parameter receives what the host packs for kind k.
func (p ptxParam) compatible(k paramKind) bool {
	switch k {
	case pPtr:
		return p.typ == ".u64" || p.typ == ".b64" || p.typ == ".s64"
	case pI32:
		return p.typ == ".u32" || p.typ == ".s32" || p.typ == ".b32"
	case pF32:
		return p.typ == ".f32" || p.typ == ".b32"
	}
	return false
}

// checkEntry compares a kernel's PTX parameter list with the kinds the host packs.
func checkEntry(e ptxEntry, spec kernelSpec) error {
	if len(e.params) != len(spec.params) {
		return fmt.Errorf("kernel %s: PTX declares %d parameters, the host packs %d", spec.name, len(e.params), len(spec.params))
	}
	for i, p := range e.params {
		if !p.compatible(spec.params[i]) {
			return fmt.Errorf("kernel %s: parameter %d is %s in the PTX, the host packs %s", spec.name, i, p.typ, spec.params[i])
		}
	}
	return nil
}

// checkKernelTable verifies that every kernel of kernelTable exists in its embedded module with the
// parameter layout the host packs.
func checkKernelTable() error {
	entries := map[string]map[string]ptxEntry{}
	for _, m := range modules {
		src, err := ptxSource(m)
		if err != nil {
			return err
		}
		list, err := parsePTX(src)
		if err != nil {
			return fmt.Errorf("cuda: kernels/%s.ptx: %v", m, err)
		}
		entries[m] = map[string]ptxEntry{}
		for _, e := range list {
			entries[m][e.name] = e
		}
	}
	for _, spec := range kernelTable {
		e, ok := entries[spec.module][spec.name]
		if !ok {
			return fmt.Errorf("cuda: kernels/%s.ptx has no entry %s", spec.module, spec.name)
		}
		if err := checkEntry(e, spec); err != nil {
			return fmt.Errorf("cuda: kernels/%s.ptx: %v", spec.module, err)
		}
	}
	return nil
}

// ptxSourceHash returns the source hash recorded in a PTX header line written by scripts/ptx.sh:
// "// tq-source-sha256: <hex>".
func ptxSourceHash(src string) (string, bool) {
	const key = "// tq-source-sha256: "
	for _, line := range strings.SplitN(src, "\n", 8) {
		if h, ok := strings.CutPrefix(strings.TrimSpace(line), key); ok {
			return strings.TrimSpace(h), true
		}
	}
	return "", false
}

// stripPTXComments removes // line comments and /* */ block comments.
func stripPTXComments(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			b.WriteByte(' ')
			i += j + 4
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// indexToken finds tok in s as a whole word (bounded by whitespace or the ends).
func indexToken(s, tok string) int {
	off := 0
	for {
		i := strings.Index(s[off:], tok)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(tok)
		before := i == 0 || isSpace(s[i-1])
		after := end == len(s) || isSpace(s[end])
		if before && after {
			return i
		}
		off = end
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func validIdent(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '$' || c == '%' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
