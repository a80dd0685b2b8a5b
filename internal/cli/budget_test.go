package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintBudget(t *testing.T) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	ns.Spec.MaintenanceBudget, ns.Spec.Priority, ns.Spec.Exclusive = "workers", 5, true
	b := &v1alpha1.MaintenanceBudget{Status: v1alpha1.MaintenanceBudgetStatus{Selected: 3, Unavailable: 1, MaxUnavailable: 1,
		Nodes: []v1alpha1.BudgetNode{{Name: "n1", Reasons: []string{"Unschedulable", "KuredLock"}}}}}
	var out bytes.Buffer
	printBudget(&out, &nodescripts.Report{NodeScript: ns, Budget: b})
	want := "exclusive: never runs on a node while another NodeScript runs there\n" +
		"maintenanceBudget: workers, priority 5: 1 of 3 selected nodes out of service (maxUnavailable 1): n1 (Unschedulable, KuredLock)\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printBudget(&out, &nodescripts.Report{NodeScript: ns, BudgetError: "maintenancebudget workers: not found"})
	if !strings.Contains(out.String(), "not found (closed") {
		t.Fatalf("got %q", out.String())
	}
}
