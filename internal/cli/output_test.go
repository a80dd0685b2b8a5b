package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func res(node string, code int, stdout string) nodeexec.NodeResult {
	r := nodeexec.NodeResult{Result: nodeexec.Result{Node: node, ExitCode: code}, Attempts: 1}
	r.Stdout = nodeexec.Output{Tail: []byte(stdout), Bytes: int64(len(stdout)), SHA256: fmt.Sprintf("%064x", len(stdout)*7+code)}
	if code != 0 {
		r.Err = &nodeexec.ExitError{Node: node, Code: code}
	}
	return r
}

// TestDescribeWithoutDigest: an output not hashed (RunnerOptions.SkipDigest)
// is described by its size and last line, without a digest.
func TestDescribeWithoutDigest(t *testing.T) {
	o := nodeexec.Output{Tail: []byte("a\nlast\n"), Bytes: 7}
	if got, want := describe(o), `7B "last"`; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
	o.SHA256 = fmt.Sprintf("%064x", 7)
	if got, want := describe(o), `7B sha256:00000000 "last"`; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
}

func TestPrintGroupsOddNodeLast(t *testing.T) {
	var buf bytes.Buffer
	results := []nodeexec.NodeResult{
		res("a", 0, "4096\n"), res("b", 0, "4096\n"), res("odd", 1, "128\n"), res("c", 0, "4096\n"),
		{Result: nodeexec.Result{Node: "skipped", ExitCode: -1}, Err: fmt.Errorf("x: %w", nodeexec.ErrSkipped)},
	}
	printGroups(&buf, results)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 groups, got:\n%s", buf.String())
	}
	if !strings.HasPrefix(lines[1], "3 of 4 nodes") || !strings.HasSuffix(lines[1], "a,b,c") {
		t.Errorf("largest group first: %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "1 of 4 nodes") || !strings.HasSuffix(lines[2], "odd") || !strings.Contains(lines[2], `"128"`) {
		t.Errorf("odd node last, with its output: %q", lines[2])
	}
	buf.Reset()
	printGroups(&buf, results[:1])
	if buf.Len() != 0 {
		t.Errorf("one node: want no groups, got %q", buf.String())
	}
}

func TestRecord(t *testing.T) {
	r := record(nodeexec.NodeResult{Result: nodeexec.Result{Node: "n", ExitCode: -1}, Err: fmt.Errorf("n: %w: canary failed", nodeexec.ErrSkipped)})
	if !r.Skipped || r.Error == "" || r.Node != "n" {
		t.Errorf("skipped record = %+v", r)
	}
	r = record(res("m", 3, "out\n"))
	if r.Skipped || r.ExitCode != 3 || r.Stdout != "out\n" || r.StdoutBytes != 4 {
		t.Errorf("record = %+v", r)
	}
}

func TestRolloutFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"batch zero":       {[]string{"--batch", "0"}, `--batch "0": want a number >= 1`},
		"batch word":       {[]string{"--batch", "few"}, `--batch: "few" is neither a number nor a percentage`},
		"max-errors 150%":  {[]string{"--max-errors", "150%"}, `--max-errors "150%": want a percentage from 0% to 100%`},
		"negative canary":  {[]string{"--canary", "-1"}, "--canary -1: give 0 or more"},
		"negative retries": {[]string{"--retries", "-1"}, "--retries -1: give 0 or more"},
		"bad output":       {[]string{"-o", "yaml"}, `--output "yaml": want text, json or ndjson`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"nodeexec", "--kubeconfig", unreachableKubeconfig(t), "run", "--all"}, tc.args...)
			args = append(args, "--", "true")
			code := Run(t.Context(), Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, args)
			if code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}

// unreachableKubeconfig points at a port where nothing listens: a flag error
// must be reported before any request is made.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
