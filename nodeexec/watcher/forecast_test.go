package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPercentile(t *testing.T) {
	for _, tc := range []struct {
		samples  []int64
		p50, p95 int64
	}{
		{nil, 0, 0},
		{[]int64{7}, 7, 7},
		{[]int64{3, 1, 2}, 2, 3},
		{[]int64{10, 20, 30, 40}, 20, 40},
		// 20 samples 1..20: the 10th and the 19th.
		{[]int64{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 10, 19},
	} {
		if got50, got95 := percentile(tc.samples, 50), percentile(tc.samples, 95); got50 != tc.p50 || got95 != tc.p95 {
			t.Errorf("samples %v: p50 %d p95 %d, want %d %d", tc.samples, got50, got95, tc.p50, tc.p95)
		}
	}
}

// The sample record keeps the newest MaxDurationSamples, oldest first.
func TestAddSampleBounded(t *testing.T) {
	sd := &v1alpha1.StepDurations{}
	for i := int64(1); i <= 60; i++ {
		addSample(sd, i)
	}
	if len(sd.Samples) != v1alpha1.MaxDurationSamples || sd.Samples[0] != 11 || sd.Samples[49] != 60 {
		t.Fatalf("samples %v, want 11..60", sd.Samples)
	}
	if sd.P50 != 35 || sd.P95 != 58 {
		t.Errorf("p50 %d p95 %d, want 35 58", sd.P50, sd.P95)
	}
}

// learned is durations whose every sample of run is run, and of check is check.
func learned(run, check time.Duration) *v1alpha1.Durations {
	d := &v1alpha1.Durations{Run: &v1alpha1.StepDurations{}}
	addSample(d.Run, int64(run.Seconds()))
	if check > 0 {
		d.Check = &v1alpha1.StepDurations{}
		addSample(d.Check, int64(check.Seconds()))
	}
	return d
}

// fits never starts a node whose p95 plus the margin ends after the
// window's close; nothing is dropped with nothing learned, without a
// window, or with fitWindow false.
func TestFits(t *testing.T) {
	closes := t0.Add(10 * time.Minute)
	checked := func(ns *v1alpha1.NodeScript) nodeState {
		return nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhasePending, Checked: true}
	}
	for _, tc := range []struct {
		name   string
		spec   func(*v1alpha1.NodeScriptSpec)
		durs   *v1alpha1.Durations
		closes time.Time
		n2     func(*v1alpha1.NodeScript) nodeState
		start  []string
		hold   string
	}{
		{name: "fits: 4m + 5m margin before 10m", durs: learned(4*time.Minute, 0), closes: closes, start: []string{"n1", "n2"}},
		{name: "overruns: 6m + 5m margin", durs: learned(6*time.Minute, 0), closes: closes, hold: v1alpha1.HoldWindowTooShort},
		{name: "margin 0", spec: func(s *v1alpha1.NodeScriptSpec) { s.Rollout.WindowMargin = &metav1.Duration{} },
			durs: learned(10*time.Minute, 0), closes: closes, start: []string{"n1", "n2"}},
		{name: "margin 1m: 9m1s overruns", spec: func(s *v1alpha1.NodeScriptSpec) { s.Rollout.WindowMargin = &metav1.Duration{Duration: time.Minute} },
			durs: learned(9*time.Minute+time.Second, 0), closes: closes, hold: v1alpha1.HoldWindowTooShort},
		{name: "nothing learned", closes: closes, start: []string{"n1", "n2"}},
		{name: "no window", durs: learned(time.Hour, 0), start: []string{"n1", "n2"}},
		{name: "fitWindow false", spec: func(s *v1alpha1.NodeScriptSpec) { s.Rollout.FitWindow = ptr.To(false) },
			durs: learned(time.Hour, 0), closes: closes, start: []string{"n1", "n2"}},
		{name: "the check counts until the node was checked", spec: func(s *v1alpha1.NodeScriptSpec) { s.CheckScript = "exit 1" },
			durs: learned(4*time.Minute, 2*time.Minute), closes: closes, n2: checked, start: []string{"n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := script(tc.spec)
			nodes := []rolloutNode{{Name: "n1"}, {Name: "n2"}}
			if tc.n2 != nil {
				nodes[1].State = tc.n2(ns)
			}
			d := decision{Hash: v1alpha1.SpecHash(&ns.Spec), Start: []string{"n1", "n2"}, WindowCloses: tc.closes}
			_, msg := fits(ns, &d, nodes, tc.durs, t0)
			if !slices.Equal(d.Start, tc.start) || d.Hold != tc.hold {
				t.Fatalf("start %v hold %q, want %v %q", d.Start, d.Hold, tc.start, tc.hold)
			}
			if tc.hold != "" && !strings.Contains(msg, "spec.rollout.windowMargin") {
				t.Errorf("message %q does not name spec.rollout.windowMargin", msg)
			}
		})
	}
}

