package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/internal/spoolcmd"
)

// TestNoClientLibraries keeps nodeexec-spool small and quick to start: it
// must not link Kubernetes' client libraries (k8s.io/..., sigs.k8s.io/...)
// or the module's packages that do (nodeexec/agent, podexec, ...).
func TestNoClientLibraries(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/nodeexec/nodeexec/cmd/nodeexec-spool": true,
		"github.com/nodeexec/nodeexec/internal/spoolcmd":  true,
		"github.com/nodeexec/nodeexec/nodeexec/spool":     true,
		"github.com/nodeexec/nodeexec/nsenter":            true,
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "k8s.io/"), strings.HasPrefix(p, "sigs.k8s.io/"):
			t.Errorf("nodeexec-spool links %s: it must not link Kubernetes' libraries", p)
		case strings.HasPrefix(p, "github.com/nodeexec/nodeexec/") && !allowed[p]:
			t.Errorf("nodeexec-spool links %s: only %v of the module", p, allowed)
		}
	}
}

// TestExitCode: an ExitStatus is its code, any other error a usage error.
func TestExitCode(t *testing.T) {
	for err, want := range map[error]int{nil: 0, spoolcmd.ExitStatus{Code: 7}: 7, exec.ErrNotFound: 2} {
		if got := exitCode(err); got != want {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
		}
	}
}
