package main

import (
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// features type-checks one file of package p (no imports) and returns its
// API lines.
func features(t *testing.T, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", "package p\n"+src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Features(pkg)
}

const base = `
type Options struct {
	Namespace string
	Retries   int
	secret    bool
}
func (o Options) Validate() error { return nil }
func (o *Options) Default() {}
type Runner interface { Run(node string) (int, error) }
func New(o Options) (*Options, error) { return nil, nil }
const Name = "debugpod"
var ErrNoNode error
func helper() {}
`

func TestFeatures(t *testing.T) {
	got := features(t, base)
	want := []string{
		`pkg example.com/p, const Name = "debugpod"`,
		`pkg example.com/p, const Name ideal-string`,
		`pkg example.com/p, func New(Options) (*Options, error)`,
		`pkg example.com/p, method (*Options) Default()`,
		`pkg example.com/p, method (Options) Validate() error`,
		`pkg example.com/p, type Options struct`,
		`pkg example.com/p, type Options struct, Namespace string`,
		`pkg example.com/p, type Options struct, Retries int`,
		`pkg example.com/p, type Runner interface { Run }`,
		`pkg example.com/p, type Runner interface, Run(string) (int, error)`,
		`pkg example.com/p, var ErrNoNode error`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Features:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFeaturesGenericsAndEmbedding(t *testing.T) {
	got := features(t, `
type Base struct{ Image string }
func (Base) Kind() string { return "" }
type Spec struct { Base; Node string }
type List[T any] struct{ Items []T }
func (l *List[T]) Len() int { return 0 }
func As[T any](x any) (T, bool) { var z T; return z, false }
type Number interface{ ~int | ~int64 }
`)
	for _, want := range []string{
		`pkg example.com/p, type Spec struct, embedded Base`,
		`pkg example.com/p, method (Spec) Kind() string`, // promoted
		`pkg example.com/p, type List[$0 interface{}] struct`,
		`pkg example.com/p, method (*List[$0]) Len() int`,
		`pkg example.com/p, func As[$0 interface{}](interface{}) ($0, bool)`,
		`pkg example.com/p, type Number interface { ~int|~int64 }`,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("Features lacks %q; has:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// TestCompatibility: what the record's diff calls incompatible (a removed
// line) and what it calls compatible (only added lines).
func TestCompatibility(t *testing.T) {
	old := features(t, base)
	for _, tc := range []struct {
		name, src    string
		incompatible bool
	}{
		{"unchanged", base, false},
		{"function added", base + "func Extra() {}", false},
		{"field added", strings.Replace(base, "Retries   int", "Retries int\nTimeout int", 1), false},
		{"method added to a struct", base + "func (o Options) String() string { return \"\" }", false},
		{"unexported change", strings.Replace(base, "func helper() {}", "func helper(int) {}", 1), false},
		{"function removed", strings.Replace(base, "func New(o Options) (*Options, error) { return nil, nil }", "", 1), true},
		{"signature changed", strings.Replace(base, "func New(o Options)", "func New(ns string, o Options)", 1), true},
		{"field removed", strings.Replace(base, "Retries   int", "", 1), true},
		{"field type changed", strings.Replace(base, "Retries   int", "Retries int64", 1), true},
		// Compatible in fact, but flagged, as by Go's own api check: the
		// line names the receiver.
		{"pointer to value receiver (conservative)", strings.Replace(base, "func (o *Options) Default()", "func (o Options) Default()", 1), true},
		{"value to pointer receiver", strings.Replace(base, "func (o Options) Validate()", "func (o *Options) Validate()", 1), true},
		{"method added to an interface", strings.Replace(base, "Run(node string) (int, error)", "Run(node string) (int, error); Stop()", 1), true},
		{"constant's value changed", strings.Replace(base, `"debugpod"`, `"debug"`, 1), true},
		{"exported name unexported", strings.Replace(base, "var ErrNoNode", "var errNoNode", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			removed, added := diff(old, features(t, tc.src))
			if got := len(removed) > 0; got != tc.incompatible {
				t.Errorf("incompatible = %v, want %v (removed %q, added %q)", got, tc.incompatible, removed, added)
			}
		})
	}
}

func TestCompareRecord(t *testing.T) {
	if err := compareRecord([]string{"a", "b"}, []string{"a", "b"}); err != nil {
		t.Errorf("same record: %v", err)
	}
	err := compareRecord([]string{"pkg p, func A()", "pkg p, func B()"}, []string{"pkg p, func A()", "pkg p, func C()"})
	if !errors.Is(err, errAPIChanged) {
		t.Fatalf("err = %v, want errAPIChanged", err)
	}
	for _, want := range []string{"run `make api`, and add a CHANGELOG.md entry under Unreleased", "- pkg p, func B()", "+ pkg p, func C()"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestModuleAPI: only the module's public packages are recorded (not
// internal/, not commands), each with its full import path.
func TestModuleAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	dir := t.TempDir()
	write(t, dir, "go.mod", "module example.com/m\n\ngo 1.22\n")
	write(t, dir, "lib/lib.go", "package lib\n\nimport \"example.com/m/internal/x\"\n\nfunc F() x.T { return 0 }\n")
	write(t, dir, "internal/x/x.go", "package x\n\ntype T int\n\nfunc Hidden() {}\n")
	write(t, dir, "cmd/tool/main.go", "package main\n\nfunc Exported() {}\n\nfunc main() {}\n")
	got, err := ModuleAPI(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pkg example.com/m/lib, func F() example.com/m/internal/x.T"}
	if !slices.Equal(got, want) {
		t.Errorf("ModuleAPI = %q, want %q", got, want)
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repo is a scratch git repository for the CHANGELOG rule.
type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	r := &repo{t, t.TempDir()}
	r.git("init", "-q", "-b", "main")
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(r.dir))
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// commit writes files (name → content) and commits them.
func (r *repo) commit(msg string, files map[string]string) {
	r.t.Helper()
	for name, content := range files {
		write(r.t, r.dir, name, content)
	}
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", msg)
}

func (r *repo) check(since string) (string, error) {
	return checkChangelog(&git{dir: r.dir}, since, false, false)
}

const (
	recAB  = "pkg p, func A()\npkg p, func B()\n"
	recABC = recAB + "pkg p, func C()\n"
	recB   = "pkg p, func B()\n"
)

func TestChangelogRule(t *testing.T) {
	r := newRepo(t)
	r.commit("code without a record", map[string]string{"p.go": "package p"})
	r.commit("the record starts", map[string]string{recordPath: recAB, changelogPath: "# Changelog\n"})
	r.commit("compatible: C added, no CHANGELOG change", map[string]string{recordPath: recABC})
	if msg, err := r.check(""); err != nil || msg != "" {
		t.Fatalf("additions only: msg %q, err %v", msg, err)
	}

	r.commit("A removed, with a CHANGELOG entry", map[string]string{recordPath: recB + "pkg p, func C()\n", changelogPath: "# Changelog\n- A removed\n"})
	if _, err := r.check(""); err != nil {
		t.Fatalf("removal with CHANGELOG: %v", err)
	}

	r.commit("C removed, CHANGELOG unchanged", map[string]string{recordPath: recB})
	_, err := r.check("")
	if err == nil || !strings.Contains(err.Error(), "C removed, CHANGELOG unchanged") || !strings.Contains(err.Error(), "- pkg p, func C()") {
		t.Fatalf("removal without CHANGELOG: err = %v, want the commit and the line named", err)
	}

	// The base: commits up to the last tag (a release) or -since are not checked.
	if _, err := r.check("HEAD"); err != nil {
		t.Errorf("-since HEAD: %v", err)
	}
	r.git("tag", "v0.1.0")
	r.commit("later, compatible", map[string]string{recordPath: recB + "pkg p, func D()\n"})
	if _, err := r.check(""); err != nil {
		t.Errorf("after the tag: %v", err)
	}
}

func TestChangelogRuleWorkingTree(t *testing.T) {
	r := newRepo(t)
	r.commit("the record starts", map[string]string{recordPath: recAB, changelogPath: "# Changelog\n"})
	write(t, r.dir, recordPath, recABC)
	if _, err := r.check(""); err != nil {
		t.Errorf("uncommitted addition: %v", err)
	}
	write(t, r.dir, recordPath, recB)
	if _, err := r.check(""); err == nil || !strings.Contains(err.Error(), "the working tree") {
		t.Errorf("uncommitted removal without CHANGELOG: err = %v", err)
	}
	write(t, r.dir, changelogPath, "# Changelog\n- A removed\n")
	if _, err := r.check(""); err != nil {
		t.Errorf("uncommitted removal with CHANGELOG: %v", err)
	}
}

// TestChangelogRuleMerge: a merge counts as one commit (its diff from the
// first parent), so a branch may put the CHANGELOG entry in another commit.
func TestChangelogRuleMerge(t *testing.T) {
	r := newRepo(t)
	r.commit("the record starts", map[string]string{recordPath: recAB, changelogPath: "# Changelog\n"})
	r.git("checkout", "-q", "-b", "topic")
	r.commit("A removed", map[string]string{recordPath: recB})
	r.commit("CHANGELOG: A removed", map[string]string{changelogPath: "# Changelog\n- A removed\n"})
	r.git("checkout", "-q", "main")
	r.git("merge", "-q", "--no-ff", "-m", "Merge topic", "topic")
	if _, err := r.check(""); err != nil {
		t.Errorf("merge with the CHANGELOG entry: %v", err)
	}

	r.git("checkout", "-q", "-b", "topic2")
	r.commit("B removed", map[string]string{recordPath: "pkg p, func E()\n"})
	r.git("checkout", "-q", "main")
	r.git("merge", "-q", "--no-ff", "-m", "Merge topic2", "topic2")
	if _, err := r.check(""); err == nil || !strings.Contains(err.Error(), "Merge topic2") {
		t.Errorf("merge without a CHANGELOG entry: err = %v", err)
	}
}

// TestChangelogRuleNoHistory: skipped with a message outside CI, an error
// in CI, skipped in CI only when asked to explicitly.
func TestChangelogRuleNoHistory(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	g := &git{dir: dir}
	msg, err := checkChangelog(g, "", false, false)
	if err != nil || !strings.Contains(msg, "not a git checkout") || !strings.Contains(msg, "not checked") {
		t.Errorf("outside CI: msg %q, err %v", msg, err)
	}
	if _, err := checkChangelog(g, "", true, false); err == nil || !strings.Contains(err.Error(), "needs git history in CI") {
		t.Errorf("in CI: err = %v, want a failure", err)
	}
	if msg, err := checkChangelog(g, "", true, true); err != nil || !strings.Contains(msg, "NODEEXEC_APICHECK_NO_HISTORY=1") {
		t.Errorf("in CI, skipped explicitly: msg %q, err %v", msg, err)
	}
}
