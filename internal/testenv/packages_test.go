package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goPackage is the part of `go list -json` this test reads.
type goPackage struct {
	ImportPath string
	Name       string
	Imports    []string // of the non-test files
	Module     *struct{ Path string }
}

// listPackages runs `go list -json` with args in the repository root.
func listPackages(t *testing.T, root string, args ...string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// tableRow is one row of the package table in docs/architecture.md.
type tableRow struct {
	line      int
	pkg, role string
	deps      []string // backquoted names of the "depends on" column, sorted
	test      bool     // role marked *test support*
}

// readPackageTable parses the table under "## Packages" in docs/architecture.md. A row's first
// cell is the package path relative to the module, in backquotes; the third cell lists its
// dependencies, each in backquotes (other text there is commentary), or "—" for none.
func readPackageTable(t *testing.T, path string) []tableRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []tableRow
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("%s:%d: package row without three cells: %s", path, n, line)
		}
		name := backquoted(cells[0])
		if len(name) != 1 {
			t.Fatalf("%s:%d: first cell must be one `package`: %s", path, n, line)
		}
		deps := backquoted(cells[2])
		if len(deps) == 0 && strings.TrimSpace(cells[2]) != "—" {
			t.Fatalf("%s:%d: depends-on cell must list `packages` or be —: %s", path, n, line)
		}
		slices.Sort(deps)
		rows = append(rows, tableRow{line: n, pkg: name[0], role: strings.TrimSpace(cells[1]), deps: deps,
			test: strings.HasPrefix(strings.TrimSpace(cells[1]), "*test support*")})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table under \"## Packages\"", path)
	}
	return rows
}

// backquoted returns the `quoted` words of s.
func backquoted(s string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(s, "`")
		if !ok {
			return out
		}
		word, after, ok := strings.Cut(rest, "`")
		if !ok {
			return out
		}
		out = append(out, word)
		s = after
	}
}

func depsCell(deps []string) string {
	if len(deps) == 0 {
		return "—"
	}
	q := make([]string, len(deps))
	for i, d := range deps {
		q[i] = "`" + d + "`"
	}
	return strings.Join(q, ", ")
}

// TestPackageTable checks docs/architecture.md's package table against the code: one row per
// package of the module, each row's "depends on" equal to the package's direct imports of
// other tq packages (test files excluded), and no test-support package (a row marked *test
// support*, or a package whose non-test files import "testing") linked into cmd/tq.
func TestPackageTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	root := RepoRoot(t)
	doc := filepath.Join("docs", "architecture.md")
	rows := readPackageTable(t, filepath.Join(root, doc))
	pkgs := listPackages(t, root, "./...")
	if len(pkgs) == 0 || pkgs[0].Module == nil {
		t.Fatal("go list ./... found no module packages")
	}
	module := pkgs[0].Module.Path
	rel := func(path string) (string, bool) { return strings.CutPrefix(path, module+"/") }

	code := map[string][]string{} // package → sorted tq imports
	usesTesting := map[string]bool{}
	for _, p := range pkgs {
		name, ok := rel(p.ImportPath)
		if !ok {
			t.Fatalf("package %s outside module %s", p.ImportPath, module)
		}
		deps := []string{}
		for _, imp := range p.Imports {
			if d, ok := rel(imp); ok {
				deps = append(deps, d)
			}
			usesTesting[name] = usesTesting[name] || imp == "testing"
		}
		slices.Sort(deps)
		code[name] = deps
	}

	var problems []string
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.pkg] {
			problems = append(problems, fmt.Sprintf("%s:%d: `%s` has a second row; remove it", doc, r.line, r.pkg))
			continue
		}
		seen[r.pkg] = true
		deps, ok := code[r.pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s:%d: `%s` is not a package of the module; remove the row", doc, r.line, r.pkg))
			continue
		}
		if !slices.Equal(r.deps, deps) {
			var missing, extra []string
			for _, d := range deps {
				if !slices.Contains(r.deps, d) {
					missing = append(missing, d)
				}
			}
			for _, d := range r.deps {
				if !slices.Contains(deps, d) {
					extra = append(extra, d)
				}
			}
			problems = append(problems, fmt.Sprintf("%s:%d: `%s`: the depends-on cell should read: %s\n(imported but not listed: %v; listed but not imported: %v)",
				doc, r.line, r.pkg, depsCell(deps), missing, extra))
		}
		if usesTesting[r.pkg] && !r.test {
			problems = append(problems, fmt.Sprintf("%s:%d: `%s` imports \"testing\" in non-test files: start its role with *test support*", doc, r.line, r.pkg))
		}
	}
	var names []string
	for name := range code {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("%s: package `%s` has no row in the package table; add:\n| `%s` | <what it is for> | %s |",
				doc, name, name, depsCell(code[name])))
		}
	}

	// Test support stays out of the binary.
	linked := map[string]bool{}
	for _, p := range listPackages(t, root, "-deps", "./cmd/tq") {
		linked[p.ImportPath] = true
	}
	if !linked[module+"/cmd/tq"] {
		t.Fatal("go list -deps ./cmd/tq did not list cmd/tq")
	}
	for _, r := range rows {
		if (r.test || usesTesting[r.pkg]) && linked[module+"/"+r.pkg] {
			problems = append(problems, fmt.Sprintf("test-support package `%s` is linked into the tq binary (go list -deps ./cmd/tq)", r.pkg))
		}
	}
	if linked["testing"] {
		problems = append(problems, `the tq binary links package "testing" (go list -deps ./cmd/tq)`)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 {
		t.Logf("%d packages, table and go list agree; %d packages linked into cmd/tq, no test support among them", len(rows), len(linked))
	}
}

// TestPackageTableParser makes sure the table checks above can fail.
func TestPackageTableParser(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "a.md")
	text := "# x\n\n| `a` | not a package row, outside the section | — |\n\n## Packages\n\n| package | role | depends on |\n|---|---|---|\n" +
		"| `gguf` | reader | `internal/mmap` |\n| `quant` | formats | `gguf` (type ids only) |\n| `internal/testenv` | *test support*: x | — |\n\n## Next\n\n| `b` | c | — |\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := readPackageTable(t, doc)
	if len(rows) != 3 || rows[0].pkg != "gguf" || !slices.Equal(rows[1].deps, []string{"gguf"}) || len(rows[2].deps) != 0 ||
		!rows[2].test || rows[1].test || rows[0].line != 9 {
		t.Fatalf("parsed %+v", rows)
	}
	if got := depsCell([]string{"a", "b/c"}); got != "`a`, `b/c`" {
		t.Errorf("depsCell: %s", got)
	}
}
