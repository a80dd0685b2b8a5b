package watcher

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/internal/rollout"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Defaults of the rollout fields of a NodeScript (v1alpha1.SetDefaults
// writes them).
const (
	defaultCanary     = v1alpha1.DefaultCanary
	defaultRetryLimit = v1alpha1.DefaultRetryLimit
)

// rolloutNode is what Decide needs to know of one node.
type rolloutNode struct {
	Name, UID string
	Labels    map[string]string
	// Ready is the node's Ready condition; a node that is not Ready is not started.
	Ready bool
	// Ignored is set when the node carries the NodeScript's
	// IgnoreAnnotation: it is not selected, as if in spec.excludeNodes.
	Ignored bool
	// Blocked is set when a pod matching spec.blockingPodSelector is on
	// the node, or its drain would be refused: it is not started (the
	// watcher sets it; see Decision.Blocked and DrainBlocked).
	Blocked bool
	// State is the node's recorded state for this NodeScript (DecodeState).
	State nodeState
}

// phaseCounts are the selected nodes per phase, for the current spec hash.
type phaseCounts struct {
	Nodes, Pending, Running, Succeeded, Failed, RolledBack, NotNeeded int
}

// decision is what the watcher does now.
type decision struct {
	// Hash is the spec hash the decision is for.
	Hash string
	// Start are the nodes to run the script on now, in order: never more
	// than MaxConcurrency minus the nodes running.
	Start []string
	// Verify are canary nodes whose soak time has passed and whose
	// VerifyScript has not yet passed (automatic promotion waits for them).
	Verify []string
	// Stage of the rollout, and the reason when it is Halted.
	Stage, HaltReason string
	Counts            phaseCounts
	// Hold, when set, is why nothing starts although the rollout is not
	// over: HoldPaused (spec.paused) or HoldOutsideWindow (spec.window is
	// closed; NextWindow is when it opens). Start and Verify are then empty.
	Hold       string
	NextWindow time.Time
	// WindowCloses is when the window open now closes (spec.window, set
	// by Decide; with spec.windowRefs, the calendars and spec.window
	// combined, set by the watcher's calendar step); zero when no window
	// applies, it is closed, or it does not close within OpeningsHorizon.
	WindowCloses time.Time
	// WindowReason, with Hold HoldOutsideWindow from spec.windowRefs, says
	// why: each calendar's state, or the one missing or unreadable.
	WindowReason string
	// Calendars is what each calendar of spec.windowRefs says now (set by
	// the watcher's calendar step; status.calendars).
	Calendars []v1alpha1.CalendarStatus
	// RunNow, when set, is when the run-now override (AnnotationRunNow)
	// that lets runs start while spec.window is closed ends.
	RunNow time.Time
	// Blocked lists the nodes held back by spec.blockingPodSelector, as
	// "NODE: NAMESPACE/POD": set by the watcher, which looks for blocking
	// pods on the nodes Decide would start (Decide itself makes no call).
	Blocked []string
	// DrainBlocked lists the nodes not cordoned because their drain would
	// be refused (spec.maintenance.drain), as "NODE: WHY": set by the
	// watcher (decideDrainable).
	DrainBlocked []string
	// NextStart, with Hold HoldPostCompleteDelay, is when the next node
	// may start (spec.rollout.postCompleteDelay).
	NextStart time.Time
	// Waiting, when set, says why nodes wait for the MaintenanceBudget
	// (set by the watcher's budgetGate, with Hold HoldBudget when nothing starts).
	Waiting string
	// Hooks, when spec.hooks is set, is status.hooks to write (set by the
	// watcher's rolloutHooks; the hold HookRunning or HookFailed while
	// spec.hooks.preRollout has not succeeded).
	Hooks *v1alpha1.HooksStatus
	// Gates is what the watcher saw of each of spec.gates (set by the
	// watcher, like Blocked; nil when it read none).
	Gates []v1alpha1.GateStatus
	// Canaries are the canary nodes, in order (set unless the rollout is
	// Complete before they are chosen).
	Canaries []string
	// Order is the selected nodes in the rollout's deterministic order
	// (NODESCRIPT_ORDINAL is a node's index in it).
	Order []string
	// Analysis is the last check of spec.rollout.analysis (status.analysis),
	// set by the watcher (analysis.go), not by Decide, which reads it from
	// the NodeScript's status.
	Analysis *v1alpha1.AnalysisStatus
}

