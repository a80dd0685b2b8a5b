package nodescripts

import (
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// What `nodeexec apply -f` refuses, and how it says so: each error names
// the document(s) and the fix, and none is another problem's symptom.
func TestParseNodeScriptsRefusals(t *testing.T) {
	doc := func(name, extra string) string {
		return "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n  nodeSelector: {}\n  script: 'true'\n" + extra
	}
	for _, c := range []struct {
		name, in string
		want     []string
		not      string
	}{
		{"one name twice", doc("a", "") + "---\n" + doc("b", "") + "---\n" + doc("a", "  timeout: 5m\n"),
			[]string{`documents 1 and 3: both are NodeScript "a"`, "give each its own metadata.name"}, ""},
		{"a ConfigMap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
			[]string{`document 1: apiVersion "v1" kind "ConfigMap": want apiVersion nodeexec.io/v1alpha1, kind NodeScript`}, "unknown field"},
		{"a timeout too large for a duration", doc("a", "  timeout: 100000000h\n"),
			[]string{`spec.timeout: Invalid value: "100000000h": too large: at most ` + v1alpha1.MaxTimeout.String()}, "want a duration such as"},
		{"a soak time too large", doc("a", "  rollout: {soakTime: 9999999999h}\n"),
			[]string{`spec.rollout.soakTime: Invalid value: "9999999999h": too large: at most 2562047h47m16s`}, ""},
		{"initial backoff above max", doc("a", "  retry: {initialBackoff: 10m, maxBackoff: 1s}\n"),
			[]string{"spec.retry.initialBackoff", "must be at most spec.retry.maxBackoff (1s, as set)"}, ""},
		{"initial backoff above the default max", doc("a", "  retry: {initialBackoff: 10m}\n"),
			[]string{"spec.retry.initialBackoff", "(5m0s, its default)"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseNodeScripts(strings.NewReader(c.in))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if c.not != "" && strings.Contains(err.Error(), c.not) {
				t.Errorf("error says %q:\n%v", c.not, err)
			}
		})
	}
	// Not refused: a syntax error still says what a duration looks like;
	// backoffs in order, or maxBackoff alone below the default first pause.
	if _, err := ParseNodeScripts(strings.NewReader(doc("a", "  timeout: 5 minutes\n"))); err == nil || !strings.Contains(err.Error(), "want a duration such as 30s") {
		t.Errorf("malformed timeout: %v", err)
	}
	for _, retry := range []string{"{initialBackoff: 1s, maxBackoff: 1s}", "{maxBackoff: 1s}", "{initialBackoff: 5m}"} {
		if _, err := ParseNodeScripts(strings.NewReader(doc("a", "  retry: "+retry+"\n"))); err != nil {
			t.Errorf("retry %s: %v", retry, err)
		}
	}
}

// Apply refuses two NodeScripts of one name before it asks the API server
// anything.
func TestApplyRefusesOneNameTwice(t *testing.T) {
	dyn := fakeDynamic(t)
	a, b := script(nil), script(nil)
	_, err := Apply(t.Context(), dyn, []*v1alpha1.NodeScript{a, b})
	if err == nil || !strings.Contains(err.Error(), `nodescript "fix": scripts[0] and scripts[1] have that name`) {
		t.Errorf("Apply = %v, want the two named", err)
	}
	if n := len(dyn.Actions()); n != 0 {
		t.Errorf("%d API calls, want none", n)
	}
}
