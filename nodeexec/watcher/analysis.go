package watcher

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Canary analysis (spec.rollout.analysis): while the canaries soak, the
// watcher queries Prometheus at most once per interval and compares the
// canaries' values with the other selected nodes' (or with a threshold).
// The last check is status.analysis, which survives a restart; a
// regression marks the canaries Failed (reason AnalysisFailed) in their
// node state, so the rollout halts and the failure policy's rollback
// machinery runs spec.rollbackScript there.

// analysisQueryTimeout bounds one analysis query (the HTTP request and
// Prometheus' own evaluation): a query that takes longer is an Error.
const analysisQueryTimeout = 10 * time.Second

// analysisMemo keeps, per NodeScript, the last analysis record this process
// made and when (to the nanosecond): the status that holds it may not be
// in the informer's cache yet, and the record alone (seconds) would let a
// second query in before the interval passed. Its zero value is ready.
type analysisMemo struct {
	mu sync.Mutex
	m  map[string]analysisMemory
}

type analysisMemory struct {
	rec *v1alpha1.AnalysisStatus
	at  time.Time
}

func (m *analysisMemo) get(name string) (analysisMemory, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[name]
	return v, ok
}

func (m *analysisMemo) put(name string, v analysisMemory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]analysisMemory{}
	}
	m.m[name] = v
}

// forgetAnalysis drops what the process remembers of NodeScript name's
// analysis, and its metric series.
func (w *Watcher) forgetAnalysis(name string) {
	w.analyses.mu.Lock()
	delete(w.analyses.m, name)
	w.analyses.mu.Unlock()
	w.metrics.analysisChecks.DeletePartialMatch(prometheus.Labels{"nodescript": name})
}

// newAnalysisChecks is the metric nodeexec_watcher_analysis_checks_total.
func newAnalysisChecks() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_analysis_checks_total",
		Help: "Canary analysis checks (spec.rollout.analysis), by NodeScript and verdict (Passed, Regressed, Inconclusive, Error).",
	}, []string{"nodescript", "verdict"})
}

// decideAnalyzed is decideDrainable (Decide past blocking pods and blocked
// drains) with spec.rollout.analysis applied: analyze runs a check when one
// is due and the decision is taken on its record (Decide holds the soak
// until the checks passed, and halts on the canaries a regression failed);
// d.Analysis is the record, for the status. The time is decideDrainable's
// recheck.
func (c *controller) decideAnalyzed(ctx context.Context, ns *v1alpha1.NodeScript, hash string, nodes []rolloutNode, cached nodeSet, now time.Time) (decision, time.Time, error) {
	analyzed, rec, err := c.analyze(ctx, ns, hash, nodes, cached, now)
	if err != nil {
		return decision{}, time.Time{}, err
	}
	d, recheck, err := c.decideDrainable(ctx, analyzed, nodes, cached, now)
	d.Analysis = rec
	return d, recheck, err
}

