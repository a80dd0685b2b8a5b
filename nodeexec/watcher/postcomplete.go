package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// postComplete are the metrics of spec.maintenance.prePull,
// spec.rollout.postCompleteDelay and spec.postCompleteLabels.
type postComplete struct {
	prePulls  *prometheus.CounterVec
	labeled   *prometheus.CounterVec
	nextStart *prometheus.GaugeVec
}

func newPostCompleteMetrics() postComplete {
	return postComplete{
		prePulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeexec_watcher_prepulls_total",
			Help: "Pre-pulls of a run's image before the cordon (spec.maintenance.prePull), by NodeScript and result (pulled, failed).",
		}, []string{"nodescript", "result"}),
		labeled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeexec_watcher_post_complete_labels_total",
			Help: "Nodes given spec.postCompleteLabels after their success, by NodeScript and result (labeled, failed).",
		}, []string{"nodescript", "result"}),
		nextStart: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_next_start_timestamp_seconds",
			Help: "When the next node may start under spec.rollout.postCompleteDelay (Unix time), while nodes wait for it; 0 otherwise.",
		}, []string{"nodescript"}),
	}
}

func (m postComplete) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.prePulls, m.labeled, m.nextStart}
}

// postCompleteDelay holds d, decided for ns on nodes at now, while
// spec.rollout.postCompleteDelay has not passed since the last success:
// the latest NodeState.Since of the nodes Succeeded for d's hash, selected
// or no longer (a NotNeeded node took nothing out of service and is not
// waited for).
// It only holds a decision that would start a node: Start is emptied,
// Hold is HoldPostCompleteDelay and NextStart the time the delay ends.
// The times come from the nodes' records, so a restarted watcher waits
// the same. Pure.
func postCompleteDelay(ns *v1alpha1.NodeScript, nodes []rolloutNode, d *decision, now time.Time) {
	p := ns.Spec.Rollout.PostCompleteDelay
	if p == nil || p.Duration <= 0 || len(d.Start) == 0 || d.Hold != "" {
		return
	}
	var last time.Time
	for i := range nodes {
		// Selected or not: a node that left the selector after its success
		// (spec.postCompleteLabels matching a NotIn selector) was disrupted
		// all the same.
		if s := nodes[i].State; s.Hash == d.Hash && s.Phase == v1alpha1.PhaseSucceeded && s.Since.After(last) {
			last = s.Since
		}
	}
	if last.IsZero() {
		return
	}
	if next := last.Add(p.Duration); now.Before(next) {
		d.Start, d.Hold, d.NextStart = nil, v1alpha1.HoldPostCompleteDelay, next
	}
}

// wantsLabels reports whether node n, in state s for ns at hash, is due
// spec.postCompleteLabels it does not carry yet: s Succeeded (or
// NotNeeded) for hash; with a verifyScript under automatic promotion,
// verified too while the rollout is still at its canaries (stage Canary
// or Soaking), so that a canary whose verifyScript fails is never
// labeled. Pure.
func wantsLabels(ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState) bool {
	l := ns.Spec.PostCompleteLabels
	if len(l) == 0 || s.Hash != hash || (s.Phase != v1alpha1.PhaseSucceeded && s.Phase != v1alpha1.PhaseNotNeeded) {
		return false
	}
	if s.Phase == v1alpha1.PhaseSucceeded && strings.TrimSpace(ns.Spec.VerifyScript) != "" && !s.Verified &&
		ns.Spec.Rollout.Promotion != v1alpha1.PromotionManual &&
		(ns.Status.Stage == v1alpha1.StageCanary || ns.Status.Stage == v1alpha1.StageSoaking || ns.Status.Stage == "") {
		return false
	}
	for k, v := range l {
		if have, ok := n.Labels[k]; !ok || have != v {
			return true
		}
	}
	return false
}

// labelNode puts spec.postCompleteLabels on node n (one merge patch of its
// labels, which sets the values given and touches no other label), with
// an Event and the metric. RBAC: patch on nodes.
func (c *controller) labelNode(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) error {
	l := ns.Spec.PostCompleteLabels
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": l}})
	if err != nil {
		return err
	}
	if _, err := c.w.o.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}); err != nil {
		c.w.metrics.postComplete.labeled.WithLabelValues(ns.Name, "failed").Inc()
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonLabelFailed, "nodescript %s: spec.postCompleteLabels: %v", ns.Name, err)
		return fmt.Errorf("node %s: putting spec.postCompleteLabels: %w", n.Name, err)
	}
	c.w.metrics.postComplete.labeled.WithLabelValues(ns.Name, "labeled").Inc()
	c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonLabeled, "nodescript %s: labeled %s after its success (spec.postCompleteLabels)", ns.Name, formatLabels(l))
	return nil
}

// formatLabels is labels as "k=v, k=v", sorted by key.
func formatLabels(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ", ")
}