// computeDecision computes the rollout's next step from the observed state: level
// based, so calling it again with the same inputs gives the same answer, and
// a watcher restarted at any moment continues where the nodes' records say.
// Nodes are taken in a deterministic order (a hash of node UID, NodeScript
// UID and spec hash), so repeated calls pick the same canaries and batches.
// now decides soak times, retry backoffs and whether the maintenance
// window is open. A paused NodeScript, or one whose window is closed,
// starts nothing (Decision.Hold says why); runs in progress count as
// before. A run-now override in effect at now (AnnotationRunNow, see
// RunNowUntil) lets runs start while the window is closed, not while
// paused. Errors come from an invalid spec. ns's spec is read with its
// defaults (v1alpha1.Defaulted); ns is not changed.
//
// Decide is one of the project's two rollout engines; the other is
// nodeexec.Runner's. They share the batch and error budget arithmetic
// (internal/rollout) and the stage rule, and differ in their defaults
// (canary 1 here, 0 there; error budget 0 here, none there; concurrency 1
// here, 20 there; 3 retries here, 0 there), in their order (a hash here,
// the targets' own there) and in what follows the canaries (soak, verify,
// analysis or manual promotion here; the rest at once there): see
// nodeexec/rollout.go, and TestWatcherEngineDifferences.
func computeDecision(ns *v1alpha1.NodeScript, nodes []rolloutNode, now time.Time) (decision, error) {
	d, err := decideRollout(ns, nodes, now)
	if err != nil || d.Stage == v1alpha1.StageComplete || d.Stage == v1alpha1.StageHalted {
		return d, err
	}
	if ns.Spec.Paused {
		d.Hold = v1alpha1.HoldPaused
	} else if open, opens, err := inWindow(ns.Spec.Window, now); err != nil {
		return decision{}, err
	} else if open {
		d.WindowCloses = opens
	} else {
		if until, set, err := nodescript.RunNowUntil(ns); err == nil && set && now.Before(until) {
			d.RunNow = until
		} else {
			d.Hold, d.NextWindow = v1alpha1.HoldOutsideWindow, opens
		}
	}
	if d.Hold != "" {
		d.Start, d.Verify = nil, nil
	}
	postCompleteDelay(ns, nodes, &d, now)
	return d, nil
}

// decideRollout is Decide without the holds (pause, maintenance window):
// its steps are select (the selected nodes in order, with their phase),
// count (the phases, and the failures), budget (halt on a failed canary
// or the error budget spent), promotion (which nodes may run: the
// canaries, then the promoted nodes batch by batch) and slots (how many
// of those start now).
func decideRollout(ns *v1alpha1.NodeScript, nodes []rolloutNode, now time.Time) (decision, error) {
	ns = v1alpha1.Defaulted(ns) // ns itself when the watcher read it (SetDefaults)
	if errs := v1alpha1.Validate(ns); len(errs) > 0 {
		return decision{}, errs.ToAggregate()
	}
	s := &ns.Spec
	d := decision{Hash: v1alpha1.SpecHash(s)}
	all := selectEntries(ns, nodes, d.Hash)
	d.Order = make([]string, len(all))
	for i, e := range all {
		d.Order[i] = e.Name
	}
	retryable := retryableFunc(int(*s.Retry.Limit)) // defaulted
	failures := countPhases(all, retryable, &d.Counts)
	if d.Counts.Nodes > 0 && d.Counts.Succeeded+d.Counts.NotNeeded == d.Counts.Nodes {
		d.Stage = v1alpha1.StageComplete
		return d, nil
	}
	canaries, rest := splitCanaries(all, int(*s.Rollout.Canary)) // defaulted
	for _, c := range canaries {
		d.Canaries = append(d.Canaries, c.Name)
	}
	if budgetStop(s, &d, canaries, failures, len(all), retryable) {
		return d, nil
	}
	allowed, stop, err := promotion(ns, &d, canaries, rest, len(all), retryable, now)
	if err != nil || stop {
		return d, err
	}
	d.Start = startable(allowed, openSlots(s, all, d.Counts.Running), d.Hash, retryable, now)
	return d, nil
}

