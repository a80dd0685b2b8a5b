package watcher

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The run forecast (docs/nodescript-forecast.md): the watcher learns how
// long each step of a node's maintenance takes under a NodeScript
// (status.durations), keeps back the nodes whose expected run would not end
// before the maintenance window closes (fitWindow), and publishes the
// rollout's expected course (status.forecast).

// forecastOpeningsN bounds the openings of the window(s) a forecast looks
// at: a rollout that needs more is reported as needing more than this many.
const forecastOpeningsN = 100

// forecastMemo is what the process keeps of the forecast per NodeScript:
// the learned durations (loaded from status.durations on first use, then
// the record the status is written from, so that a status the cache does
// not show yet loses no sample), the window last reported too short, and
// the forecast to write.
type forecastMemo struct {
	mu        sync.Mutex
	durations map[string]*v1alpha1.Durations
	tooShort  map[string]tooShort
	last      map[string]*v1alpha1.Forecast
}

// tooShort is a window in which no node fit: when it closes, and why.
type tooShort struct {
	closes time.Time
	msg    string
}

// learn adds a sample of step (a v1alpha1.Step* constant) of d to what
// the process knows of ns's durations. d is recorded in whole seconds,
// rounded up; a negative d is not a sample.
func (w *Watcher) learn(ns *v1alpha1.NodeScript, step string, d time.Duration) {
	if d < 0 {
		return
	}
	m := &w.forecasts
	m.mu.Lock()
	defer m.mu.Unlock()
	durs := m.loaded(ns)
	sd := stepOf(durs, step)
	if sd == nil {
		return
	}
	if *sd == nil {
		*sd = &v1alpha1.StepDurations{}
	}
	addSample(*sd, int64(math.Ceil(d.Seconds())))
	w.metrics.stepP95.WithLabelValues(ns.Name, step).Set(float64((*sd).P95))
}

// loaded is ns's durations, loaded from its status on first use. m.mu held.
func (m *forecastMemo) loaded(ns *v1alpha1.NodeScript) *v1alpha1.Durations {
	if m.durations == nil {
		m.durations = map[string]*v1alpha1.Durations{}
	}
	d := m.durations[ns.Name]
	if d == nil {
		d = ns.Status.Durations.DeepCopy()
		if d == nil {
			d = &v1alpha1.Durations{}
		}
		m.durations[ns.Name] = d
	}
	return d
}

// durationsOf is a copy of what the process knows of ns's durations
// (status.durations after a restart); nil when nothing was learned.
func (w *Watcher) durationsOf(ns *v1alpha1.NodeScript) *v1alpha1.Durations {
	m := &w.forecasts
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.loaded(ns)
	if *d == (v1alpha1.Durations{}) {
		return nil
	}
	return d.DeepCopy()
}

// forgetForecast drops what the process keeps of NodeScript name's forecast.
func (w *Watcher) forgetForecast(name string) {
	m := &w.forecasts
	m.mu.Lock()
	delete(m.durations, name)
	delete(m.tooShort, name)
	delete(m.last, name)
	m.mu.Unlock()
	w.metrics.stepP95.DeletePartialMatch(prometheus.Labels{"nodescript": name})
	w.metrics.forecastETA.DeleteLabelValues(name)
	w.metrics.windowTooShort.DeleteLabelValues(name)
}

// stepOf points at step's record in d; nil for an unknown step.
func stepOf(d *v1alpha1.Durations, step string) **v1alpha1.StepDurations {
	switch step {
	case v1alpha1.StepCheck:
		return &d.Check
	case v1alpha1.StepDrain:
		return &d.Drain
	case v1alpha1.StepRun:
		return &d.Run
	case v1alpha1.StepReboot:
		return &d.Reboot
	case v1alpha1.StepVerify:
		return &d.Verify
	}
	return nil
}

// addSample appends secs to sd's samples, keeps the newest
// v1alpha1.MaxDurationSamples, and computes P50 and P95 again. Pure.
func addSample(sd *v1alpha1.StepDurations, secs int64) {
	sd.Samples = append(sd.Samples, secs)
	if over := len(sd.Samples) - v1alpha1.MaxDurationSamples; over > 0 {
		sd.Samples = slices.Clone(sd.Samples[over:])
	}
	sd.P50, sd.P95 = percentile(sd.Samples, 50), percentile(sd.Samples, 95)
}

