package nodescripts

import (
	"strings"
	"testing"
)

func TestParseManifests(t *testing.T) {
	doc := `apiVersion: nodeexec.io/v1alpha1
kind: MaintenanceBudget
metadata: {name: workers}
spec:
  nodeSelector: {matchLabels: {pool: a}}
  maxUnavailable: 20%
---
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: fix}
spec:
  nodeSelector: {}
  script: "true"
  maintenance: {cordon: true}
  maintenanceBudget: workers
  exclusive: true
  priority: 10
`
	scripts, budgets, err := ParseManifests(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) != 1 || len(budgets) != 1 || budgets[0].Spec.MaxUnavailable.String() != "20%" || scripts[0].Spec.Priority != 10 || !scripts[0].Spec.Exclusive {
		t.Fatalf("scripts %+v budgets %+v", scripts, budgets)
	}
	// ParseNodeScripts alone still takes NodeScripts only.
	if _, err := ParseNodeScripts(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), "kind NodeScript") {
		t.Fatalf("ParseNodeScripts: %v, want the budget document refused", err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceBudget\nmetadata: {name: b}\nspec: {nodeSelector: {}, maxUnavailable: 0}\n", "document 1: maintenancebudget \"b\": spec.maxUnavailable: Required value"},
		{"apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceBudget\nmetadata: {name: b}\nspec: {nodeSelector: {}, maxUnavailable: 150%}\n", "spec.maxUnavailable: Invalid value: \"150%\""},
		{"apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceBudget\nmetadata: {name: b}\nspec: {nodeSelector: {}, maxUnavailable: 1, max: 2}\n", `unknown field "max"`},
		{"apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: fix}\nspec: {nodeSelector: {}, script: \"true\", maintenanceBudget: Not_A_Name}\n", "spec.maintenanceBudget: Invalid value"},
	} {
		if _, _, err := ParseManifests(strings.NewReader(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}