// selectEntries is the select step: the nodes ns selects, in their
// deterministic order, with the phase they have for hash. The order key is
// sha256(nodeUID "/" nodeScriptUID "/" hash), its bytes compared as its
// hex string would be.
func selectEntries(ns *v1alpha1.NodeScript, nodes []rolloutNode, hash string) []entry {
	sel, _ := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector) // validated
	all := make([]entry, 0, len(nodes))
	suffix := "/" + string(ns.UID) + "/" + hash
	var buf []byte
	for i := range nodes {
		n := &nodes[i]
		if n.Ignored || !nodescript.Selects(&ns.Spec, sel, n.Name, n.Labels) {
			continue
		}
		buf = append(append(buf[:0], n.UID...), suffix...)
		all = append(all, entry{rolloutNode: n, key: sha256.Sum256(buf), phase: phaseFor(n.State, hash)})
	}
	slices.SortFunc(all, func(a, b entry) int { return bytes.Compare(a.key[:], b.key[:]) })
	return all
}

// phaseFor is the phase of a node in state s for the spec hash: Pending
// for another hash, Running while spec.hooks.afterRun has not passed.
func phaseFor(s nodeState, hash string) string {
	switch {
	case s.Hash != hash:
		return v1alpha1.PhasePending
	case nodescript.WaitsAfterRun(s):
		return v1alpha1.PhaseRunning // spec.hooks.afterRun not passed yet (annotations.go)
	}
	return s.Phase
}

// retryableFunc: an entry failed by the infrastructure, not by the script,
// with retries left of limit.
func retryableFunc(limit int) func(entry) bool {
	return func(e entry) bool {
		return e.phase == v1alpha1.PhaseFailed && e.State.Infrastructure && e.State.Attempts-e.State.AttemptsBefore <= limit
	}
}

// countPhases is the count step: c gets the entries per phase (a
// retryable failure counts as Pending); the result is the failures that
// count against the error budget.
func countPhases(all []entry, retryable func(entry) bool, c *phaseCounts) (failures int) {
	for _, e := range all {
		c.Nodes++
		switch {
		case e.phase == v1alpha1.PhaseRunning:
			c.Running++
		case e.phase == v1alpha1.PhaseSucceeded:
			c.Succeeded++
		case e.phase == v1alpha1.PhaseNotNeeded:
			c.NotNeeded++
		case e.phase == v1alpha1.PhaseRolledBack:
			c.RolledBack++
			failures++
		case retryable(e):
			c.Pending++
		case e.phase == v1alpha1.PhaseFailed:
			c.Failed++
			failures++
		default:
			c.Pending++
		}
	}
	return failures
}

// splitCanaries: the canaries are the first n entries in order that need
// the script (a node spec.checkScript found fine, NotNeeded, proves
// nothing about it); rest are the other entries that need it.
func splitCanaries(all []entry, n int) (canaries, rest []entry) {
	needing := make([]entry, 0, len(all))
	for _, e := range all {
		if e.phase != v1alpha1.PhaseNotNeeded {
			needing = append(needing, e)
		}
	}
	n = min(n, len(needing))
	return needing[:n], needing[n:]
}

