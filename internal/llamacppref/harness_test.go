package llamacppref

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// lockfile is the part of package-lock.json (lockfileVersion 3) the checks below read.
type lockfile struct {
	LockfileVersion int `json:"lockfileVersion"`
	Packages        map[string]struct {
		Version      string            `json:"version"`
		Integrity    string            `json:"integrity"`
		Optional     bool              `json:"optional"`
		Dev          bool              `json:"dev"`
		Dependencies map[string]string `json:"dependencies"`
	} `json:"packages"`
}

// TestHarnessInstallsOnlyTheCPUBuild checks what testdata/llamacpp/setup.sh installs: npm ci
// with --omit=optional installs the lockfile's non-optional packages, which must include
// node-llama-cpp's linux-x64 CPU build pinned at node-llama-cpp's version, and none of its
// CUDA, Vulkan or other platform builds (hundreds of MB the tests never load).
func TestHarnessInstallsOnlyTheCPUBuild(t *testing.T) {
	dir := filepath.Join(RepoRoot(t), "testdata", "llamacpp")
	script, err := os.ReadFile(filepath.Join(dir, "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var npmArgs string
	for _, line := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "npm_args=") {
			npmArgs = line
		}
	}
	for _, want := range []string{"--omit=optional", "--ignore-scripts"} {
		if !strings.Contains(npmArgs, want) {
			t.Errorf("setup.sh: npm_args %q lacks %s", npmArgs, want)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*npm ci "\$\{npm_args\[@\]\}"`).Match(script) {
		t.Error(`setup.sh does not run npm ci "${npm_args[@]}" (a lockfile-pinned install)`)
	}

	raw, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock lockfile
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatalf("package-lock.json: %v", err)
	}
	if lock.LockfileVersion < 2 {
		t.Fatalf("package-lock.json: lockfileVersion %d has no packages section", lock.LockfileVersion)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	root := lock.Packages[""]
	if len(root.Dependencies) != len(pkg.Dependencies) {
		t.Errorf("package-lock.json is stale: root dependencies %v, package.json %v", root.Dependencies, pkg.Dependencies)
	}
	for name, v := range pkg.Dependencies {
		if root.Dependencies[name] != v {
			t.Errorf("package-lock.json is stale: %s is %q there, %q in package.json", name, root.Dependencies[name], v)
		}
	}

	installed := map[string]string{} // package name -> version, as npm ci --omit=optional lays it out
	for path, p := range lock.Packages {
		if path == "" || p.Optional || p.Dev {
			continue
		}
		if p.Integrity == "" {
			t.Errorf("package-lock.json: %s has no integrity hash", path)
		}
		name := path[strings.LastIndex(path, "node_modules/")+len("node_modules/"):]
		installed[name] = p.Version
	}
	llama := installed["node-llama-cpp"]
	if llama == "" {
		t.Fatal("package-lock.json: node-llama-cpp would not be installed")
	}
	var builds []string
	for name, v := range installed {
		if strings.HasPrefix(name, "@node-llama-cpp/") {
			builds = append(builds, name+"@"+v)
		}
	}
	sort.Strings(builds)
	if want := "@node-llama-cpp/linux-x64@" + llama; len(builds) != 1 || builds[0] != want {
		t.Errorf("npm ci --omit=optional installs the llama.cpp builds %v, want only %s", builds, want)
	}
}

// TestHarnessInstalledAsPlanned checks an installed harness against the same plan: no
// llama.cpp build other than linux-x64 under node_modules. A node_modules shared through a
// symbolic link (another checkout's) is not this checkout's install and is not checked.
func TestHarnessInstalledAsPlanned(t *testing.T) {
	nm := filepath.Join(RepoRoot(t), "testdata", "llamacpp", "node_modules")
	if fi, err := os.Lstat(nm); err != nil {
		Missing(t, "testdata/llamacpp/node_modules")
	} else if fi.Mode()&os.ModeSymlink != 0 {
		t.Skipf("%s is a symbolic link to another checkout's install", nm)
	}
	entries, err := os.ReadDir(filepath.Join(nm, "@node-llama-cpp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "linux-x64" {
			t.Errorf("node_modules/@node-llama-cpp/%s is installed; run testdata/llamacpp/setup.sh to reinstall only the CPU build", e.Name())
		}
	}
}
