package watcher

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Bounds of the blocking-pod checks (spec.blockingPodSelector).
const (
	// maxBlockerLists is the most pod lists one reconcile makes to check
	// the nodes it would start: the nodes past it wait for the next one.
	maxBlockerLists = 32
	// blockedRecheck is how soon a NodeScript with a blocked node is
	// looked at again.
	blockedRecheck = 5 * time.Second
)

// blocker returns the first pod on node matching sel that is not yet
// Succeeded or Failed (a terminating pod still runs, so it still blocks),
// as "NAMESPACE/NAME", or "" when there is none. RBAC: list pods
// (cluster-wide).
func (c *controller) blocker(ctx context.Context, sel *metav1.LabelSelector, node string) (string, error) {
	s, err := metav1.LabelSelectorAsSelector(sel) // validated
	if err != nil {
		return "", err
	}
	pods, err := c.w.o.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: s.String(), FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return "", fmt.Errorf("node %s: listing pods matching spec.blockingPodSelector: %w", node, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return p.Namespace + "/" + p.Name, nil
		}
	}
	return "", nil
}

// decideUnblocked is Decide with spec.blockingPodSelector applied: each
// node Decide would start is checked for a blocking pod (blocker); a
// blocked node is marked Blocked in nodes and Decide is asked again, so
// its slot goes to the next node. At most MaxBlockerLists nodes are
// checked; the start list is cut to the nodes checked. d.Blocked lists the
// blocked nodes ("NODE: NAMESPACE/POD"), sorted; a node newly blocked
// (not in ns's status) gets an Event. With no selector it is Decide.
func (c *controller) decideUnblocked(ctx context.Context, ns *v1alpha1.NodeScript, nodes []rolloutNode, cached nodeSet, now time.Time) (decision, error) {
	d, err := computeDecision(ns, nodes, now)
	sel := ns.Spec.BlockingPodSelector
	if err != nil || sel == nil {
		return d, err
	}
	index := map[string]int{}
	for i, n := range nodes {
		index[n.Name] = i
	}
	checked := map[string]bool{}
	var blocked []string
	for lists := 0; ; {
		var fresh []string
		for _, node := range d.Start {
			if !checked[node] {
				fresh = append(fresh, node)
			}
		}
		if len(fresh) == 0 || lists >= maxBlockerLists {
			break
		}
		newly := false
		for _, node := range fresh {
			if lists >= maxBlockerLists {
				break
			}
			lists++
			checked[node] = true
			pod, err := c.blocker(ctx, sel, node)
			if err != nil {
				return decision{}, err
			}
			if pod != "" {
				nodes[index[node]].Blocked = true
				blocked = append(blocked, node+": "+pod)
				newly = true
				if n := cached.byName[node]; n != nil && !slices.Contains(ns.Status.Blocked, node+": "+pod) {
					c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonBlockedByPod, "nodescript %s: not started while pod %s (matching spec.blockingPodSelector) is on the node", ns.Name, pod)
				}
			}
		}
		if !newly {
			break
		}
		if d, err = computeDecision(ns, nodes, now); err != nil {
			return decision{}, err
		}
	}
	d.Start = slices.DeleteFunc(d.Start, func(node string) bool { return !checked[node] })
	slices.Sort(blocked)
	d.Blocked = blocked
	return d, nil
}
