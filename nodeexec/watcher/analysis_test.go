package watcher

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func tolerance(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }

func threshold(s string) *v1alpha1.Number { n := v1alpha1.NewNumber(s); return &n }

func TestJudgeAnalysis(t *testing.T) {
	canaries, baseline := []string{"c1", "c2"}, []string{"b1", "b2", "b3"}
	for _, c := range []struct {
		name             string
		a                v1alpha1.CanaryAnalysis
		values           map[string]float64
		verdict          string
		canary, base     *float64
		message          []string // substrings
		baselineOverride []string
	}{
		{
			name:    "within tolerance",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%")},
			values:  map[string]float64{"c1": 1.05, "c2": 1.05, "b1": 1, "b2": 1, "b3": 1},
			verdict: v1alpha1.VerdictPassed, canary: ptr.To(1.05), base: ptr.To(1.0),
			message: []string{"canaries c1 1.05, c2 1.05", "baseline 1 (mean of 3 of 3 nodes)"},
		},
		{
			name:    "beyond tolerance, lower is better",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%")},
			values:  map[string]float64{"c1": 1.3, "c2": 1.0, "b1": 1, "b2": 1},
			verdict: v1alpha1.VerdictRegressed, canary: ptr.To(1.15), base: ptr.To(1.0),
			message: []string{"regressed: canaries' mean 1.15 > baseline 1 + 10% = 1.1"},
		},
		{
			name:    "higher is better: a drop beyond the tolerance",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("5%"), Direction: v1alpha1.DirectionHigherIsBetter},
			values:  map[string]float64{"c1": 90, "c2": 90, "b1": 100},
			verdict: v1alpha1.VerdictRegressed, canary: ptr.To(90.0), base: ptr.To(100.0),
			message: []string{"canaries' mean 90 < baseline 100 - 5% = 95"},
		},
		{
			name:    "higher is better: a rise passes",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("5%"), Direction: v1alpha1.DirectionHigherIsBetter},
			values:  map[string]float64{"c1": 120, "c2": 110, "b1": 100},
			verdict: v1alpha1.VerdictPassed, canary: ptr.To(115.0), base: ptr.To(100.0),
		},
		{
			name:    "negative baseline: the tolerance widens the bound",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("50%")},
			values:  map[string]float64{"c1": -6, "c2": -6, "b1": -10},
			verdict: v1alpha1.VerdictPassed, canary: ptr.To(-6.0), base: ptr.To(-10.0),
		},
		{
			name:    "zero baseline: any rise regresses under a tolerance",
			a:       v1alpha1.CanaryAnalysis{Tolerance: intstr.ValueOrDefault(nil, intstr.FromInt32(1000))},
			values:  map[string]float64{"c1": 0.001, "c2": 0, "b1": 0},
			verdict: v1alpha1.VerdictRegressed,
		},
		{
			name:    "threshold: one canary above",
			a:       v1alpha1.CanaryAnalysis{Threshold: threshold("0.05")},
			values:  map[string]float64{"c1": 0.01, "c2": 0.2},
			verdict: v1alpha1.VerdictRegressed,
			message: []string{"canary c2 0.2 > threshold 0.05"},
		},
		{
			name:    "threshold: higher is better",
			a:       v1alpha1.CanaryAnalysis{Threshold: threshold("0.99"), Direction: v1alpha1.DirectionHigherIsBetter},
			values:  map[string]float64{"c1": 0.995, "c2": 0.999},
			verdict: v1alpha1.VerdictPassed,
		},
		{
			name:    "tolerance alone, no baseline: inconclusive",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%")},
			values:  map[string]float64{"c1": 1, "c2": 1},
			verdict: v1alpha1.VerdictInconclusive, canary: ptr.To(1.0),
			message: []string{"no baseline: none of the 3 other selected nodes has a series"},
		},
		{
			name:    "no baseline nodes at all: inconclusive",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%")},
			values:  map[string]float64{"c1": 1, "c2": 1},
			verdict: v1alpha1.VerdictInconclusive, baselineOverride: []string{},
		},
		{
			name:    "tolerance and threshold, no baseline: the threshold decides",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%"), Threshold: threshold("2")},
			values:  map[string]float64{"c1": 1, "c2": 1},
			verdict: v1alpha1.VerdictPassed,
			message: []string{"the tolerance is not applied"},
		},
		{
			name:    "a canary without a series: inconclusive",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("10%")},
			values:  map[string]float64{"c1": 1, "b1": 1},
			verdict: v1alpha1.VerdictInconclusive, canary: ptr.To(1.0), base: ptr.To(1.0),
			message: []string{"no value for canary c2 (no series)"},
		},
		{
			name:    "a NaN canary is missing, never a pass",
			a:       v1alpha1.CanaryAnalysis{Threshold: threshold("1")},
			values:  map[string]float64{"c1": math.NaN(), "c2": 0.5},
			verdict: v1alpha1.VerdictInconclusive,
			message: []string{"c1 (NaN)"},
		},
		{
			name:    "missing canary, but the other one regressed: regressed",
			a:       v1alpha1.CanaryAnalysis{Threshold: threshold("1")},
			values:  map[string]float64{"c2": 5},
			verdict: v1alpha1.VerdictRegressed,
		},
		{
			name:    "baseline nodes without a series are left out of the mean",
			a:       v1alpha1.CanaryAnalysis{Tolerance: tolerance("0%")},
			values:  map[string]float64{"c1": 2, "c2": 2, "b1": 2, "b2": math.Inf(1)},
			verdict: v1alpha1.VerdictPassed, canary: ptr.To(2.0), base: ptr.To(2.0),
			message: []string{"mean of 1 of 3 nodes"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := baseline
			if c.baselineOverride != nil {
				b = c.baselineOverride
			}
			res := judgeAnalysis(&c.a, c.values, canaries, b)
			if res.Verdict != c.verdict {
				t.Errorf("verdict %s, want %s (%s)", res.Verdict, c.verdict, res.Message)
			}
			for _, m := range c.message {
				if !strings.Contains(res.Message, m) {
					t.Errorf("message %q lacks %q", res.Message, m)
				}
			}
			if c.canary != nil && (res.Canary == nil || math.Abs(*res.Canary-*c.canary) > 1e-9) {
				t.Errorf("canary %v, want %v", res.Canary, *c.canary)
			}
			if c.base != nil && (res.Baseline == nil || *res.Baseline != *c.base) {
				t.Errorf("baseline %v, want %v", res.Baseline, *c.base)
			}
		})
	}
}

