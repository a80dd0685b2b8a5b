package watcher

import (
	"testing"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// FuzzSilenceMatchers: v1alpha1.SilenceMatchers (what Validate accepts and
// the watcher posts) never panics; what it accepts has at least one matcher
// that does not match the empty string, ends with the node's matcher when
// nodeLabel is set, and each matcher, written back, parses to itself; and
// Validate refuses the silence exactly when SilenceMatchers does.
func FuzzSilenceMatchers(f *testing.F) {
	for _, s := range [][3]string{
		{`alertname="KubeNodeNotReady"`, "", "node"},
		{`alertname=~"A|B"`, `severity!="info"`, "instance"},
		{"KubeNodeNotReady", "", ""},
		{`a=~".*"`, "", ""},
		{`foo="bar\"baz"`, `x!~"("`, "n"},
		{"", "", "node"},
	} {
		f.Add(s[0], s[1], s[2], "node-1")
	}
	f.Fuzz(func(t *testing.T, m1, m2, nodeLabel, node string) {
		if len(validation.IsDNS1123Subdomain(node)) > 0 {
			node = "node-1" // a node's name is a DNS subdomain
		}
		var ms []string
		for _, m := range []string{m1, m2} {
			if m != "" {
				ms = append(ms, m)
			}
		}
		sp := v1alpha1.Silence{URL: "http://am:9093", Matchers: ms, NodeLabel: nodeLabel}
		got, err := v1alpha1.SilenceMatchers(sp, node)
		ns := script(func(s *v1alpha1.NodeScriptSpec) {
			s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, Silences: []v1alpha1.Silence{sp}}
		})
		errs := v1alpha1.Validate(ns)
		if (err == nil) != (len(errs) == 0) {
			t.Fatalf("matchers %q, nodeLabel %q: SilenceMatchers says %v, Validate %v", ms, nodeLabel, err, errs)
		}
		if err != nil {
			return
		}
		nonEmpty := false
		for _, m := range got {
			nonEmpty = nonEmpty || !m.Matches("")
			back, perr := amlabels.ParseMatcher(m.String())
			if perr != nil || back.Name != m.Name || back.Type != m.Type || back.Value != m.Value {
				t.Fatalf("matcher %s written back parses to %v (%v)", m, back, perr)
			}
		}
		if !nonEmpty {
			t.Fatalf("accepted matchers %v all match the empty string", got)
		}
		if nodeLabel != "" {
			last := got[len(got)-1]
			if last.Name != nodeLabel || last.Value != node || last.Type != amlabels.MatchEqual {
				t.Fatalf("last matcher %v, want %s=%q", last, nodeLabel, node)
			}
		}
	})
}