// budgetStop is the budget step: it sets d's stage and reports true when
// the rollout stops here: a canary failed for good (Halted), the failures
// exceed the error budget (spec.rollout.maxFailures of total, Halted), or
// every node finished within it (Complete).
func budgetStop(s *v1alpha1.NodeScriptSpec, d *decision, canaries []entry, failures, total int, retryable func(entry) bool) bool {
	for _, c := range canaries {
		if (c.phase == v1alpha1.PhaseFailed && !retryable(c)) || c.phase == v1alpha1.PhaseRolledBack {
			d.Stage, d.HaltReason = v1alpha1.StageHalted, fmt.Sprintf("canary %s failed", c.Name)
			if c.State.Reason == v1alpha1.ReasonAnalysisFailed {
				d.HaltReason = analysisHaltReason(c.Name, c.State)
			}
			return true
		}
	}
	if budget := errorBudget(s.Rollout.MaxFailures, total); failures > budget {
		d.Stage, d.HaltReason = v1alpha1.StageHalted, fmt.Sprintf("%d nodes failed, more than the error budget of %d", failures, budget)
		return true
	}
	if d.Counts.Pending == 0 && d.Counts.Running == 0 && d.Counts.Nodes > 0 {
		// Every node finished, the failures within the error budget.
		d.Stage = v1alpha1.StageComplete
		return true
	}
	return false
}

// errorBudget is the failures a rollout of total nodes tolerates:
// maxFailures (a count, or a percentage of total rounded down), 0 when nil.
func errorBudget(maxFailures *intstr.IntOrString, total int) int {
	if maxFailures == nil {
		return 0
	}
	return rollout.Tolerated(*maxFailures, total) // validated
}

// promotion is the promotion step: which entries may run now. The
// canaries until they all succeeded; then, under manual promotion, the
// promoted nodes (none yet: AwaitingPromotion, stop), under automatic
// promotion the rest once the soak time, verifyScript and analysis passed
// (else Soaking, stop); the rest batch by batch.
func promotion(ns *v1alpha1.NodeScript, d *decision, canaries, rest []entry, total int, retryable func(entry) bool, now time.Time) (allowed []entry, stop bool, err error) {
	s := &ns.Spec
	canariesDone := true
	for _, c := range canaries {
		canariesDone = canariesDone && c.phase == v1alpha1.PhaseSucceeded
	}
	switch {
	case !canariesDone:
		d.Stage = v1alpha1.StageCanary
		return canaries, false, nil
	case s.Rollout.Promotion == v1alpha1.PromotionManual:
		promoted, err := promotedNodes(s.Rollout.PromoteTo)
		if err != nil {
			*d = decision{}
			return nil, true, err
		}
		if promoted == nil {
			d.Stage = v1alpha1.StageAwaitingPromotion
			return nil, true, nil
		}
		var eligible []entry
		for _, e := range rest {
			if promoted.Matches(labels.Set(e.Labels)) {
				eligible = append(eligible, e)
			}
		}
		d.Stage = v1alpha1.StageRolling
		return batch(eligible, s.Rollout.Batches, total, retryable), false, nil
	}
	if wait, verify := soaking(s, canaries, now); wait || analysisHolds(ns, d.Hash, canaries, now) {
		d.Stage, d.Verify = v1alpha1.StageSoaking, verify
		return nil, true, nil
	}
	d.Stage = v1alpha1.StageRolling
	return batch(rest, s.Rollout.Batches, total, retryable), false, nil
}