func TestNodeValues(t *testing.T) {
	sample := func(node string, v float64) *model.Sample {
		m := model.Metric{"__name__": "m"}
		if node != "" {
			m["instance"] = model.LabelValue(node)
		}
		return &model.Sample{Metric: m, Value: model.SampleValue(v)}
	}
	got, err := nodeValues(model.Vector{sample("a", 1), sample("b", 2), sample("", 3)}, "instance")
	if err != nil || !cmp.Equal(got, map[string]float64{"a": 1, "b": 2}) {
		t.Errorf("nodeValues: %v, %v", got, err)
	}
	if _, err := nodeValues(model.Vector{sample("a", 1), sample("a", 2)}, "instance"); err == nil || !strings.Contains(err.Error(), "avg by (instance)") {
		t.Errorf("two series for one node: %v", err)
	}
	if _, err := nodeValues(&model.Scalar{Value: 1}, "node"); err == nil || !strings.Contains(err.Error(), "returned a scalar") {
		t.Errorf("a scalar: %v", err)
	}
}

func TestAdvanceAnalysis(t *testing.T) {
	soak := t0
	pass := analysisResult{Verdict: v1alpha1.VerdictPassed, Canary: ptr.To(1.0), Baseline: ptr.To(1.0)}
	r1 := advanceAnalysis(nil, "h", pass, soak, t0.Add(1500*time.Millisecond))
	if r1.Checks != 1 || r1.PassingSince == nil || !r1.PassingSince.Time.Equal(t0.Add(time.Second)) || r1.Canary.String() != "1" {
		t.Fatalf("first pass: %+v", r1)
	}
	r2 := advanceAnalysis(r1, "h", pass, soak, t0.Add(10*time.Second))
	if r2.Checks != 2 || !r2.PassingSince.Equal(r1.PassingSince) {
		t.Errorf("second pass keeps the run: %+v", r2)
	}
	r3 := advanceAnalysis(r2, "h", analysisResult{Verdict: v1alpha1.VerdictError, Message: "down"}, soak, t0.Add(20*time.Second))
	if r3.PassingSince != nil || r3.Verdict != v1alpha1.VerdictError || r3.Canary != nil {
		t.Errorf("an error ends the run: %+v", r3)
	}
	r4 := advanceAnalysis(r3, "h", pass, soak, t0.Add(30*time.Second))
	if !r4.PassingSince.Time.Equal(t0.Add(30*time.Second)) || r4.Checks != 4 {
		t.Errorf("a pass after an error starts a new run: %+v", r4)
	}
	r5 := advanceAnalysis(r4, "h", pass, t0.Add(time.Minute), t0.Add(61*time.Second))
	if !r5.PassingSince.Time.Equal(t0.Add(61 * time.Second)) {
		t.Errorf("a run begun before the soak does not count: %+v", r5)
	}
	r6 := advanceAnalysis(r5, "other", pass, soak, t0.Add(70*time.Second))
	if r6.Checks != 1 || !r6.PassingSince.Time.Equal(t0.Add(70*time.Second)) {
		t.Errorf("another spec hash starts over: %+v", r6)
	}
}

