package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// status is phase 4: it writes ns's status (stage, counts, conditions) from
// the decision d taken at spec hash, with startErr, phase 3's pod creation
// errors, as the Progressing condition (PodCreateFailed); it sets the
// per-phase node metrics and records an Event on ns when the rollout
// becomes Halted or Complete.
func (c *controller) status(ctx context.Context, ns *v1alpha1.NodeScript, d decision, hash string, startErr error, now time.Time) error {
	st := ns.Status.DeepCopy()
	st.ObservedGeneration, st.SpecHash, st.Stage = ns.Generation, hash, d.Stage
	st.Nodes, st.Pending, st.Running = int32(d.Counts.Nodes), int32(d.Counts.Pending), int32(d.Counts.Running)
	st.Succeeded, st.Failed, st.RolledBack = int32(d.Counts.Succeeded), int32(d.Counts.Failed), int32(d.Counts.RolledBack)
	st.NotNeeded = int32(d.Counts.NotNeeded)
	st.Blocked, st.DrainBlocked = d.Blocked, d.DrainBlocked
	st.Analysis = d.Analysis
	st.Calendars = d.Calendars
	gen := ns.Generation
	switch d.Stage {
	case v1alpha1.StageHalted:
		reason := "ErrorBudgetExceeded"
		if strings.HasPrefix(d.HaltReason, "canary") {
			reason = "CanaryFailed"
		} else if strings.HasPrefix(d.HaltReason, v1alpha1.HaltDrainBlocked) {
			reason = v1alpha1.ReasonDrainBlocked
		} else if strings.HasPrefix(d.HaltReason, v1alpha1.ReasonAnalysisFailed) {
			reason = v1alpha1.ReasonAnalysisFailed
		}
		setCondition(st, v1alpha1.ConditionHalted, true, reason, d.HaltReason, gen, now)
		setCondition(st, v1alpha1.ConditionProgressing, false, reason, "halted: "+d.HaltReason, gen, now)
		setCondition(st, v1alpha1.ConditionComplete, false, reason, "halted", gen, now)
	case v1alpha1.StageComplete:
		setCondition(st, v1alpha1.ConditionHalted, false, "Complete", "", gen, now)
		setCondition(st, v1alpha1.ConditionProgressing, false, "Complete", "every selected node ran the script", gen, now)
		msg := fmt.Sprintf("%d nodes succeeded", d.Counts.Succeeded)
		if d.Counts.NotNeeded > 0 {
			msg += fmt.Sprintf(", %d did not need the script (checkScript)", d.Counts.NotNeeded)
		}
		if f := d.Counts.Failed + d.Counts.RolledBack; f > 0 {
			msg += fmt.Sprintf(", %d failed (within the error budget)", f)
		}
		setCondition(st, v1alpha1.ConditionComplete, true, "Complete", msg, gen, now)
	default:
		setCondition(st, v1alpha1.ConditionHalted, false, d.Stage, "", gen, now)
		progressing := d.Stage != v1alpha1.StageAwaitingPromotion || d.Counts.Running > 0
		msg := fmt.Sprintf("%d of %d nodes succeeded, %d running", d.Counts.Succeeded, d.Counts.Nodes, d.Counts.Running)
		if d.Stage == v1alpha1.StageAwaitingPromotion {
			msg += "; promote with: nodeexec promote " + ns.Name + " --to all"
		}
		msg += analysisNote(d)
		if !d.RunNow.IsZero() {
			msg += "; outside the maintenance window by a run-now override until " + d.RunNow.UTC().Format(time.RFC3339)
		}
		setCondition(st, v1alpha1.ConditionProgressing, progressing, d.Stage, msg, gen, now)
		setCondition(st, v1alpha1.ConditionComplete, false, d.Stage, "", gen, now)
	}
	st.NextWindow, st.NextStart = nil, nil
	c.w.metrics.postComplete.nextStart.WithLabelValues(ns.Name).Set(0)
	switch d.Hold {
	case v1alpha1.HoldPostCompleteDelay:
		st.NextStart = &metav1.Time{Time: d.NextStart}
		c.w.metrics.postComplete.nextStart.WithLabelValues(ns.Name).Set(float64(d.NextStart.Unix()))
		setCondition(st, v1alpha1.ConditionProgressing, true, v1alpha1.HoldPostCompleteDelay,
			fmt.Sprintf("spec.rollout.postCompleteDelay: the next node starts at %s (%d running)", d.NextStart.UTC().Format(time.RFC3339), d.Counts.Running), gen, now)
	case v1alpha1.HoldPaused:
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldPaused,
			fmt.Sprintf("paused: nothing new starts (%d running); resume with: nodeexec resume %s", d.Counts.Running, ns.Name), gen, now)
	case v1alpha1.HoldOutsideWindow:
		if !d.NextWindow.IsZero() {
			st.NextWindow = &metav1.Time{Time: d.NextWindow}
		}
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldOutsideWindow, windowHoldMessage(d), gen, now)
	}
	c.budgetStatus(ns, st, d, now)
	gateStatus(st, ns, d, now)
	c.forecastStatus(st, ns, d, now)
	hookStatus(st, ns, d, now)
	if startErr != nil {
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.ReasonPodCreate, tail(startErr.Error(), 512), gen, now)
	}
	for phase, v := range map[string]int{v1alpha1.PhasePending: d.Counts.Pending, v1alpha1.PhaseRunning: d.Counts.Running, v1alpha1.PhaseSucceeded: d.Counts.Succeeded, v1alpha1.PhaseFailed: d.Counts.Failed, v1alpha1.PhaseRolledBack: d.Counts.RolledBack, v1alpha1.PhaseNotNeeded: d.Counts.NotNeeded} {
		c.w.metrics.nodes.WithLabelValues(ns.Name, phase).Set(float64(v))
	}
	if ns.Status.Stage != st.Stage {
		switch st.Stage {
		case v1alpha1.StageHalted:
			c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonHalted, d.HaltReason)
		case v1alpha1.StageComplete:
			c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonComplete, "%d nodes succeeded", d.Counts.Succeeded)
		}
	}
	notes := c.notifyStatus(ns, st, d, hash, now)
	err := c.writeStatus(ctx, ns, st)
	c.notifyWritten(notes, err)
	return err
}

// writeStatus updates the status subresource when st differs from ns.Status.
func (c *controller) writeStatus(ctx context.Context, ns *v1alpha1.NodeScript, st *v1alpha1.NodeScriptStatus) error {
	if apiEqualStatus(&ns.Status, st) {
		return nil
	}
	// A merge patch of the whole status: the watcher is its only writer
	// (one leader), so it needs no resourceVersion and cannot conflict with
	// a spec change made meanwhile. An optional field now unset is written as
	// null, which removes it (an omitted one would be kept).
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	for _, optional := range []string{"nextWindow", "blocked", "notNeeded", "drainBlocked", "nextStart", "gates", "analysis", "calendars", "durations", "forecast", "notifications"} {
		if _, set := fields[optional]; !set {
			fields[optional] = nil
		}
	}
	patch, err := json.Marshal(map[string]any{"status": fields})
	if err != nil {
		return err
	}
	_, err = c.w.o.Dynamic.Resource(v1alpha1.Resource).Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status")
	if err != nil {
		return fmt.Errorf("updating status of nodescript %s: %w", ns.Name, err)
	}
	return nil
}

func apiEqualStatus(a, b *v1alpha1.NodeScriptStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func setCondition(st *v1alpha1.NodeScriptStatus, typ string, status bool, reason, msg string, gen int64, now time.Time) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
	})
}
