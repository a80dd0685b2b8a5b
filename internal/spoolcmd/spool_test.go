package spoolcmd

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// runAgentCmd runs `nodeexec-spool agent ARGS...` (App) and returns its
// exit status (0, an ExitStatus's code, or 2 for a usage error) and stderr.
func runAgentCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := runApp(t, append([]string{"agent"}, args...)...)
	return code, stderr
}

// runApp runs `nodeexec-spool ARGS...` (App) and returns its exit status,
// stdout and stderr.
func runApp(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := App(Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	done := make(chan error, 1)
	go func() { done <- app.RunContext(t.Context(), append([]string{BinaryName}, args...)) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s %q did not return within 5s", BinaryName, args)
	}
	var es ExitStatus
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &es):
		return es.Code, out.String(), errOut.String()
	default:
		return 2, out.String(), errOut.String() + err.Error()
	}
}

// TestAttachNotASpool: attach on a directory that is not a spool (/dev,
// which has stdout and stderr) ends at once, in every mode: --stop does not
// poll for ever and --check does not call it a spool.
func TestAttachNotASpool(t *testing.T) {
	for _, mode := range [][]string{{"--stop"}, {"--check"}, nil} {
		for _, dir := range []string{"/dev", "/x", "/usr/local/bin", spool.DefaultParent + "/../../../dev"} {
			args := append([]string{"attach", "--spool", dir}, mode...)
			start := time.Now()
			code, stderr := runAgentCmd(t, args...)
			if code != attachFailed || !strings.Contains(stderr, "--spool") || time.Since(start) > 2*time.Second {
				t.Errorf("agent %q: exit %d after %s, stderr %q; want %d at once", args, code, time.Since(start), stderr, attachFailed)
			}
		}
	}
	// Under the agents' parent, a name that holds no spool: not a spool (3).
	name := "spoolcmd-test-none-" + time.Now().Format("150405.000000000")
	for _, mode := range []string{"--stop", "--check"} {
		if code, stderr := runAgentCmd(t, "attach", "--spool", spool.Path(name), mode); code != attachCheckMissing {
			t.Errorf("attach %s on a missing spool: exit %d, stderr %q; want %d", mode, code, stderr, attachCheckMissing)
		}
	}
}

// TestApp: the program answers `version` (what the debugpod backend's
// probe runs), runs `agent run` command lines, and refuses what it does
// not have (the nodeexec binary's other commands) as a usage error.
func TestApp(t *testing.T) {
	if code, stdout, _ := runApp(t, "version", "--client"); code != 0 || !strings.HasPrefix(stdout, BinaryName+" ") {
		t.Errorf("version --client: exit %d, stdout %q; want 0 and %s's name", code, stdout, BinaryName)
	}
	if code, stdout, stderr := runApp(t, "agent", "run", "--", "sh", "-c", "echo out; exit 4"); code != 4 || stdout != "out\n" {
		t.Errorf("agent run: exit %d, stdout %q, stderr %q; want 4 and out", code, stdout, stderr)
	}
	for _, args := range [][]string{{"agent", "nsenter", "--target", "1", "--", "true"}, {"run", "--node", "x"}} {
		if code, _, _ := runApp(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (not a command of %s)", args, code, BinaryName)
		}
	}
}
