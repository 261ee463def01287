// Command jinja-compare renders tq's Jinja conformance fixture (testdata/chat/conformance:
// cases.json with the results of Python jinja2 in expected.json) with two Go Jinja libraries,
// github.com/ardanlabs/jinja and github.com/nikolalohinski/gonja/v2, and prints how many cases
// each reproduces. It backs the engine comparison in docs/chat-templates.md; tq's own
// interpreter is checked on the same fixture by TestConformance.
//
// It is a separate module so that the tq module does not depend on gonja. Run it from this
// directory (it needs the Go module proxy once):
//
//	go run . [-v] [-cases ../../testdata/chat/conformance]
//
// Each case renders in a child process with a 10 s time limit and a 2 GiB address-space limit,
// because both libraries can panic, recurse without bound or allocate without limit on some
// templates; such a case counts as a crash. Both libraries render with the environment
// transformers uses (trim_blocks, lstrip_blocks, raise_exception, and strftime_now at the
// fixture's fixed time). A case passes when the output is byte-identical to Python's, or when
// Python raises and the library returns an error (error classes are not compared).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	ardan "github.com/ardanlabs/jinja"
	"github.com/nikolalohinski/gonja/v2"
	gconfig "github.com/nikolalohinski/gonja/v2/config"
	gexec "github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

type testCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
}

type expectation struct {
	Output *string `json:"output"`
	Error  string  `json:"error"`
}

// result is what a child process reports for one case.
type result struct {
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

// fixedNow is render.py's FIXED_NOW.
var fixedNow = time.Date(2025, 7, 4, 9, 5, 3, 0, time.Local)

func main() {
	if len(os.Args) == 5 && os.Args[1] == "-child" {
		child(os.Args[2], os.Args[3], os.Args[4])
		return
	}
	dir := flag.String("cases", filepath.Join("..", "..", "testdata", "chat", "conformance"), "conformance fixture directory")
	verbose := flag.Bool("v", false, "print every failing case")
	flag.Parse()
	var cases []testCase
	mustRead(filepath.Join(*dir, "cases.json"), &cases)
	var expected struct {
		Jinja2  string                 `json:"jinja2"`
		Results map[string]expectation `json:"results"`
	}
	mustRead(filepath.Join(*dir, "expected.json"), &expected)
	fmt.Printf("%d cases, expectations from Python jinja2 %s\n", len(cases), expected.Jinja2)
	for _, engine := range []string{"ardanlabs", "gonja"} {
		var pass, chatPass, chatTotal int
		kinds := map[string]int{}
		for i, c := range cases {
			want := expected.Results[c.Name]
			got, crash := runChild(*dir, engine, i)
			var kind string
			switch {
			case crash != "":
				kind = "crash (" + crash + ")"
			case want.Output != nil && got.Error == "" && got.Output == *want.Output:
			case want.Output == nil && got.Error != "":
			case want.Output == nil:
				kind = "renders where Python raises " + want.Error
			case got.Error != "":
				kind = "error where Python renders"
			default:
				kind = "different output"
			}
			chat := strings.HasPrefix(c.Name, "chat_")
			if chat {
				chatTotal++
			}
			if kind == "" {
				pass++
				if chat {
					chatPass++
				}
				continue
			}
			switch {
			case strings.HasPrefix(kind, "crash"):
				kinds["crash"]++
			case strings.HasPrefix(kind, "renders where"):
				kinds["renders where Python raises"]++
			default:
				kinds[kind]++
			}
			if *verbose {
				w := "error " + want.Error
				if want.Output != nil {
					w = strconv.Quote(*want.Output)
				}
				fmt.Printf("  %s %s: %s\n    got  %q %s\n    want %s\n", engine, c.Name, kind, got.Output, got.Error, w)
			}
		}
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(ks)
		fmt.Printf("%-9s %d/%d pass (chat_* %d/%d); failures: %s\n", engine, pass, len(cases), chatPass, chatTotal, strings.Join(ks, ", "))
	}
}

func mustRead(path string, v any) {
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// runChild renders case i with engine in a child process; crash describes an abnormal end.
func runChild(dir, engine string, i int) (r result, crash string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-child", dir, engine, strconv.Itoa(i))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = childLimits()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return r, "timeout"
	case err != nil:
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return r, msg
	}
	if json.Unmarshal(stdout.Bytes(), &r) != nil {
		return r, "no result"
	}
	return r, ""
}

// child renders one case and writes its result as JSON; a panic or a fatal error ends the
// process, which the parent reports as a crash.
func child(dir, engine, index string) {
	setAddressSpaceLimit(2 << 30)
	var cases []testCase
	mustRead(filepath.Join(dir, "cases.json"), &cases)
	i, _ := strconv.Atoi(index)
	c := cases[i]
	var out string
	var err error
	switch engine {
	case "ardanlabs":
		out, err = renderArdan(c)
	case "gonja":
		out, err = renderGonja(c)
	}
	r := result{Output: out}
	if err != nil {
		r.Error = err.Error()
		if r.Error == "" {
			r.Error = "error"
		}
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

// decodeOrdered decodes JSON keeping object key order (ardanlabs dicts are ordered).
func decodeOrdered(dec *json.Decoder) (ardan.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return ardan.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := ardan.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return d, err
				}
				v, err := decodeOrdered(dec)
				if err != nil {
					return d, err
				}
				d.AsDict().Set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []ardan.Value
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return ardan.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return ardan.NewList(items), err
		}
	case json.Number:
		if n, err := t.Int64(); err == nil {
			return ardan.NewInt(n), nil
		}
		f, err := t.Float64()
		return ardan.NewFloat(f), err
	case string:
		return ardan.NewString(t), nil
	case bool:
		return ardan.NewBool(t), nil
	case nil:
		return ardan.None(), nil
	}
	return ardan.Value{}, fmt.Errorf("unexpected token %v", tok)
}