// percentile is the p-th percentile (0 < p <= 100) of samples by nearest
// rank: the smallest sample at or above p% of them; 0 when there are none.
// Pure.
func percentile(samples []int64, p int) int64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[min(max(rank, 1), len(s))-1]
}

// podDuration is how long a finished pod took: from its creation to the
// last of its containers' finish times (now when none is recorded, as
// for a pod that was never started).
func podDuration(pod *corev1.Pod, now time.Time) time.Duration {
	var end time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(end) {
			end = t.FinishedAt.Time
		}
	}
	if end.IsZero() {
		end = now
	}
	return end.Sub(pod.CreationTimestamp.Time)
}

// learnPod records the duration of a finished check, run or verify pod of
// ns whose result (finish's: succeeded, failed, timeout, infrastructure)
// was recorded. Infrastructure failures say nothing of the script's
// duration and are not samples; nor are rollbacks.
func (c *controller) learnPod(ns *v1alpha1.NodeScript, action string, pod *corev1.Pod, result string, now time.Time) {
	if result == "infrastructure" {
		return
	}
	step := map[string]string{v1alpha1.ActionCheck: v1alpha1.StepCheck, v1alpha1.ActionRun: v1alpha1.StepRun, v1alpha1.ActionVerify: v1alpha1.StepVerify}[action]
	if step != "" {
		c.w.learn(ns, step, podDuration(pod, now))
	}
}

// windowMargin is spec.rollout.windowMargin, defaulted (v1alpha1.DefaultWindowMargin).
func windowMargin(ns *v1alpha1.NodeScript) time.Duration {
	return v1alpha1.Defaulted(ns).Spec.Rollout.WindowMargin.Duration
}

// expected is how long a node in state s is expected to take for ns at
// hash, summing one statistic (pick: p50 or p95) of the steps that apply
// to it: check (spec.checkScript, unless the node was checked for hash),
// drain (spec.maintenance.drain), run, reboot (spec.reboot Always or
// IfRequired) and verify (spec.verifyScript). A step with no sample counts
// 0; known is false while the run has none (nothing learned yet). Pure.
func expected(ns *v1alpha1.NodeScript, hash string, durs *v1alpha1.Durations, s nodeState, pick func(*v1alpha1.StepDurations) int64) (d time.Duration, known bool) {
	if durs == nil || durs.Run == nil || len(durs.Run.Samples) == 0 {
		return 0, false
	}
	sp := &ns.Spec
	steps := []*v1alpha1.StepDurations{durs.Run}
	if strings.TrimSpace(sp.CheckScript) != "" && !(s.Hash == hash && s.Checked) {
		steps = append(steps, durs.Check)
	}
	if m := sp.Maintenance; m != nil && m.Drain != nil {
		steps = append(steps, durs.Drain)
	}
	if sp.Reboot == v1alpha1.RebootAlways || sp.Reboot == v1alpha1.RebootIfRequired {
		steps = append(steps, durs.Reboot)
	}
	if strings.TrimSpace(sp.VerifyScript) != "" {
		steps = append(steps, durs.Verify)
	}
	var secs int64
	for _, st := range steps {
		if st != nil && len(st.Samples) > 0 {
			secs += pick(st)
		}
	}
	return time.Duration(secs) * time.Second, true
}

func p50(s *v1alpha1.StepDurations) int64 { return s.P50 }
func p95(s *v1alpha1.StepDurations) int64 { return s.P95 }