// fakeProm is an httptest stand-in for Prometheus' /api/v1/query: it
// answers with the values set per node (label node), or with status code
// fail; it counts the queries.
type fakeProm struct {
	mu      sync.Mutex
	values  map[string]float64
	fail    int
	queries int
	srv     *httptest.Server
}

func newFakeProm(t *testing.T) *fakeProm {
	p := &fakeProm{values: map[string]float64{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		p.queries++
		if p.fail != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(p.fail)
			fmt.Fprint(w, `{"status":"error","errorType":"internal","error":"storage is down"}`)
			return
		}
		var result []map[string]any
		for node, v := range p.values {
			result = append(result, map[string]any{"metric": map[string]string{"node": node}, "value": []any{1.0, fmt.Sprint(v)}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProm) set(fail int, values map[string]float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail, p.values = fail, values
}

func (p *fakeProm) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queries
}

// analysisScript is a NodeScript with a canary analysis against p: one
// canary, a soak of a minute, a check every 10s, a 10% tolerance.
func analysisScript(p *fakeProm) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.RollbackScript = "undo"
		s.Rollout.SoakTime = &metav1.Duration{Duration: time.Minute}
		s.Rollout.Analysis = &v1alpha1.CanaryAnalysis{
			URL: p.srv.URL, Query: "avg by (node) (errors)", Interval: &metav1.Duration{Duration: 10 * time.Second}, Tolerance: tolerance("10%"),
		}
	})
}

// soakingCanary rolls e out to its canary and returns it, once Soaking.
func soakingCanary(t *testing.T, e *env, ns *v1alpha1.NodeScript, names ...string) (canary string, others []string) {
	t.Helper()
	e.reconcile()
	canary, pod := e.runningNode(names...)
	e.setPod(pod, exited(0))
	for _, n := range names {
		if n != canary {
			others = append(others, n)
		}
	}
	return canary, others
}

func TestReconcileAnalysisRegression(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"))
	canary, others := soakingCanary(t, e, ns, "n1", "n2", "n3")
	p.set(0, map[string]float64{canary: 0.5, others[0]: 0.1, others[1]: 0.1})
	e.recorded()
	e.reconcile()
	if p.count() != 1 {
		t.Errorf("%d queries, want 1", p.count())
	}
	st := e.nodeScript().Status
	if st.Stage != v1alpha1.StageHalted || st.Analysis == nil || st.Analysis.Verdict != v1alpha1.VerdictRegressed ||
		st.Analysis.Canary.String() != "0.5" || st.Analysis.Baseline.String() != "0.1" || !strings.Contains(st.Analysis.Message, "canaries' mean 0.5 > baseline 0.1 + 10% = 0.11") {
		t.Fatalf("status %+v analysis %+v", st, st.Analysis)
	}
	halted := e.condition(v1alpha1.ConditionHalted)
	if halted.Reason != v1alpha1.ReasonAnalysisFailed || !strings.Contains(halted.Message, "AnalysisFailed: canary "+canary) || !strings.Contains(halted.Message, "0.5 > baseline 0.1") {
		t.Errorf("Halted %+v", halted)
	}
	if s := e.state(canary); s.Phase != v1alpha1.PhaseFailed || s.Reason != v1alpha1.ReasonAnalysisFailed || !strings.Contains(s.Message, "0.5") {
		t.Errorf("canary state %+v", s)
	}
	events := strings.Join(e.recorded(), "\n")
	if !strings.Contains(events, "Warning "+v1alpha1.ReasonCanaryRegressed+" canary analysis: regressed: canaries' mean 0.5") || !strings.Contains(events, v1alpha1.ReasonHalted) {
		t.Errorf("events:\n%s", events)
	}
	// The failure policy runs the rollback script on the canary (without
	// spec.onFailure.rollback), and nothing starts elsewhere.
	e.reconcile()
	if diff := cmp.Diff([]string{podName(ns, canary, v1alpha1.ActionRollback, 1)}, e.pods()); diff != "" {
		t.Fatalf("pods (-want +got):\n%s", diff)
	}
	e.setPod(podName(ns, canary, v1alpha1.ActionRollback, 1), exited(0))
	e.reconcile()
	if s := e.state(canary); s.Phase != v1alpha1.PhaseRolledBack || s.Rollback != v1alpha1.PhaseSucceeded || s.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Errorf("after the rollback: %+v", s)
	}
	e.clock.Step(time.Hour)
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageHalted || st.RolledBack != 1 || st.Pending != 2 || len(e.pods()) != 0 {
		t.Errorf("after an hour: %+v, pods %v", st, e.pods())
	}
	if c := e.condition(v1alpha1.ConditionHalted); c.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Errorf("Halted %+v after the rollback", c)
	}
	if p.count() != 1 {
		t.Errorf("%d queries once halted, want 1", p.count())
	}
	if got := testutil.ToFloat64(e.c.w.metrics.analysisChecks.WithLabelValues("fix", v1alpha1.VerdictRegressed)); got != 1 {
		t.Errorf("analysis checks Regressed: %v", got)
	}
}