func renderArdan(c testCase) (string, error) {
	tm, err := ardan.Compile(c.Template)
	if err != nil {
		return "", err
	}
	data := map[string]ardan.Value{}
	if len(c.Vars) > 0 {
		dec := json.NewDecoder(bytes.NewReader(c.Vars))
		dec.UseNumber()
		v, err := decodeOrdered(dec)
		if err != nil {
			return "", err
		}
		d := v.AsDict()
		for _, k := range d.OrderedKeys() {
			data[k], _ = d.Get(k)
		}
	}
	data["strftime_now"] = ardan.NewCallable("strftime_now", func(args []ardan.Value, _ map[string]ardan.Value) (ardan.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return ardan.Undefined(), errors.New("strftime_now takes one string")
		}
		return ardan.NewString(strftime(args[0].AsString(), fixedNow)), nil
	})
	return tm.RenderValues(data)
}

func renderGonja(c testCase) (string, error) {
	cfg := gconfig.New()
	cfg.TrimBlocks, cfg.LeftStripBlocks = true, true
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return "", err
	}
	shifted, err := loaders.NewShiftedLoader("case", strings.NewReader(c.Template), loader)
	if err != nil {
		return "", err
	}
	tm, err := gexec.NewTemplate("case", cfg, shifted, gonja.DefaultEnvironment)
	if err != nil {
		return "", err
	}
	vars := map[string]any{}
	if len(c.Vars) > 0 {
		dec := json.NewDecoder(bytes.NewReader(c.Vars))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return "", err
		}
		vars = numbers(m).(map[string]any)
	}
	vars["raise_exception"] = func(msg string) (string, error) { return "", errors.New(msg) }
	vars["strftime_now"] = func(format string) string { return strftime(format, fixedNow) }
	return tm.ExecuteToString(gexec.NewContext(vars))
}

// numbers turns json.Number into int64 or float64 for gonja.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// strftime formats t with the C codes the fixture uses.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, w int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", w, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch format[i] {
		case 'Y':
			num(t.Year(), 4)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