// analyze runs one check of ns's analysis when the canaries soak and the
// interval since the last check (this process's memory, else
// status.analysis) has passed. It returns ns with status.analysis set to
// the current record (a copy: ns itself is left as the cache has it, for
// the status write to compare with), and that record (nil without an
// analysis, or before the first check of spec hash). A Regressed record
// marks the canaries Failed (reason AnalysisFailed) in nodes and in their
// node state, once. Errors are the node state writes'; a query that fails
// is a record with verdict Error, never an error here.
func (c *controller) analyze(ctx context.Context, ns *v1alpha1.NodeScript, hash string, nodes []rolloutNode, cached nodeSet, now time.Time) (*v1alpha1.NodeScript, *v1alpha1.AnalysisStatus, error) {
	a := ns.Spec.Rollout.Analysis
	if a == nil {
		return ns, nil, nil
	}
	rec, last := ns.Status.Analysis, time.Time{}
	if rec != nil && rec.CheckedAt != nil {
		last = rec.CheckedAt.Time
	}
	if mem, ok := c.w.analyses.get(ns.Name); ok && mem.rec != nil && (rec == nil || rec.CheckedAt == nil || !mem.rec.CheckedAt.Before(rec.CheckedAt)) {
		rec, last = mem.rec, mem.at
	}
	if rec != nil && rec.SpecHash != hash {
		rec, last = nil, time.Time{}
	}
	d, err := computeDecision(withAnalysis(ns, rec), nodes, now)
	if err != nil {
		return ns, rec, nil // decideUnblocked reports it
	}
	canaries := d.Canaries
	if rec != nil && rec.Verdict == v1alpha1.VerdictRegressed {
		// Recorded: the canaries still Succeeded (a write that failed, a
		// restart) are marked failed now, without another query.
		return withAnalysis(ns, rec), rec, c.failCanaries(ctx, ns, hash, rec, canaries, nodes, cached, now)
	}
	if d.Stage != v1alpha1.StageSoaking || (!last.IsZero() && now.Sub(last) < analysisInterval(a)) {
		return withAnalysis(ns, rec), rec, nil
	}
	index := make(map[string]int, len(nodes))
	for i := range nodes {
		index[nodes[i].Name] = i
	}
	var soakStart time.Time
	for _, name := range canaries {
		if s := nodes[index[name]].State; s.Since.After(soakStart) {
			soakStart = s.Since
		}
	}
	res := analysisResult{Verdict: v1alpha1.VerdictError}
	values, err := queryAnalysis(ctx, a, now)
	if err != nil {
		res.Message = tail("query failed: "+err.Error(), 512)
	} else {
		res = judgeAnalysis(a, values, canaries, analysisBaseline(ns, hash, nodes, canaries))
	}
	next := advanceAnalysis(rec, hash, res, soakStart, now)
	c.w.analyses.put(ns.Name, analysisMemory{rec: next, at: now})
	c.w.metrics.analysisChecks.WithLabelValues(ns.Name, res.Verdict).Inc()
	logr.FromContextOrDiscard(ctx).V(1).Info("canary analysis", "verdict", res.Verdict, "message", res.Message)
	if rec == nil || rec.Verdict != res.Verdict {
		switch res.Verdict {
		case v1alpha1.VerdictPassed:
			c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonAnalysisPassed, "canary analysis passed: %s", res.Message)
		case v1alpha1.VerdictInconclusive:
			c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonAnalysisInconclusive, "canary analysis inconclusive, promotion waits: %s", res.Message)
		case v1alpha1.VerdictError:
			c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonAnalysisError, "canary analysis failed, promotion waits: %s", res.Message)
		}
	}
	if res.Verdict == v1alpha1.VerdictRegressed {
		c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonCanaryRegressed, "canary analysis: %s; halting the rollout and rolling back the canaries (%s)", res.Message, strings.Join(canaries, ", "))
		return withAnalysis(ns, next), next, c.failCanaries(ctx, ns, hash, next, canaries, nodes, cached, now)
	}
	return withAnalysis(ns, next), next, nil
}

// failCanaries marks each canary that is Succeeded at hash Failed with
// reason AnalysisFailed and rec's message, in nodes and in its node state,
// in parallel; the failure policy then rolls it back (analysisRollback).
func (c *controller) failCanaries(ctx context.Context, ns *v1alpha1.NodeScript, hash string, rec *v1alpha1.AnalysisStatus, canaries []string, nodes []rolloutNode, cached nodeSet, now time.Time) error {
	var work []func() error
	for i := range nodes {
		s := nodes[i].State
		n := cached.byName[nodes[i].Name]
		if n == nil || !slices.Contains(canaries, nodes[i].Name) || s.Hash != hash || s.Phase != v1alpha1.PhaseSucceeded {
			continue
		}
		s.Phase, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, v1alpha1.ReasonAnalysisFailed, rec.Message, now
		nodes[i].State = s
		work = append(work, func() error { return c.w.writeState(ctx, ns, n, s) })
	}
	if len(work) == 0 {
		return nil
	}
	return c.parallel(work)
}