// fits applies spec.rollout.fitWindow to d: while a window applies
// (d.WindowCloses set) it drops from d.Start every node whose expected
// duration (p95, see expected) plus windowMargin would end after the window
// closes. With no sample of the run yet nothing is dropped (the first runs
// are how the durations are learned). When it drops every node, the hold
// is HoldWindowTooShort, with a WindowTooShort Event once per window. Pure
// but for durs; returns the nodes dropped and, when held, the message.
func fits(ns *v1alpha1.NodeScript, d *decision, nodes []rolloutNode, durs *v1alpha1.Durations, now time.Time) (dropped []string, msg string) {
	if d.WindowCloses.IsZero() || len(d.Start) == 0 || d.Hold != "" {
		return nil, ""
	}
	if f := ns.Spec.Rollout.FitWindow; f != nil && !*f {
		return nil, ""
	}
	byName := make(map[string]*rolloutNode, len(d.Start))
	for i := range nodes {
		if slices.Contains(d.Start, nodes[i].Name) {
			byName[nodes[i].Name] = &nodes[i]
		}
	}
	margin := windowMargin(ns)
	var kept []string
	var need time.Duration
	for _, name := range d.Start {
		var s nodeState
		if n := byName[name]; n != nil {
			s = n.State
		}
		exp, known := expected(ns, d.Hash, durs, s, p95)
		if !known || !now.Add(exp+margin).After(d.WindowCloses) {
			kept = append(kept, name)
			continue
		}
		dropped, need = append(dropped, name), exp
	}
	d.Start = kept
	if len(kept) > 0 || len(dropped) == 0 {
		return dropped, ""
	}
	d.Hold = v1alpha1.HoldWindowTooShort
	msg = fmt.Sprintf("no node fits before the maintenance window closes at %s: a node is expected to take %s (p95 of the learned steps) plus spec.rollout.windowMargin %s; %d node(s) wait for the next opening",
		d.WindowCloses.UTC().Format(time.RFC3339), need, margin, len(dropped))
	return dropped, msg
}

// fitWindow is the step after Decide that applies spec.rollout.fitWindow
// (fits) and computes the forecast (forecast) kept for the status. It
// returns the decision and, while held, when to look again (the window's
// close). The WindowTooShort Event is recorded once per window (the status
// condition keeps the window's close, so a restarted watcher does not
// record it again).
func (c *controller) fitWindow(ctx context.Context, ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, now time.Time) (decision, time.Time) {
	durs := c.w.durationsOf(ns)
	_, msg := fits(ns, &d, nodes, durs, now)
	var recheck time.Time
	m := &c.w.forecasts
	if d.Hold == v1alpha1.HoldWindowTooShort {
		recheck = d.WindowCloses
		m.mu.Lock()
		if m.tooShort == nil {
			m.tooShort = map[string]tooShort{}
		}
		prev, seen := m.tooShort[ns.Name]
		m.tooShort[ns.Name] = tooShort{closes: d.WindowCloses, msg: msg}
		m.mu.Unlock()
		closes := d.WindowCloses.UTC().Format(time.RFC3339)
		cond := statusCondition(ns.Status.Conditions, v1alpha1.ConditionProgressing)
		reported := (seen && prev.closes.Equal(d.WindowCloses)) ||
			(cond != nil && cond.Reason == v1alpha1.HoldWindowTooShort && strings.Contains(cond.Message, closes))
		if !reported {
			c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonWindowTooShort, msg)
			c.w.metrics.windowTooShort.WithLabelValues(ns.Name).Inc()
		}
	}
	f := c.forecast(ns, d, nodes, durs, now)
	m.mu.Lock()
	if m.last == nil {
		m.last = map[string]*v1alpha1.Forecast{}
	}
	m.last[ns.Name] = f
	m.mu.Unlock()
	return d, recheck
}

// statusCondition is the condition of type typ in conds, or nil.
func statusCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// forecastStatus sets st.Durations, st.Forecast and, with the hold
// HoldWindowTooShort, the Progressing condition, from what fitWindow kept
// for ns; and the ETA metric.
func (c *controller) forecastStatus(st *v1alpha1.NodeScriptStatus, ns *v1alpha1.NodeScript, d decision, now time.Time) {
	st.Durations = c.w.durationsOf(ns)
	m := &c.w.forecasts
	m.mu.Lock()
	f, ts := m.last[ns.Name], m.tooShort[ns.Name]
	m.mu.Unlock()
	st.Forecast = nil
	if d.Stage != v1alpha1.StageComplete && d.Stage != v1alpha1.StageHalted && f != nil {
		st.Forecast = f.DeepCopy()
	}
	eta := 0.0
	if st.Forecast != nil && st.Forecast.ETA != nil {
		eta = float64(st.Forecast.ETA.Unix())
	}
	c.w.metrics.forecastETA.WithLabelValues(ns.Name).Set(eta)
	if d.Hold == v1alpha1.HoldWindowTooShort {
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldWindowTooShort, ts.msg, ns.Generation, now)
	}
}

