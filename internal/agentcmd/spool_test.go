package agentcmd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// runAgentCmd runs `agent ARGS...` with the agent's commands and returns
// its exit status (0, an ExitStatus's code, or 2 for a usage error) and
// stderr.
func runAgentCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	streams := Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &stderr}
	app := &ucli.App{Name: "nodeexec", Writer: &stderr, ErrWriter: &stderr, ExitErrHandler: func(*ucli.Context, error) {},
		Commands: []*ucli.Command{{Name: "agent", Subcommands: Commands(streams)}}}
	done := make(chan error, 1)
	go func() { done <- app.RunContext(t.Context(), append([]string{"nodeexec", "agent"}, args...)) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("agent %q did not return within 5s", args)
	}
	var es ExitStatus
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &es):
		return es.Code, stderr.String()
	default:
		return 2, stderr.String() + err.Error()
	}
}

// TestSpoolOutsideParentRefused: a --spool that is not
// spool.DefaultParent/NAME is refused before anything is created or swept:
// the old directories beside it (a /usr/local/bin beside a --spool
// /usr/local/NEW) are left alone, and the command does not run.
func TestSpoolOutsideParentRefused(t *testing.T) {
	parent := t.TempDir()
	bin := filepath.Join(parent, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "nodeexec"), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(bin, old, old); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(parent, "ran")
	for _, sub := range [][]string{
		{"nsenter", "--target", "1"},
		{"container-exec", "--container-id", "containerd://abc"},
		{"run"}, // nodeexec-spool's, mounted here too
	} {
		for _, dir := range []string{filepath.Join(parent, "new"), parent + "/../x", spool.DefaultParent + "/../../../" + parent[1:] + "/new", spool.DefaultParent + "/a/b", spool.DefaultParent + "/..", spool.DefaultParent} {
			args := append(append([]string{sub[0], "--spool", dir}, sub[1:]...), "--", "/bin/sh", "-c", "touch "+marker)
			code, stderr := runAgentCmd(t, args...)
			if code != agentNsenterFailed || !strings.Contains(stderr, "--spool") || !strings.Contains(stderr, spool.DefaultParent+"/NAME") {
				t.Errorf("agent %q: exit %d, stderr %q; want %d and the refusal naming %s/NAME", args, code, stderr, agentNsenterFailed, spool.DefaultParent)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "nodeexec")); err != nil {
		t.Errorf("the directory beside the refused spool was swept: %v", err)
	}
	for _, p := range []string{filepath.Join(parent, "new"), marker} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the refusal: %v", p, err)
		}
	}
}