func TestReconcileAnalysisPassPromotes(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	canary, others := soakingCanary(t, e, ns, "n1", "n2")
	p.set(0, map[string]float64{canary: 1.05, others[0]: 1})
	e.reconcile()
	for range 3 {
		e.reconcile() // within the interval: no other query
	}
	if p.count() != 1 {
		t.Errorf("%d queries within one interval, want 1", p.count())
	}
	a := e.nodeScript().Status.Analysis
	if a == nil || a.Verdict != v1alpha1.VerdictPassed || a.PassingSince == nil || e.nodeScript().Status.Stage != v1alpha1.StageSoaking {
		t.Fatalf("after the first check: %+v", a)
	}
	// A check every 10s; promotion once the run of passes is a soak time old.
	for i := 1; i <= 5; i++ {
		e.clock.Step(10 * time.Second)
		e.reconcile()
		if st := e.nodeScript().Status; st.Stage != v1alpha1.StageSoaking {
			t.Fatalf("after %ds: stage %s, want Soaking", i*10, st.Stage)
		}
	}
	if p.count() != 6 {
		t.Errorf("%d queries in 50s at a 10s interval, want 6", p.count())
	}
	e.clock.Step(10 * time.Second)
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageRolling || st.Analysis.Checks != 7 || st.Analysis.Verdict != v1alpha1.VerdictPassed {
		t.Fatalf("after a minute of passes: %+v %+v", st, st.Analysis)
	}
	if diff := cmp.Diff([]string{podName(ns, others[0], v1alpha1.ActionRun, 1)}, e.pods()); diff != "" {
		t.Errorf("promoted: pods (-want +got):\n%s", diff)
	}
	if c := e.condition(v1alpha1.ConditionProgressing); c.Reason != v1alpha1.StageRolling {
		t.Errorf("Progressing %+v", c)
	}
}

