//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRunProgress runs on every node in a terminal (tmux) as a person would:
// the progress line shows while the command sleeps, and the final screen has
// the output lines and the summary, with no progress line left over. Without
// a terminal (stderr a buffer) none of it is written.
func TestRunProgress(t *testing.T) {
	ctx := t.Context()
	if len(env.nodes) < 2 {
		t.Skip("needs two nodes")
	}
	ns := tempNamespace(ctx, t, "nodeexec-e2e-progress-", nil)
	s := startTmux(t, fmt.Sprintf("sh -c 'NODEEXEC_IMAGE=%s %s --kubeconfig %s -n %s run --all -- sh -c \"echo start; sleep 4; echo end\"; echo EXIT=$?; sleep 600'",
		env.image, env.cli, env.kubeconfig, ns))
	during := s.waitScreen(90*time.Second, `(?m)^\[\S+\] start\n(?:.*\n)*nodes: \d/\d+ done, \d+ failed, \d+ running, \d+ pending\s*$`)
	t.Logf("during the run:\n%s", during[0])
	s.waitScreen(90*time.Second, `(?m)^EXIT=0\s*$`)
	final := s.screen()
	t.Logf("final screen:\n%s", final)
	if strings.Contains(final, "nodes:") || strings.Contains(final, "pending") {
		t.Errorf("a progress line is left on the screen:\n%s", final)
	}
	for _, node := range env.nodes {
		for _, line := range []string{"[" + node + "] start", "[" + node + "] end"} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `\s*$`).MatchString(final) {
				t.Errorf("no clean line %q on the screen", line)
			}
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(node) + `\s+0\s+\S+\s+ok\s*$`).MatchString(final) {
			t.Errorf("no clean summary line for %s", node)
		}
	}

	_, stderr, code := cli(ctx, "", "-n", ns, "run", "--all", "--", "sh", "-c", "sleep 1; echo hi")
	if code != 0 {
		t.Fatalf("run without a terminal: exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "nodes:") || strings.ContainsAny(stderr, "\r\x1b") {
		t.Errorf("stderr is not a terminal, yet has progress text: %q", stderr)
	}
}