// analysisRollback reports whether spec.rollbackScript runs on a node
// whose state is s because the canary analysis failed it (whatever
// spec.onFailure.rollback says).
func analysisRollback(ns *v1alpha1.NodeScript, s nodeState) bool {
	return s.Reason == v1alpha1.ReasonAnalysisFailed && strings.TrimSpace(ns.Spec.RollbackScript) != ""
}

// analysisHaltReason is the halt reason for a canary the analysis failed:
// "AnalysisFailed: " and the numbers.
func analysisHaltReason(node string, s nodeState) string {
	return fmt.Sprintf("%s: canary %s: %s", v1alpha1.ReasonAnalysisFailed, node, s.Message)
}

// analysisHolds reports whether ns's analysis keeps the canaries soaking
// at hash: automatic promotion needs the last check Passed, in a run of
// passing checks begun after the soak began (the last canary's success)
// that spans at least spec.rollout.soakTime (from its first check to its
// last: the checks cover the whole soak). False without an analysis.
func analysisHolds(ns *v1alpha1.NodeScript, hash string, canaries []entry, now time.Time) bool {
	if ns.Spec.Rollout.Analysis == nil {
		return false
	}
	r := ns.Status.Analysis
	if r == nil || r.SpecHash != hash || r.Verdict != v1alpha1.VerdictPassed || r.PassingSince == nil {
		return true
	}
	for _, c := range canaries {
		if r.PassingSince.Time.Before(c.State.Since.Truncate(time.Second)) {
			return true
		}
	}
	soak := time.Duration(0)
	if st := ns.Spec.Rollout.SoakTime; st != nil {
		soak = st.Duration
	}
	return r.CheckedAt == nil || r.CheckedAt.Sub(r.PassingSince.Time) < soak
}

// analysisNote is what the Progressing condition adds while the canaries
// soak under an analysis: the last verdict and its message.
func analysisNote(d decision) string {
	if d.Stage != v1alpha1.StageSoaking || d.Analysis == nil {
		return ""
	}
	return fmt.Sprintf("; canary analysis %s: %s", d.Analysis.Verdict, d.Analysis.Message)
}

// withAnalysis is a shallow copy of ns with status.analysis rec.
func withAnalysis(ns *v1alpha1.NodeScript, rec *v1alpha1.AnalysisStatus) *v1alpha1.NodeScript {
	if ns.Status.Analysis == rec {
		return ns
	}
	cp := *ns
	cp.Status.Analysis = rec
	return &cp
}

// analysisInterval is a's interval or its default.
func analysisInterval(a *v1alpha1.CanaryAnalysis) time.Duration {
	if a.Interval != nil {
		return a.Interval.Duration
	}
	return v1alpha1.DefaultAnalysisInterval
}

// analysisBaseline is the baseline of an analysis at hash: the selected
// nodes that are not canaries and have not run hash (Pending, or
// NotNeeded: checkScript found them fine as they are).
func analysisBaseline(ns *v1alpha1.NodeScript, hash string, nodes []rolloutNode, canaries []string) []string {
	sel, _ := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector) // validated
	var out []string
	for _, n := range nodes {
		if n.Ignored || !nodescript.Selects(&ns.Spec, sel, n.Name, n.Labels) || slices.Contains(canaries, n.Name) {
			continue
		}
		if n.State.Hash == hash && n.State.Phase != v1alpha1.PhasePending && n.State.Phase != v1alpha1.PhaseNotNeeded {
			continue
		}
		out = append(out, n.Name)
	}
	return out
}

