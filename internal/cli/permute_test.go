package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPermuteArgs(t *testing.T) {
	app := newApp(Streams{})
	for _, c := range []struct{ in, want []string }{
		{[]string{"nodeexec", "promote", "fix", "--to", "all"}, []string{"nodeexec", "promote", "--to", "all", "fix"}},
		{[]string{"nodeexec", "--kubeconfig", "k", "status", "fix", "-o", "json"}, []string{"nodeexec", "--kubeconfig", "k", "status", "-o", "json", "fix"}},
		{[]string{"nodeexec", "apply", "-f", "x.yaml"}, []string{"nodeexec", "apply", "-f", "x.yaml"}},
		{[]string{"nodeexec", "promote", "fix", "--to=pool=a"}, []string{"nodeexec", "promote", "--to=pool=a", "fix"}},
		// run keeps its order: its command follows --.
		{[]string{"nodeexec", "run", "--all", "--", "ls", "-l"}, []string{"nodeexec", "run", "--all", "--", "ls", "-l"}},
		{[]string{"nodeexec", "watch", "--leader-elect", "--metrics-bind-address", ":8080"}, []string{"nodeexec", "watch", "--leader-elect", "--metrics-bind-address", ":8080"}},
	} {
		if d := cmp.Diff(c.want, permuteArgs(app, c.in)); d != "" {
			t.Errorf("permuteArgs(%q) (-want +got):\n%s", c.in, d)
		}
	}
}