func TestReconcileAnalysisErrorAndMissingHold(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	canary, others := soakingCanary(t, e, ns, "n1", "n2")
	p.set(0, map[string]float64{canary: 1, others[0]: 1})
	e.reconcile()
	// Prometheus fails: the check is an Error, in the status and an Event.
	p.set(http.StatusServiceUnavailable, nil)
	e.clock.Step(50 * time.Second)
	e.recorded()
	e.reconcile()
	st := e.nodeScript().Status
	if st.Analysis.Verdict != v1alpha1.VerdictError || !strings.Contains(st.Analysis.Message, "query failed") || st.Analysis.PassingSince != nil {
		t.Fatalf("after a failed query: %+v", st.Analysis)
	}
	if c := e.condition(v1alpha1.ConditionProgressing); !strings.Contains(c.Message, "canary analysis Error: query failed") {
		t.Errorf("Progressing %+v", c)
	}
	e.checkEvents("a failed query", v1alpha1.ReasonAnalysisError)
	// The soak time has passed, but the errors hold the promotion.
	for range 3 {
		e.clock.Step(10 * time.Second)
		e.reconcile()
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageSoaking || len(e.pods()) != 0 {
		t.Fatalf("errors past the soak time: %+v, pods %v", st, e.pods())
	}
	// Back, but the canary has no series: Inconclusive, still held.
	p.set(0, map[string]float64{others[0]: 1})
	e.clock.Step(10 * time.Second)
	e.reconcile()
	if a := e.nodeScript().Status.Analysis; a.Verdict != v1alpha1.VerdictInconclusive || !strings.Contains(a.Message, "no value for canary "+canary) {
		t.Fatalf("a canary without a series: %+v", a)
	}
	e.checkEvents("a canary without a series", v1alpha1.ReasonAnalysisInconclusive)
	// Passing again: a whole soak time of passes before promotion.
	p.set(0, map[string]float64{canary: 1, others[0]: 1})
	for i := 0; i < 6; i++ {
		e.clock.Step(10 * time.Second)
		e.reconcile()
		if st := e.nodeScript().Status; st.Stage != v1alpha1.StageSoaking {
			t.Fatalf("pass %d after the errors: stage %s", i+1, st.Stage)
		}
	}
	e.clock.Step(10 * time.Second)
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageRolling {
		t.Fatalf("after a soak time of passes: %+v", st)
	}
	e.checkEvents("passing again", v1alpha1.ReasonAnalysisPassed)
}

// TestReconcileAnalysisRestart: the record lives in the status: a new
// watcher (no memory) neither queries before the interval nor forgets the
// run of passes.
func TestReconcileAnalysisRestart(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	canary, others := soakingCanary(t, e, ns, "n1", "n2")
	p.set(0, map[string]float64{canary: 1, others[0]: 1})
	e.reconcile()
	e.clock.Step(50 * time.Second)
	e.reconcile()
	since := e.nodeScript().Status.Analysis.PassingSince
	// A new process.
	w, err := New(Options{Client: e.cs, Dynamic: e.dyn, Clock: e.clock, NotReadyGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.c.w = w
	e.clock.Step(5 * time.Second)
	e.reconcile()
	if p.count() != 2 {
		t.Errorf("%d queries, want 2 (none before the interval after a restart)", p.count())
	}
	e.clock.Step(5 * time.Second)
	e.reconcile()
	a := e.nodeScript().Status.Analysis
	if p.count() != 3 || !a.PassingSince.Equal(since) || a.Checks != 3 {
		t.Errorf("after the restart: %d queries, %+v", p.count(), a)
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageRolling {
		t.Errorf("stage %s after a soak time of passes across the restart (passing since %s, now %s)", st.Stage, since, e.clock.Now())
	}
}

// TestReconcileAnalysisThresholdNoBaseline: with a threshold, a canary
// alone (no other node) is judged; its rollback runs where it regressed.
func TestReconcileAnalysisThresholdNoBaseline(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	ns.Spec.Rollout.Analysis.Tolerance = nil
	ns.Spec.Rollout.Analysis.Threshold = threshold("0.05")
	ns.Spec.Rollout.Canary = ptr.To[int32](2)
	ns.Spec.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(2))
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"))
	e.reconcile()
	var names []string
	for _, n := range []string{"n1", "n2", "n3"} {
		if s := e.state(n); s.Phase == v1alpha1.PhaseRunning {
			names = append(names, n)
			e.setPod(s.Pod, exited(0))
		}
	}
	if len(names) != 2 {
		t.Fatalf("canaries running: %v", names)
	}
	p.set(0, map[string]float64{names[0]: 0.01, names[1]: 0.07})
	e.reconcile()
	st := e.nodeScript().Status
	if st.Stage != v1alpha1.StageHalted || st.Analysis.Baseline != nil || !strings.Contains(st.Analysis.Message, "canary "+names[1]+" 0.07 > threshold 0.05") {
		t.Fatalf("status %+v, analysis %+v", st, st.Analysis)
	}
	for _, n := range names {
		if s := e.state(n); s.Reason != v1alpha1.ReasonAnalysisFailed {
			t.Errorf("%s: %+v; want every canary failed by the analysis", n, s)
		}
	}
	e.reconcile()
	if diff := cmp.Diff([]string{podName(ns, names[0], v1alpha1.ActionRollback, 1), podName(ns, names[1], v1alpha1.ActionRollback, 1)}, e.pods()); diff != "" {
		t.Errorf("rollback pods (-want +got):\n%s", diff)
	}
}

func TestAnalysisHoldsWithoutRecord(t *testing.T) {
	p := newFakeProm(t)
	ns := analysisScript(p)
	c := newCluster("n1", "n2")
	d := decide(t, ns, c, t0)
	if len(d.Canaries) != 1 {
		t.Fatalf("canaries %v", d.Canaries)
	}
	c.set(ns, v1alpha1.PhaseSucceeded, d.Canaries[0])
	if d := decide(t, ns, c, t0.Add(time.Hour)); d.Stage != v1alpha1.StageSoaking || len(d.Start) != 0 {
		t.Errorf("no check made: %s %v; want Soaking, nothing started", d.Stage, d.Start)
	}
}