// advanceAnalysis is the record after check res at now, following prev
// (nil, or of another hash: the first check): PassingSince is kept while
// the checks pass in a row since the soak began (soakStart), set to now by
// a pass that starts a run, and cleared by any other verdict. Times are
// kept to the second, as the API keeps them. It is a pure function.
func advanceAnalysis(prev *v1alpha1.AnalysisStatus, hash string, res analysisResult, soakStart, now time.Time) *v1alpha1.AnalysisStatus {
	at := metav1.NewTime(now.UTC().Truncate(time.Second))
	next := &v1alpha1.AnalysisStatus{SpecHash: hash, Verdict: res.Verdict, Message: res.Message, CheckedAt: &at, Checks: 1}
	if res.Canary != nil {
		next.Canary = ptrNumber(*res.Canary)
	}
	if res.Baseline != nil {
		next.Baseline = ptrNumber(*res.Baseline)
	}
	same := prev != nil && prev.SpecHash == hash
	if same {
		next.Checks = prev.Checks + 1
	}
	if res.Verdict == v1alpha1.VerdictPassed {
		if same && prev.Verdict == v1alpha1.VerdictPassed && prev.PassingSince != nil && !prev.PassingSince.Time.Before(soakStart.Truncate(time.Second)) {
			next.PassingSince = prev.PassingSince.DeepCopy()
		} else {
			next.PassingSince = at.DeepCopy()
		}
	}
	return next
}

func ptrNumber(f float64) *v1alpha1.Number {
	n := v1alpha1.NumberOf(f)
	return &n
}

// analysisResult is one check's outcome: the verdict, the canaries' and
// the baseline's means (nil when none had a value) and what was compared.
type analysisResult struct {
	Verdict          string
	Canary, Baseline *float64
	Message          string
}

// queryAnalysis runs a's query at instant at against a's Prometheus (its
// HTTP API, /api/v1/query, through client_golang's api/prometheus/v1),
// within AnalysisQueryTimeout, and returns each node's value: the series'
// a.NodeLabel (default "node") names the node. Errors: the request or the
// query failed, the answer is not an instant vector, or two series name
// the same node (aggregate by the node label).
func queryAnalysis(ctx context.Context, a *v1alpha1.CanaryAnalysis, at time.Time) (map[string]float64, error) {
	client, err := api.NewClient(api.Config{Address: a.URL})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", a.URL, err)
	}
	ctx, cancel := context.WithTimeout(ctx, analysisQueryTimeout)
	defer cancel()
	v, _, _, err := promv1.NewAPI(client).Query(ctx, a.Query, at, promv1.WithTimeout(analysisQueryTimeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", a.URL, err)
	}
	return nodeValues(v, nodescript.CmpOr(a.NodeLabel, v1alpha1.DefaultAnalysisNodeLabel))
}

// nodeValues is each node's value in v, an instant vector whose series
// name their node in label; series without the label are left out. Errors:
// v is not a vector, or two series name the same node.
func nodeValues(v model.Value, label string) (map[string]float64, error) {
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("the query returned a %s: want an instant vector with one series per node", v.Type())
	}
	out := make(map[string]float64, len(vec))
	for _, s := range vec {
		node := string(s.Metric[model.LabelName(label)])
		if node == "" {
			continue
		}
		if _, dup := out[node]; dup {
			return nil, fmt.Errorf("several series name node %s (label %s): aggregate by it, e.g. avg by (%s) (...)", node, label, label)
		}
		out[node] = float64(s.Value)
	}
	return out, nil
}

