package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func runtimeGVR(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

// budgetKeyPrefix starts the workqueue key of a MaintenanceBudget (a
// NodeScript's key is its name, a DNS label without '/').
const budgetKeyPrefix = "maintenancebudget/"

// budgetKey reports whether key is a MaintenanceBudget's, and its name.
func budgetKey(key string) (string, bool) { return strings.CutPrefix(key, budgetKeyPrefix) }

// budgetStatusRecheck is how often a MaintenanceBudget's status is counted
// again besides node, NodeScript and budget changes (kured's lock, on a
// DaemonSet the watcher does not watch, changes unseen otherwise).
const budgetStatusRecheck = 10 * time.Second

// budgetInformers returns the informers of MaintenanceBudgets and of
// system-upgrade-controller Plans from f, each nil when the API server
// does not serve the resource (found by a LIST of at most one object; a
// NodeScript naming a budget then starts nothing that disrupts, and no
// Plan counts). RBAC: list/watch on maintenancebudgets, patch on
// maintenancebudgets/status; list/watch on plans.upgrade.cattle.io.
func (w *Watcher) budgetInformers(ctx context.Context, f dynamicinformer.DynamicSharedInformerFactory) (budgets, plans cache.SharedIndexInformer) {
	log := logr.FromContextOrDiscard(ctx)
	served := func(gvr schema.GroupVersionResource) bool {
		_, err := w.o.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			log.Info("not watched: the API server does not serve it (or refused)", "resource", gvr.String(), "err", err.Error())
		}
		return err == nil
	}
	if served(v1alpha1.BudgetResource) {
		budgets = f.ForResource(v1alpha1.BudgetResource).Informer()
	}
	if served(planResource) {
		plans = f.ForResource(planResource).Informer()
	}
	return budgets, plans
}

// reconcileBudget counts MaintenanceBudget name (CountBudget, under the
// ledger's lock) and writes its status when it changed, with the metrics
// nodeexec_watcher_budget_unavailable and _max. RBAC: patch on
// maintenancebudgets/status.
func (c *controller) reconcileBudget(ctx context.Context, name string) (time.Duration, error) {
	if c.budgets == nil {
		return 0, nil
	}
	if _, exists, _ := c.budgets.GetByKey(name); !exists {
		c.w.metrics.budgetUnavailable.DeleteLabelValues(name)
		c.w.metrics.budgetMax.DeleteLabelValues(name)
		return 0, nil
	}
	b, err := c.getBudget(name)
	if err != nil {
		return 0, err
	}
	cached, err := c.listNodes("")
	if err != nil {
		return 0, err
	}
	now := c.w.o.Clock.Now()
	scripts := c.scriptList()
	c.w.ledger.mu.Lock()
	held := c.holders(ctx, scripts, cached)
	c.w.ledger.mu.Unlock()
	st := v1alpha1.MaintenanceBudgetStatus{ObservedGeneration: b.Generation}
	src, err := c.budgetSources(ctx, now)
	var count budgetCount
	if err == nil {
		count, err = countBudget(b, cached.all, src, held)
	}
	if err != nil {
		st.Error = err.Error()
	} else {
		st.Selected, st.Unavailable, st.MaxUnavailable = int32(count.Selected), int32(count.Unavailable()), int32(count.Max)
		for _, n := range sortedKeys(count.Reasons) {
			st.Nodes = append(st.Nodes, v1alpha1.BudgetNode{Name: n, Reasons: count.Reasons[n]})
		}
		c.w.metrics.budgetUnavailable.WithLabelValues(name).Set(float64(count.Unavailable()))
		c.w.metrics.budgetMax.WithLabelValues(name).Set(float64(count.Max))
	}
	old, _ := json.Marshal(b.Status)
	cur, _ := json.Marshal(st)
	if string(old) != string(cur) {
		fields := map[string]any{}
		_ = json.Unmarshal(cur, &fields)
		for _, optional := range []string{"nodes", "error"} {
			if _, set := fields[optional]; !set {
				fields[optional] = nil
			}
		}
		patch, _ := json.Marshal(map[string]any{"status": fields})
		if _, err := c.w.o.Dynamic.Resource(v1alpha1.BudgetResource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status"); err != nil {
			return 0, fmt.Errorf("updating status of maintenancebudget %s: %w", name, err)
		}
	}
	return budgetStatusRecheck, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}
