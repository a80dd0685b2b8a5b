package watcher

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// maintenanceHolders is the prefix of MaintenanceConditionType's message
// before the NodeScripts' names (comma-separated).
const maintenanceHolders = "held out of service by nodescript(s) "

// heldBy reports whether NodeScript ns's state s on a node holds the node
// out of service.
func heldBy(ns *v1alpha1.NodeScript, s nodeState) bool {
	return s.Phase == v1alpha1.PhaseRunning && (s.Maintenance != "" || s.Cordoned || disrupts(&ns.Spec))
}

// maintenanceCondition is MaintenanceConditionType for a node held by the
// NodeScripts named (none: False, InService). It is a pure function.
func maintenanceCondition(holders []string) *corev1.NodeCondition {
	if len(holders) == 0 {
		return &corev1.NodeCondition{Type: nodescript.MaintenanceConditionType, Status: corev1.ConditionFalse, Reason: v1alpha1.ReasonInService, Message: "no NodeScript holds the node out of service"}
	}
	slices.Sort(holders)
	return &corev1.NodeCondition{Type: nodescript.MaintenanceConditionType, Status: corev1.ConditionTrue, Reason: v1alpha1.ReasonHeldByNodeScript, Message: maintenanceHolders + strings.Join(holders, ", ")}
}

// conditionHolders are the NodeScripts a MaintenanceConditionType condition names.
func conditionHolders(c *corev1.NodeCondition) []string {
	if c == nil || c.Status != corev1.ConditionTrue {
		return nil
	}
	return strings.Split(strings.TrimPrefix(c.Message, maintenanceHolders), ", ")
}

// maintenanceConditions keeps MaintenanceConditionType on the nodes
// NodeScript ns holds, or that a condition names it (or a NodeScript gone)
// on: it is set from every NodeScript's state on the node. Only a change is
// written (patch on nodes/status), in parallel.
func (c *controller) maintenanceConditions(ctx context.Context, ns *v1alpha1.NodeScript, cached nodeSet, now time.Time) error {
	var (
		work    []func() error
		scripts []*v1alpha1.NodeScript
	)
	for _, n := range cached.all {
		s, ok := c.w.state(ctx, ns.Name, n)
		have := c.w.condition(v1alpha1.MaintenanceConditionName, n)
		names := conditionHolders(have)
		stale := false
		for _, h := range names {
			if _, exists, _ := c.scripts.GetByKey(h); h == ns.Name || !exists {
				stale = true
			}
		}
		if !(ok && heldBy(ns, s)) && !stale {
			continue
		}
		if scripts == nil {
			scripts = c.scriptList()
		}
		var holders []string
		for _, x := range scripts {
			if xs, ok := c.w.state(ctx, x.Name, n); ok && heldBy(x, xs) {
				holders = append(holders, x.Name)
			}
		}
		want := maintenanceCondition(holders)
		if sameCondition(have, want) || (have == nil && len(holders) == 0) {
			continue
		}
		work = append(work, func() error {
			return c.w.writeCondition(ctx, v1alpha1.MaintenanceConditionName, n.Name, have, want, now)
		})
	}
	return c.parallel(work)
}
