package nodescripts

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// ParseManifests is ParseNodeScripts accepting MaintenanceBudget documents
// too (apiVersion nodeexec.io/v1alpha1, kind MaintenanceBudget), each
// decoded strictly and checked with v1alpha1.ValidateBudget; all errors of
// all documents are returned together.
func ParseManifests(r io.Reader) ([]*v1alpha1.NodeScript, []*v1alpha1.MaintenanceBudget, error) {
	budgets := []*v1alpha1.MaintenanceBudget{}
	scripts, err := parseDocuments(r, &budgets, nil)
	if err != nil {
		return nil, nil, err
	}
	return scripts, budgets, nil
}

// parseBudget decodes document i as a MaintenanceBudget into budgets, or
// returns why not.
func parseBudget(i int, doc []byte, budgets *[]*v1alpha1.MaintenanceBudget) []error {
	b := &v1alpha1.MaintenanceBudget{}
	if err := yaml.UnmarshalStrict(doc, b); err != nil {
		return []error{fmt.Errorf("document %d: %w", i, err)}
	}
	for _, o := range *budgets {
		if o.Name == b.Name && b.Name != "" {
			return []error{fmt.Errorf("document %d: MaintenanceBudget %q is in another document too: give each its own metadata.name", i, b.Name)}
		}
	}
	if fe := v1alpha1.ValidateBudget(b); len(fe) > 0 {
		return []error{fmt.Errorf("document %d: maintenancebudget %q: %w", i, b.Name, fe.ToAggregate())}
	}
	*budgets = append(*budgets, b)
	return nil
}

// ApplyBudgets creates or updates each MaintenanceBudget with server-side
// apply (field manager "nodeexec"), after v1alpha1.ValidateBudget and a
// server-side dry-run of every one (the CRD's schema and CEL rules), so
// that nothing is applied when any is refused; with dryRun, only checks.
// It returns "created", "configured" or "unchanged" per budget ("checked"
// with dryRun). RBAC: get, patch on maintenancebudgets.
func ApplyBudgets(ctx context.Context, dyn dynamic.Interface, budgets []*v1alpha1.MaintenanceBudget, dryRun bool) ([]string, error) {
	res := dyn.Resource(v1alpha1.BudgetResource)
	objs := make([]*unstructured.Unstructured, len(budgets))
	for i, b := range budgets {
		if fe := v1alpha1.ValidateBudget(b); len(fe) > 0 {
			return nil, fmt.Errorf("maintenancebudget %q: %w", b.Name, fe.ToAggregate())
		}
		cp := b.DeepCopy()
		cp.Status = v1alpha1.MaintenanceBudgetStatus{}
		cp.APIVersion, cp.Kind = v1alpha1.GroupVersion.String(), "MaintenanceBudget"
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		objs[i] = u
	}
	return applyChecked(ctx, res, "maintenancebudget", "MaintenanceBudget", objs, dryRun)
}

// reportBudget reads ns's MaintenanceBudget for Status: nil and "" without
// one; nil and why when it cannot be read. RBAC: get on maintenancebudgets.
func reportBudget(ctx context.Context, dyn dynamic.Interface, ns *v1alpha1.NodeScript) (*v1alpha1.MaintenanceBudget, string) {
	name := ns.Spec.MaintenanceBudget
	if name == "" {
		return nil, ""
	}
	u, err := dyn.Resource(v1alpha1.BudgetResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Sprintf("maintenancebudget %s: %v", name, err)
	}
	b := &v1alpha1.MaintenanceBudget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
		return nil, fmt.Sprintf("maintenancebudget %s: %v", name, err)
	}
	return b, ""
}