// forecast is fitWindow's forecast for ns (d its decision; nil when the
// rollout is over or nothing is left), over the next openings of its
// window(s) (forecastOpenings); an error reading them is the message.
func (c *controller) forecast(ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, durs *v1alpha1.Durations, now time.Time) *v1alpha1.Forecast {
	if d.Stage == v1alpha1.StageComplete || d.Stage == v1alpha1.StageHalted {
		return nil
	}
	p := plan(ns, d, nodes, durs)
	if p.left == 0 {
		return nil
	}
	if !p.known {
		return &v1alpha1.Forecast{NodesLeft: int32(p.left), Message: fmt.Sprintf("%d node(s) left; no ETA until a run's duration is learned", p.left)}
	}
	// From the minute: the forecast, and so the status, changes at most
	// once a minute while nodes run, not on every reconcile.
	from := now.Truncate(time.Minute)
	ops, loc, err := c.forecastOpenings(ns, from, min(p.waves+1, forecastOpeningsN))
	if err != nil {
		return &v1alpha1.Forecast{NodesLeft: int32(p.left), Message: fmt.Sprintf("%d node(s) left; no ETA: reading the maintenance windows: %v", p.left, err)}
	}
	return schedule(ns, p, ops, loc, from)
}

// rolloutPlan is what a forecast counts: the nodes left, how many run at
// once, the waves they make, and the per-node durations.
type rolloutPlan struct {
	left, concurrency, waves int
	known                    bool // a run's duration was learned
	p50, p95                 time.Duration
}

// plan counts ns's rollout left at decision d: the nodes pending or
// running, the concurrency (spec.rollout.maxConcurrency, bounded by
// spec.maintenance.maxUnavailable), and the waves of nodes started
// together: the canaries left first while the stage is Canary, then the
// other nodes batch by batch (spec.rollout.batches, the batches done
// skipped), each batch in waves of the concurrency. It ignores soak time,
// manual promotion, the post-complete delay, gates, budgets and retries,
// and counts running nodes as if they started now. Pure.
func plan(ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, durs *v1alpha1.Durations) rolloutPlan {
	s := &ns.Spec
	p := rolloutPlan{left: d.Counts.Pending + d.Counts.Running}
	var fresh nodeState
	p.p50, p.known = expected(ns, d.Hash, durs, fresh, p50)
	p.p95, _ = expected(ns, d.Hash, durs, fresh, p95)
	total := d.Counts.Nodes
	p.concurrency = 1
	if s.Rollout.MaxConcurrency != nil {
		p.concurrency, _ = intstr.GetScaledValueFromIntOrPercent(s.Rollout.MaxConcurrency, total, true)
	}
	if m := s.Maintenance; m != nil && m.MaxUnavailable != nil {
		mu, _ := intstr.GetScaledValueFromIntOrPercent(m.MaxUnavailable, total, true)
		p.concurrency = min(p.concurrency, max(mu, 1))
	}
	p.concurrency = max(p.concurrency, 1)
	waves := func(n int) int { return (n + p.concurrency - 1) / p.concurrency }
	rest := p.left
	if d.Stage == v1alpha1.StageCanary {
		done := 0
		for i := range nodes {
			n := &nodes[i]
			if slices.Contains(d.Canaries, n.Name) && n.State.Hash == d.Hash && (n.State.Phase == v1alpha1.PhaseSucceeded || n.State.Phase == v1alpha1.PhaseNotNeeded) {
				done++
			}
		}
		canaries := max(len(d.Canaries)-done, 0)
		p.waves += waves(canaries)
		rest = max(rest-canaries, 0)
	}
	if len(s.Rollout.Batches) == 0 {
		p.waves += waves(rest)
		return p
	}
	// The batches cover the nodes after the canaries; those done (all
	// but rest) fill the first batches.
	after := max(total-len(d.Canaries), 0)
	done := max(after-rest, 0)
	for i := 0; rest > 0; i++ {
		b := s.Rollout.Batches[min(i, len(s.Rollout.Batches)-1)]
		size, _ := intstr.GetScaledValueFromIntOrPercent(&b, total, true)
		size = max(size, 1)
		took := min(done, size)
		done -= took
		n := min(size-took, rest)
		p.waves += waves(n)
		rest -= n
	}
	return p
}

