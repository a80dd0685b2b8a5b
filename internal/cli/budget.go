package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// applyManifests applies what nodeexec apply read: the MaintenanceBudgets
// are checked by the API server (dry-run) before any NodeScript is
// applied, and applied after them, so that a refused budget applies
// nothing. One line per object, as kubectl apply prints.
func applyManifests(ctx context.Context, out io.Writer, dyn dynamic.Interface, scripts []*v1alpha1.NodeScript, budgets []*v1alpha1.MaintenanceBudget) error {
	if len(budgets) > 0 {
		if _, err := nodescripts.ApplyBudgets(ctx, dyn, budgets, true); err != nil {
			return err
		}
	}
	if len(scripts) > 0 {
		results, err := nodescripts.Apply(ctx, dyn, scripts)
		for i, r := range results {
			fmt.Fprintf(out, "nodescript.nodeexec.io/%s %s\n", scripts[i].Name, r)
		}
		if err != nil {
			return err
		}
	}
	if len(budgets) > 0 {
		results, err := nodescripts.ApplyBudgets(ctx, dyn, budgets, false)
		for i, r := range results {
			fmt.Fprintf(out, "maintenancebudget.nodeexec.io/%s %s\n", budgets[i].Name, r)
		}
		return err
	}
	return nil
}

// printBudget prints the NodeScript's budget, exclusivity and priority
// lines of nodeexec status: the budget's count and the nodes out of
// service with why.
func printBudget(w io.Writer, rep *nodescripts.Report) {
	s := rep.NodeScript.Spec
	if s.Exclusive {
		fmt.Fprintln(w, "exclusive: never runs on a node while another NodeScript runs there")
	}
	if s.MaintenanceBudget == "" {
		if s.Priority != 0 {
			fmt.Fprintf(w, "priority: %d (no maintenanceBudget: it orders nothing)\n", s.Priority)
		}
		return
	}
	fmt.Fprintf(w, "maintenanceBudget: %s, priority %d", s.MaintenanceBudget, s.Priority)
	switch b := rep.Budget; {
	case rep.BudgetError != "":
		fmt.Fprintf(w, ": %s (closed: no node that it covers starts)\n", rep.BudgetError)
	case b == nil:
		fmt.Fprintln(w)
	case b.Status.Error != "":
		fmt.Fprintf(w, ": cannot be counted: %s (closed)\n", b.Status.Error)
	default:
		fmt.Fprintf(w, ": %d of %d selected nodes out of service (maxUnavailable %d)", b.Status.Unavailable, b.Status.Selected, b.Status.MaxUnavailable)
		var nodes []string
		for _, n := range b.Status.Nodes {
			nodes = append(nodes, n.Name+" ("+strings.Join(n.Reasons, ", ")+")")
		}
		if len(nodes) > 0 {
			fmt.Fprintf(w, ": %s", strings.Join(nodes, ", "))
		}
		fmt.Fprintln(w)
	}
}
