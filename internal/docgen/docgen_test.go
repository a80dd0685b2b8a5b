package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const root = "../.."

// TestGeneratedDocsUpToDate: every generated file is committed as Files
// produces it now, so a flag, a CRD field, a package doc or the library
// example changed without `make docs` fails here.
func TestGeneratedDocsUpToDate(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"docs/reference/cli.md", "docs/man/nodeexec.1", "docs/reference/nodescript.md",
		"docs/reference/maintenancebudget.md", "docs/reference/maintenancecalendar.md", "docs/layout.md", "docs/library.md"} {
		if _, ok := files[name]; !ok {
			t.Errorf("Files: no %s", name)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v: run `make docs` and commit the result", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make docs` and commit the result\n%s", name, firstDifference(string(got), string(want)))
		}
	}
}

// firstDifference shows the first line where the committed file (got)
// and the generated one (want) differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  committed: " + gl + "\n  generated: " + wl
		}
	}
	return ""
}

// TestCLIReferenceIgnoresEnvironment: the defaults the reference shows
// are the built-in ones, whatever NODEEXEC_IMAGE says.
func TestCLIReferenceIgnoresEnvironment(t *testing.T) {
	before, _, err := cliDocs()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODEEXEC_IMAGE", "example.com/other:1")
	t.Setenv("NODEEXEC_AGENT_IMAGE", "example.com/agent:1")
	after, _, err := cliDocs()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the CLI reference depends on NODEEXEC_IMAGE/NODEEXEC_AGENT_IMAGE:\n%s", firstDifference(string(before), string(after)))
	}
	if os.Getenv("NODEEXEC_IMAGE") != "example.com/other:1" {
		t.Errorf("cliDocs did not restore NODEEXEC_IMAGE")
	}
}

// TestSnippet: the code between the markers, unindented.
func TestSnippet(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\nfunc f() {\n\t// docs:begin\n\ta := 1\n\tif a > 0 {\n\t\ta++\n\t}\n\t// docs:end\n}\n"
	md := "# T\n\n<!-- code: x.go -->\n```go\nold\n```\n\nafter\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := withSnippets(dir, "x.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\n<!-- code: x.go -->\n```go\na := 1\nif a > 0 {\n\ta++\n}\n```\n\nafter\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := withSnippets(dir, "x.md"); err == nil || !strings.Contains(err.Error(), "docs:begin") {
		t.Errorf("no markers: err %v, want one naming docs:begin", err)
	}
}