// openSlots is the slots step: how many more nodes may run now, with
// running of them running: spec.rollout.maxConcurrency (a count or a
// percentage of the selected nodes rounded up, at least 1; default 1),
// and with spec.maintenance.maxUnavailable no more than that many nodes
// out of service for us (running, or left cordoned by us after a failure).
func openSlots(s *v1alpha1.NodeScriptSpec, all []entry, running int) int {
	slots := concurrency(s.Rollout.MaxConcurrency, len(all)) - running
	if m := s.Maintenance; m != nil && m.MaxUnavailable != nil {
		maxUnavailable, _ := intstr.GetScaledValueFromIntOrPercent(m.MaxUnavailable, len(all), true)
		unavailable := 0
		for _, e := range all {
			if e.phase == v1alpha1.PhaseRunning || e.State.CordonedByUs {
				unavailable++
			}
		}
		slots = min(slots, max(maxUnavailable, 1)-unavailable)
	}
	return slots
}

// concurrency is maxConcurrency of total nodes (a percentage rounded up),
// at least 1; 1 when nil.
func concurrency(maxConcurrency *intstr.IntOrString, total int) int {
	if maxConcurrency == nil {
		return 1
	}
	return rollout.BatchSize(*maxConcurrency, total) // validated
}

// startable are the first of allowed, at most slots, that are due (pending
// and not skipped, or retryable with their backoff passed), Ready and not
// blocked.
func startable(allowed []entry, slots int, hash string, retryable func(entry) bool, now time.Time) []string {
	var start []string
	for _, e := range allowed {
		if slots <= 0 {
			break
		}
		due := (e.phase == v1alpha1.PhasePending && !skippedUntil(e.State, hash, now)) || (retryable(e) && (e.State.NextRetry == nil || !now.Before(*e.State.NextRetry)))
		if due && e.Ready && !e.Blocked {
			start = append(start, e.Name)
			slots--
		}
	}
	return start
}

// promotedNodes is the selector of nodes promoted by PromoteTo ("all" or a
// label selector), or nil when nothing is promoted yet.
func promotedNodes(to string) (labels.Selector, error) {
	switch to {
	case "":
		return nil, nil
	case "all":
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(to)
	if err != nil {
		return nil, fmt.Errorf("spec.rollout.promoteTo %q: %w", to, err)
	}
	return sel, nil
}

// entry is a selected node (a pointer into Decide's nodes, which it does
// not change) with its order key and its phase for the current hash.
type entry struct {
	*rolloutNode
	key   [sha256.Size]byte
	phase string
}

// soaking reports whether automatic promotion must still wait: the soak
// time since the last canary succeeded has not passed, or the VerifyScript
// has not yet passed on every canary (those due for it are returned).
func soaking(s *v1alpha1.NodeScriptSpec, canaries []entry, now time.Time) (bool, []string) {
	var last time.Time
	for _, c := range canaries {
		if c.State.Since.After(last) {
			last = c.State.Since
		}
	}
	if s.Rollout.SoakTime != nil && now.Before(last.Add(s.Rollout.SoakTime.Duration)) {
		return true, nil
	}
	if strings.TrimSpace(s.VerifyScript) == "" {
		return false, nil
	}
	var verify []string
	for _, c := range canaries {
		if !c.State.Verified {
			verify = append(verify, c.Name)
		}
	}
	return len(verify) > 0, verify
}

// batch limits entries to the batches started so far: the first batch, and
// each next one only when every node of the batches before it has finished
// (succeeded, or failed for good). Sizes are counts or percentages of total,
// rounded up, at least 1; the last size repeats. No batches: all entries.
func batch(entries []entry, batches []intstr.IntOrString, total int, retryable func(entry) bool) []entry {
	if len(batches) == 0 {
		return entries
	}
	finished := func(e entry) bool {
		return e.phase == v1alpha1.PhaseSucceeded || e.phase == v1alpha1.PhaseRolledBack || (e.phase == v1alpha1.PhaseFailed && !retryable(e))
	}
	pos := 0
	for i := 0; pos < len(entries); i++ {
		end := min(pos+rollout.BatchSize(rollout.Nth(batches, i), total), len(entries)) // validated
		for _, e := range entries[pos:end] {
			if !finished(e) {
				return entries[:end]
			}
		}
		pos = end
	}
	return entries
}
