package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"
)

// TestReadmeExamples checks the README's shell examples against the command line: every tq
// subcommand and flag they use exists, and every model folder they name (./NAME) comes with
// the command that downloads it (--local-dir NAME), so a newcomer can run them as written.
func TestReadmeExamples(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(llamacppref.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			in = !in
		case in:
			if i := strings.Index(l, " #"); i >= 0 {
				l = l[:i]
			}
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	downloaded := map[string]bool{}
	dl := regexp.MustCompile(`^(hf|huggingface-cli) download \S+ .*--local-dir (\S+)`)
	for _, l := range lines {
		if m := dl.FindStringSubmatch(l); m != nil {
			downloaded[m[2]] = true
		}
	}
	var examples int
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "tq" {
			continue
		}
		examples++
		cmd, rest, err := rootCmd.Find(f[1:])
		if err != nil || cmd == rootCmd {
			t.Errorf("README: %q: no subcommand %q", l, f[1])
			continue
		}
		for _, a := range rest {
			switch {
			case strings.HasPrefix(a, "--"):
				name, _, _ := strings.Cut(a[2:], "=")
				if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil {
					t.Errorf("README: %q: tq %s has no flag --%s", l, cmd.Name(), name)
				}
			case strings.HasPrefix(a, "-") && len(a) == 2:
				if cmd.Flags().ShorthandLookup(a[1:]) == nil {
					t.Errorf("README: %q: tq %s has no flag %s", l, cmd.Name(), a)
				}
			case strings.HasPrefix(a, "./"):
				if dir := strings.TrimSuffix(a[2:], "/"); !downloaded[dir] {
					t.Errorf("README: %q uses the folder %s, but no example downloads it (hf download ... --local-dir %s)", l, a, dir)
				}
			}
		}
	}
	if examples < 5 {
		t.Fatalf("README has only %d tq examples: the parser no longer finds them", examples)
	}
}
