package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPermuteArgs(t *testing.T) {
	app := newApp(Streams{})
	for _, c := range []struct{ in, want []string }{
		{[]string{"nodeexec", "promote", "fix", "--to", "all"}, []string{"nodeexec", "promote", "--to", "all", "--", "fix"}},
		{[]string{"nodeexec", "--kubeconfig", "k", "status", "fix", "-o", "json"}, []string{"nodeexec", "--kubeconfig", "k", "status", "-o", "json", "--", "fix"}},
		{[]string{"nodeexec", "apply", "-f", "x.yaml"}, []string{"nodeexec", "apply", "-f", "x.yaml"}},
		{[]string{"nodeexec", "promote", "fix", "--to=pool=a"}, []string{"nodeexec", "promote", "--to=pool=a", "--", "fix"}},
		// run: the command follows --, kept as is.
		{[]string{"nodeexec", "run", "--all", "--", "ls", "-l"}, []string{"nodeexec", "run", "--all", "--", "ls", "-l"}},
		{[]string{"nodeexec", "run", "--all", "hostname"}, []string{"nodeexec", "run", "--all", "--", "hostname"}},
		{[]string{"nodeexec", "watch", "--leader-elect", "--metrics-bind-address", ":8080"}, []string{"nodeexec", "watch", "--leader-elect", "--metrics-bind-address", ":8080"}},
		// shell: flags after NODE are nodeexec's (README's syntax), not the remote command.
		{[]string{"nodeexec", "shell", "n1", "--profile", "baseline", "--timeout", "5m"}, []string{"nodeexec", "shell", "--profile", "baseline", "--timeout", "5m", "--", "n1"}},
		{[]string{"nodeexec", "shell", "n1", "--", "ls", "-l"}, []string{"nodeexec", "shell", "--", "n1", "ls", "-l"}},
		// Global flags after the command move before it.
		{[]string{"nodeexec", "run", "--all", "-n", "team", "--", "true"}, []string{"nodeexec", "-n", "team", "run", "--all", "--", "true"}},
		{[]string{"nodeexec", "--kubeconfig", "k", "gc", "-A", "--qps=5", "extra"}, []string{"nodeexec", "--kubeconfig", "k", "--qps=5", "gc", "-A", "--", "extra"}},
		// agent install's own --namespace wins over the global one.
		{[]string{"nodeexec", "agent", "install", "--namespace", "x"}, []string{"nodeexec", "agent", "install", "--namespace", "x"}},
		// The agent's internal subcommands are not touched.
		{[]string{"nodeexec", "agent", "nsenter", "--target", "1", "--", "sh", "-c", "x"}, []string{"nodeexec", "agent", "nsenter", "--target", "1", "--", "sh", "-c", "x"}},
		{[]string{"nodeexec", "--help"}, []string{"nodeexec", "--help"}},
		{[]string{"nodeexec", "status", "x", "--help"}, []string{"nodeexec", "status", "--help", "--", "x"}},
	} {
		got, err := permuteArgs(app, c.in)
		if err != nil {
			t.Errorf("permuteArgs(%q): %v", c.in, err)
			continue
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("permuteArgs(%q) (-want +got):\n%s", c.in, d)
		}
	}
}

// A flag after the remote command's first word is ambiguous (the
// command's, or nodeexec's?): refused, never run remotely.
func TestPermuteArgsRefusesFlagsAfterCommand(t *testing.T) {
	app := newApp(Streams{})
	for _, in := range [][]string{
		{"nodeexec", "run", "--all", "echo", "-n", "hi"},
		{"nodeexec", "shell", "n1", "bash", "--timeout", "5m"},
	} {
		_, err := permuteArgs(app, in)
		if err == nil || !strings.Contains(err.Error(), "after the command") || !strings.Contains(err.Error(), "-- ") {
			t.Errorf("permuteArgs(%q) = %v, want a refusal saying to use --", in, err)
		}
	}
}