// The forecast across several windows: 10 nodes, 2 at once, 30m at p50
// and 40m at p95 with the 5m margin, in a daily 02:00-04:00 Europe/Berlin
// window: waves start at 02:00, 02:30, 03:00 (03:30 + 45m would overrun),
// so the 5 waves take Sunday's window and two waves of Monday's.
func TestForecastSchedule(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(2))
		s.Window = &v1alpha1.MaintenanceWindow{Start: "02:00", End: "04:00", TimeZone: "Europe/Berlin"}
	})
	durs := &v1alpha1.Durations{Run: &v1alpha1.StepDurations{}}
	for _, s := range []int64{1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 1800, 2400, 2400} {
		addSample(durs.Run, s)
	}
	d := decision{Hash: v1alpha1.SpecHash(&ns.Spec), Stage: v1alpha1.StageRolling, Counts: phaseCounts{Nodes: 10, Pending: 10}}
	p := plan(ns, d, nil, durs)
	if p.left != 10 || p.concurrency != 2 || p.waves != 5 || p.p50 != 30*time.Minute || p.p95 != 40*time.Minute {
		t.Fatalf("plan %+v", p)
	}
	ops, err := nodescript.Openings(ns, nil, t0, p.waves+1)
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	f := schedule(ns, p, ops, berlin, t0)
	want := time.Date(2026, 11, 23, 3, 0, 0, 0, berlin)
	if f.NodesLeft != 10 || f.WindowsNeeded != 2 || f.ETA == nil || !f.ETA.Time.Equal(want) {
		t.Fatalf("forecast %+v, want 10 nodes, 2 windows, ETA %s", f, want)
	}
	if !strings.Contains(f.Message, "≈ 2 window(s), done about Mon 2026-11-23 03:00 Europe/Berlin") {
		t.Errorf("message %q", f.Message)
	}
	// fitWindow false: a wave starts until the close: 02:00 .. 03:30, 4 waves, then one more.
	ns.Spec.Rollout.FitWindow = ptr.To(false)
	if f := schedule(ns, p, ops, berlin, t0); f.WindowsNeeded != 2 || !f.ETA.Time.Equal(time.Date(2026, 11, 23, 2, 30, 0, 0, berlin)) {
		t.Errorf("fitWindow false: forecast %+v", f)
	}
	// A node that fits in no opening: no ETA, said so.
	ns.Spec.Rollout.FitWindow = nil
	ns.Spec.Rollout.WindowMargin = &metav1.Duration{Duration: 2 * time.Hour}
	if f := schedule(ns, p, ops, berlin, t0); f.ETA != nil || !strings.Contains(f.Message, "fits in none") {
		t.Errorf("margin 2h: forecast %+v", f)
	}
	// No window: one opening from now.
	ns = script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.Canary = ptr.To[int32](0) })
	ops, _ = nodescript.Openings(ns, nil, t0, 3)
	if f := schedule(ns, p, ops, time.UTC, t0); f.WindowsNeeded != 1 || !f.ETA.Time.Equal(t0.Add(150*time.Minute)) {
		t.Errorf("no window: forecast %+v", f)
	}
}

