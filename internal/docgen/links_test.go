package docgen

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestLinks: every relative link of README.md and docs/ (Markdown files,
// outside code blocks and code spans) names a file or directory that
// exists, and a #anchor names a heading of the Markdown file it points to.
func TestLinks(t *testing.T) {
	mds := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			mds = append(mds, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	headingsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	checked := 0
	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, md)
		for _, l := range relativeLinks(string(b)) {
			checked++
			target, anchor, _ := strings.Cut(l, "#")
			path := md
			if target != "" {
				path = filepath.Join(filepath.Dir(md), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no such file or directory", rel, l)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingsOf(path)[anchor] {
				t.Errorf("%s: link %q: no heading with the anchor #%s", rel, l, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d relative links, want at least 50 (is the link parser broken?)", checked)
	}
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// relativeLinks are the targets of the inline links of a Markdown text
// that are not absolute URLs, outside fenced code blocks and code spans.
func relativeLinks(text string) []string {
	var links []string
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			l := m[1]
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			links = append(links, l)
		}
	}
	return links
}

// headingAnchors are the anchors GitHub gives a Markdown text's headings:
// lower case, punctuation dropped, spaces as hyphens, "-1", "-2"... for
// repeats.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = linkText.ReplaceAllString(h, "$1")
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				a.WriteRune(r)
			case r == ' ':
				a.WriteRune('-')
			}
		}
		s := a.String()
		if n := seen[s]; n > 0 {
			anchors[s+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

func TestHeadingAnchors(t *testing.T) {
	a := headingAnchors("# The CLI\n\n## `nodeexec shell NODE`\n\n```\n# not a heading\n```\n## Faults\n## Faults\n### Fleet safety: gates, a shared budget\n")
	for _, want := range []string{"the-cli", "nodeexec-shell-node", "faults", "faults-1", "fleet-safety-gates-a-shared-budget"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("a comment in a code block became an anchor")
	}
}

// TestREADMEShape: README stays a front page (at most 300 lines; the rest
// lives under docs/) and keeps the two commands that work on a fresh
// machine, `make demo` and `make test` (the test command CI runs, .ci/run).
func TestREADMEShape(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the detail to docs/", n)
	}
	_, section, ok := strings.Cut(text, "\n## Two commands (on a fresh machine, as root)\n")
	if !ok {
		t.Fatal(`README.md: no section "## Two commands (on a fresh machine, as root)"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, cmd := range []string{"\nmake demo ", "\nmake test "} {
		if !strings.Contains(section, cmd) {
			t.Errorf("README.md's two commands: no line starting %q", strings.TrimSpace(cmd))
		}
	}
}
