package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// codeMarker, on a line of its own in a Markdown file, names the Go file
// whose lines between "// docs:begin" and "// docs:end" fill the ```go
// block that follows it.
var codeMarker = regexp.MustCompile(`(?m)^<!-- code: (\S+) -->\n`)

// withSnippets returns the Markdown file md (under root) with the code
// block after each codeMarker replaced by the current lines of the file it
// names, unindented by the first line's indentation.
func withSnippets(root, md string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, md))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for {
		loc := codeMarker.FindSubmatchIndex(b)
		if loc == nil {
			out.Write(b)
			return out.Bytes(), nil
		}
		src := string(b[loc[2]:loc[3]])
		out.Write(b[:loc[1]])
		b = b[loc[1]:]
		if !bytes.HasPrefix(b, []byte("```go\n")) {
			return nil, fmt.Errorf("%s: the code marker for %s is not followed by a ```go block", md, src)
		}
		end := bytes.Index(b[len("```go\n"):], []byte("```\n"))
		if end < 0 {
			return nil, fmt.Errorf("%s: the ```go block after %s does not end", md, src)
		}
		code, err := snippet(filepath.Join(root, src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", md, err)
		}
		out.WriteString("```go\n" + code + "```\n")
		b = b[len("```go\n")+end+len("```\n"):]
	}
}

// snippet is the lines of the Go file between "// docs:begin" and
// "// docs:end", without the begin line's indentation.
func snippet(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(b), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case "// docs:begin":
			begin = i
		case "// docs:end":
			end = i
		}
	}
	if begin < 0 || end < begin {
		return "", fmt.Errorf("%s: no // docs:begin ... // docs:end lines", file)
	}
	indent := lines[begin][:len(lines[begin])-len(strings.TrimLeft(lines[begin], " \t"))]
	var w strings.Builder
	for _, l := range lines[begin+1 : end] {
		w.WriteString(strings.TrimPrefix(l, indent) + "\n")
	}
	return w.String(), nil
}