// The waves: the canaries left first, then the batches left, each in
// waves of the concurrency.
func TestPlanWaves(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(2))
		s.Rollout.Batches = []intstr.IntOrString{intstr.FromInt32(3)}
	})
	durs := learned(time.Minute, 0)
	d := decision{Hash: v1alpha1.SpecHash(&ns.Spec), Stage: v1alpha1.StageCanary, Counts: phaseCounts{Nodes: 10, Pending: 10}, Canaries: []string{"n1"}}
	if p := plan(ns, d, nil, durs); p.waves != 1+3*2 {
		t.Errorf("canary stage: %d waves, want 7", p.waves)
	}
	// Rolling, 4 of the 9 after the canary done: batch 1 done, 1 of batch 2.
	d = decision{Hash: d.Hash, Stage: v1alpha1.StageRolling, Counts: phaseCounts{Nodes: 10, Succeeded: 5, Pending: 5}, Canaries: []string{"n1"}}
	if p := plan(ns, d, nil, durs); p.waves != 1+2 {
		t.Errorf("rolling: %d waves, want 3 (2 left of batch 2, then 3)", p.waves)
	}
}

// On the fake clock: a run of 10m is learned into status.durations; then,
// with the window closing in 10 minutes and the run's p95 of 10m plus the
// 5m margin, the next node is not started: hold WindowTooShort, one Event per
// window, the forecast in the status. A restarted watcher keeps the
// samples (read back from the status) and adds to them.
func TestFitWindowReconcile(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		// Open at t0 (12:00 UTC) until 12:20.
		s.Window = &v1alpha1.MaintenanceWindow{Start: "11:00", End: "12:20"}
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	e.reconcile()
	if got := e.pods(); len(got) != 1 {
		t.Fatalf("pods %v, want the first run (nothing learned yet)", got)
	}
	first := e.pods()[0]
	// The run takes 10m: at 12:10, 10m (p95) + 5m (margin) ends at 12:25,
	// after the close at 12:20.
	e.clock.Step(10 * time.Minute)
	e.setPod(first, exited(0))
	after := e.reconcile()
	st := e.nodeScript().Status
	if st.Durations == nil || st.Durations.Run == nil || !slices.Equal(st.Durations.Run.Samples, []int64{600}) || st.Durations.Run.P95 != 600 {
		t.Fatalf("status.durations %+v, want run [600]", st.Durations)
	}
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v: a node that would overrun started", got)
	}
	c := statusCondition(st.Conditions, v1alpha1.ConditionProgressing)
	if c == nil || c.Reason != v1alpha1.HoldWindowTooShort || !strings.Contains(c.Message, "2026-11-21T12:20:00Z") {
		t.Fatalf("Progressing %+v, want WindowTooShort naming the close", c)
	}
	if after <= 0 || after > 10*time.Minute {
		t.Errorf("requeue after %s, want by the close (10m)", after)
	}
	if st.Forecast == nil || st.Forecast.NodesLeft != 1 || st.Forecast.WindowsNeeded != 1 || st.Forecast.ETA == nil ||
		!st.Forecast.ETA.Time.Equal(time.Date(2026, 11, 22, 11, 10, 0, 0, time.UTC)) {
		t.Fatalf("status.forecast %+v, want 1 node, 1 window, done at 11:10 tomorrow", st.Forecast)
	}
	e.checkEvents("held", v1alpha1.ReasonSucceeded, v1alpha1.ReasonWindowTooShort)
	e.clock.Step(time.Minute)
	e.reconcile()
	e.checkEvents("held again in the same window")

	// A restarted watcher: a new process over the same API.
	w, err := New(Options{Client: e.cs, Dynamic: e.dyn, Clock: e.clock, NotReadyGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.c = &controller{w: w, nodes: corelisters.NewNodeLister(e.nodeCache), pods: e.podCache, scripts: e.scriptCache, events: e.events, queue: e.queue}
	e.reconcile()
	e.checkEvents("held after a restart, same window")
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v after a restart: the samples were lost", got)
	}
	if st := e.nodeScript().Status; st.Durations == nil || !slices.Equal(st.Durations.Run.Samples, []int64{600}) {
		t.Fatalf("status.durations %+v after a restart", st.Durations)
	}
	w.learn(e.nodeScript(), v1alpha1.StepRun, 90*time.Second)
	e.reconcile()
	if st := e.nodeScript().Status; !slices.Equal(st.Durations.Run.Samples, []int64{600, 90}) {
		t.Fatalf("status.durations %+v, want run [600 90]", st.Durations)
	}
}