// judgeAnalysis compares the canaries' values with the baseline's and the
// threshold, following a (tolerance, threshold, direction). A value that
// is not finite (NaN, ±Inf) counts as missing. The verdict is:
//   - Regressed when a canary's value is worse than the threshold, or the
//     mean of the canaries' values is worse than the baseline's mean by
//     more than the tolerance (under LowerIsBetter, above baseline +
//     |baseline| × tolerance; under HigherIsBetter, below baseline −
//     |baseline| × tolerance): evidence of harm wins over missing values;
//   - else Inconclusive when a canary has no value, or a tolerance alone is
//     set and no baseline node has a value;
//   - else Passed.
//
// It is a pure function.
func judgeAnalysis(a *v1alpha1.CanaryAnalysis, values map[string]float64, canaries, baseline []string) analysisResult {
	higher := a.Direction == v1alpha1.DirectionHigherIsBetter
	worse, cmp := func(x, bound float64) bool { return x > bound }, ">"
	if higher {
		worse, cmp = func(x, bound float64) bool { return x < bound }, "<"
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	var (
		res               analysisResult
		got, missing, bad []string
		canarySum         float64
		canaryN           int
	)
	for _, c := range canaries {
		v, ok := values[c]
		switch {
		case !ok:
			missing = append(missing, c+" (no series)")
		case !finite(v):
			missing = append(missing, c+" ("+fmtValue(v)+")")
		default:
			got = append(got, c+" "+fmtValue(v))
			canarySum += v
			canaryN++
		}
	}
	var baseSum float64
	baseN := 0
	for _, b := range baseline {
		if v, ok := values[b]; ok && finite(v) {
			baseSum += v
			baseN++
		}
	}
	if canaryN > 0 {
		m := canarySum / float64(canaryN)
		res.Canary = &m
	}
	if baseN > 0 {
		m := baseSum / float64(baseN)
		res.Baseline = &m
	}
	var parts []string
	if len(got) > 0 {
		parts = append(parts, "canaries "+strings.Join(got, ", "))
	}
	if res.Baseline != nil {
		parts = append(parts, fmt.Sprintf("baseline %s (mean of %d of %d nodes)", fmtValue(*res.Baseline), baseN, len(baseline)))
	}
	if a.Threshold != nil {
		th, _ := a.Threshold.Float64() // validated
		for _, c := range canaries {
			if v, ok := values[c]; ok && finite(v) && worse(v, th) {
				bad = append(bad, fmt.Sprintf("canary %s %s %s threshold %s", c, fmtValue(v), cmp, fmtValue(th)))
			}
		}
	}
	tolNote := ""
	if a.Tolerance != nil {
		tol, _ := v1alpha1.ParseTolerance(*a.Tolerance) // validated
		switch {
		case res.Baseline == nil:
			tolNote = fmt.Sprintf("no baseline: none of the %d other selected nodes has a series, so the tolerance is not applied", len(baseline))
		case res.Canary != nil:
			base := *res.Baseline
			bound := base + math.Abs(base)*tol
			sign := "+"
			if higher {
				bound, sign = base-math.Abs(base)*tol, "-"
			}
			if worse(*res.Canary, bound) {
				bad = append(bad, fmt.Sprintf("canaries' mean %s %s baseline %s %s %s = %s",
					fmtValue(*res.Canary), cmp, fmtValue(base), sign, a.Tolerance.String(), fmtValue(bound)))
			}
		}
	}
	detail := strings.Join(parts, "; ")
	switch {
	case len(bad) > 0:
		res.Verdict, res.Message = v1alpha1.VerdictRegressed, joinNonEmpty("; ", "regressed: "+strings.Join(bad, "; "), detail)
	case len(canaries) == 0:
		res.Verdict, res.Message = v1alpha1.VerdictInconclusive, "no canaries to compare"
	case len(missing) > 0:
		res.Verdict, res.Message = v1alpha1.VerdictInconclusive, joinNonEmpty("; ", "no value for canary "+strings.Join(missing, ", "), detail)
	case a.Threshold == nil && res.Baseline == nil:
		res.Verdict, res.Message = v1alpha1.VerdictInconclusive, joinNonEmpty("; ", tolNote, detail)
	default:
		res.Verdict, res.Message = v1alpha1.VerdictPassed, joinNonEmpty("; ", detail, tolNote)
	}
	return res
}

// fmtValue formats a metric value in the shortest form that reads back.
func fmtValue(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func joinNonEmpty(sep string, parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), sep)
}