// schedule places p's waves in the openings ops, in order: a wave starts
// at the opening's start or when the wave before it ends, if it fits (with
// fitWindow, its p95 plus the margin ends before the opening closes;
// without, it starts before the close) and takes p50. The ETA is the last
// wave's end, shown in loc. Pure.
func schedule(ns *v1alpha1.NodeScript, p rolloutPlan, ops []opening, loc *time.Location, now time.Time) *v1alpha1.Forecast {
	fit := ns.Spec.Rollout.FitWindow == nil || *ns.Spec.Rollout.FitWindow
	margin := windowMargin(ns)
	f := &v1alpha1.Forecast{NodesLeft: int32(p.left)}
	cursor, waves, windows := now, p.waves, 0
	var eta time.Time
	for _, op := range ops {
		t, used := op.Start, false
		if t.Before(cursor) {
			t = cursor
		}
		for waves > 0 {
			if !op.End.IsZero() && ((fit && t.Add(p.p95+margin).After(op.End)) || (!fit && !t.Before(op.End))) {
				break
			}
			t, used = t.Add(p.p50), true
			waves--
		}
		if used {
			windows++
			cursor, eta = t, t
		}
		if waves == 0 {
			break
		}
	}
	head := fmt.Sprintf("%d node(s) left (%s per node at p50, %d at once, %d wave(s))", p.left, p.p50, p.concurrency, p.waves)
	switch {
	case waves == 0:
		f.WindowsNeeded, f.ETA = int32(windows), &metav1.Time{Time: eta}
		f.Message = fmt.Sprintf("%s ≈ %d window(s), done about %s", head, windows, eta.In(loc).Format("Mon 2006-01-02 15:04")+" "+loc.String())
	case windows == 0 && len(ops) > 0 && fit:
		f.Message = fmt.Sprintf("%s: no ETA: a node (%s at p95 plus spec.rollout.windowMargin %s) fits in none of the next %d opening(s) of the maintenance window", head, p.p95, margin, len(ops))
	default:
		f.Message = fmt.Sprintf("%s: no ETA: more than the next %d opening(s) of the maintenance window needed", head, len(ops))
		f.WindowsNeeded = 0
	}
	return f
}

// forecastMetricSet are the forecast's metrics (part of metrics).
type forecastMetricSet struct {
	stepP95, forecastETA *prometheus.GaugeVec
	windowTooShort       *prometheus.CounterVec
}

// forecastMetrics makes the forecast's metrics of m.
func (m *metrics) forecastMetrics() []prometheus.Collector {
	m.stepP95 = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_step_duration_p95_seconds",
		Help: "The p95 of a step's learned durations (status.durations), by NodeScript and step (check, drain, run, reboot, verify).",
	}, []string{"nodescript", "step"})
	m.forecastETA = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_forecast_eta_timestamp_seconds",
		Help: "When the rollout is expected to be done (status.forecast.eta), Unix seconds; 0 when unknown or over.",
	}, []string{"nodescript"})
	m.windowTooShort = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_window_too_short_total",
		Help: "Maintenance windows in which no node fit before the close (hold WindowTooShort), by NodeScript.",
	}, []string{"nodescript"})
	return []prometheus.Collector{m.stepP95, m.forecastETA, m.windowTooShort}
}

// forecastOpenings is the next n openings of ns's windows (spec.window and
// the MaintenanceCalendars of spec.windowRefs combined, see openings), with
// the time zone the ETA is shown in: spec.window.timeZone, else the first
// named calendar's spec.timeZone, else UTC. Errors come from a calendar
// that is missing or unreadable, or an invalid zone.
func (c *controller) forecastOpenings(ns *v1alpha1.NodeScript, now time.Time, n int) ([]opening, *time.Location, error) {
	cals, err := c.calendarsFor(ns)
	if err != nil {
		return nil, nil, err
	}
	ops, err := nodescript.Openings(ns, cals, now, n)
	if err != nil {
		return nil, nil, err
	}
	zone := ""
	switch {
	case ns.Spec.Window != nil:
		zone = ns.Spec.Window.TimeZone
	case len(cals) > 0:
		zone = cals[0].Spec.TimeZone
	}
	loc, err := time.LoadLocation(zone) // "" is UTC
	if err != nil {
		return nil, nil, fmt.Errorf("time zone %q: %w", zone, err)
	}
	return ops, loc, nil
}
