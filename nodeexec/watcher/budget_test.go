package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func testBudget(max intstr.IntOrString) *v1alpha1.MaintenanceBudget {
	return &v1alpha1.MaintenanceBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       v1alpha1.MaintenanceBudgetSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}, MaxUnavailable: max},
	}
}

func TestCountBudgetEverySource(t *testing.T) {
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	nodes := []*corev1.Node{
		testNode("ok"),
		testNode("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		testNode("notready", func(n *corev1.Node) { ready(n).Status = corev1.ConditionFalse }),
		testNode("unknown", func(n *corev1.Node) { ready(n).Status = corev1.ConditionUnknown }),
		testNode("kured"),
		testNode("kured-annotated", func(n *corev1.Node) { n.Annotations = map[string]string{v1alpha1.KuredRebootAnnotation: "true"} }),
		testNode("suc"),
		testNode("ca", taint("ToBeDeletedByClusterAutoscaler")),
		testNode("karpenter", taint("karpenter.sh/disrupted")),
		testNode("karpenter-beta", taint("karpenter.sh/disruption")),
		testNode("nodescript"),
		testNode("nodescript-nodisrupt"),
		testNode("other-pool", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "b"}; n.Spec.Unschedulable = true }),
	}
	src := budgetSources{KuredHolders: map[string]bool{"kured": true}, Plans: map[string][]string{"suc": {"system-upgrade/os"}}}
	holders := map[string][]holder{"nodescript": {{Name: "kernel", Disrupts: true}}, "nodescript-nodisrupt": {{Name: "audit"}}}
	c, err := countBudget(testBudget(intstr.FromString("50%")), nodes, src, holders)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"cordoned": {v1alpha1.BudgetUnschedulable}, "notready": {v1alpha1.BudgetNotReady}, "unknown": {v1alpha1.BudgetNotReady},
		"kured": {v1alpha1.BudgetKuredLock}, "kured-annotated": {v1alpha1.BudgetKuredReboot}, "suc": {"SystemUpgrade/system-upgrade/os"},
		"ca": {"Taint/ToBeDeletedByClusterAutoscaler"}, "karpenter": {"Taint/karpenter.sh/disrupted"},
		"karpenter-beta": {"Taint/karpenter.sh/disruption"}, "nodescript": {"NodeScript/kernel"},
	}
	if diff := cmp.Diff(want, c.Reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	if c.Selected != 12 || c.Max != 6 || c.Unavailable() != 10 || c.Room() != 0 {
		t.Errorf("selected %d max %d unavailable %d room %d, want 12 6 10 0", c.Selected, c.Max, c.Unavailable(), c.Room())
	}
}

func TestMaxUnavailableRounding(t *testing.T) {
	for _, tc := range []struct {
		v        intstr.IntOrString
		selected int
		want     int
	}{
		{intstr.FromInt32(2), 10, 2},
		{intstr.FromInt32(5), 3, 5},
		{intstr.FromString("50%"), 3, 1},  // 1.5 rounds down
		{intstr.FromString("10%"), 5, 1},  // 0.5 rounds down to 0: at least 1
		{intstr.FromString("34%"), 10, 3}, // 3.4
		{intstr.FromString("100%"), 3, 3},
		{intstr.FromString("20%"), 0, 1},
	} {
		if got := maxUnavailable(tc.v, tc.selected); got != tc.want {
			t.Errorf("MaxUnavailable(%s, %d) = %d, want %d", tc.v.String(), tc.selected, got, tc.want)
		}
	}
}

func TestKuredHolders(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, value string
		want        []string
		err         bool
	}{
		{"none", "", nil, false},
		{"single", `{"nodeID":"n1","metadata":{"unschedulable":false},"created":"2026-11-27T11:00:00Z","TTL":0}`, []string{"n1"}, false},
		{"single within TTL", `{"nodeID":"n1","created":"2026-11-27T11:30:00Z","TTL":3600000000000}`, []string{"n1"}, false},
		{"single expired", `{"nodeID":"n1","created":"2026-11-27T10:00:00Z","TTL":3600000000000}`, nil, false},
		{"multi", `{"maxOwners":2,"locks":[{"nodeID":"n1","created":"2026-11-27T11:00:00Z","TTL":0},{"nodeID":"n2","created":"2026-11-27T11:00:00Z","TTL":0}]}`, []string{"n1", "n2"}, false},
		{"multi one expired", `{"maxOwners":2,"locks":[{"nodeID":"n1","created":"2026-11-27T10:00:00Z","TTL":60000000000},{"nodeID":"n2","created":"2026-11-27T11:00:00Z"}]}`, []string{"n2"}, false},
		{"multi empty", `{"maxOwners":2,"locks":[]}`, nil, false},
		{"garbage", `not json`, nil, true},
		{"no holder", `{"foo":1}`, nil, true},
	} {
		got, err := kuredHolders(tc.value, now)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s: KuredHolders = %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func FuzzKuredHolders(f *testing.F) {
	f.Add(`{"nodeID":"n1","created":"2026-11-27T11:00:00Z","TTL":0}`)
	f.Add(`{"maxOwners":2,"locks":[{"nodeID":"n1"}]}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, v string) {
		ids, err := kuredHolders(v, time.Unix(0, 0))
		if err != nil && ids != nil {
			t.Fatalf("holders %v with error %v", ids, err)
		}
		for _, id := range ids {
			if id == "" {
				t.Fatal("an empty holder")
			}
		}
	})
}

func TestPlanNodes(t *testing.T) {
	p := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "os", "namespace": "system-upgrade"}, "status": map[string]any{"applying": []any{"n1", "n2"}}}}
	idle := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "k3s", "namespace": "system-upgrade"}}}
	got := planNodes([]*unstructured.Unstructured{p, idle})
	if diff := cmp.Diff(map[string][]string{"n1": {"system-upgrade/os"}, "n2": {"system-upgrade/os"}}, got); diff != "" {
		t.Error(diff)
	}
}

// budgetEnv is an env holding scripts and nodes and the budget "shared"
// (maxUnavailable max, over pool a), synced.
func budgetEnv(t *testing.T, max int32, scripts []*v1alpha1.NodeScript, nodes ...runtime.Object) *env {
	t.Helper()
	e := newEnv(t, scripts, nodes...)
	e.c.w.o.KuredDaemonSets = nil
	e.sync()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(testBudget(intstr.FromInt32(max)))
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(&unstructured.Unstructured{Object: m})
	e.c.budgets = store
	return e
}

// maintained is a NodeScript named name under spec.maintenance (cordon),
// naming budget "shared", with mutate applied.
func maintained(name string, mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true}
		s.MaintenanceBudget = "shared"
		if mutate != nil {
			mutate(s)
		}
	})
	ns.Name = name
	return ns
}

// gate runs budgetGate for ns wanting to start want (all Pending).
func (e *env) gate(ns *v1alpha1.NodeScript, want ...string) (decision, func()) {
	e.t.Helper()
	cached, err := e.c.listNodes(ns.Name)
	if err != nil {
		e.t.Fatal(err)
	}
	var nodes []rolloutNode
	for _, n := range cached.all {
		nodes = append(nodes, rolloutNode{Name: n.Name, State: nodeState{Phase: v1alpha1.PhasePending}})
	}
	d := decision{Hash: "h", Stage: v1alpha1.StageRolling, Start: want}
	return e.c.budgetGate(e.ctx, ns, d, nodes, cached, t0)
}

func TestBudgetGateCountsAHandCordon(t *testing.T) {
	a := maintained("a", nil)
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{a}, testNode("n1", func(n *corev1.Node) { n.Spec.Unschedulable = true }), testNode("n2"), testNode("n3"))
	d, release := e.gate(a, "n2", "n3")
	release()
	if len(d.Start) != 0 || d.Hold != v1alpha1.HoldBudget || !strings.Contains(d.Waiting, "n1 (Unschedulable)") || !strings.Contains(d.Waiting, "maintenancebudget shared") {
		t.Fatalf("decision %+v: want nothing started, Hold %s, Waiting naming the budget and n1", d, v1alpha1.HoldBudget)
	}
	// A node already out of service costs nothing more: n1 starts.
	d, release = e.gate(a, "n1", "n2")
	release()
	if !slices.Equal(d.Start, []string{"n1"}) || d.Hold != "" {
		t.Fatalf("start %v hold %q, want [n1] and no hold", d.Start, d.Hold)
	}
}

func TestBudgetGateNoDoubleSpend(t *testing.T) {
	a, b := maintained("a", nil), maintained("b", nil)
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{a, b}, testNode("n1"), testNode("n2"), testNode("n3"))
	da, releaseA := e.gate(a, "n1")
	if !slices.Equal(da.Start, []string{"n1"}) {
		t.Fatalf("a starts %v, want [n1] (room 1)", da.Start)
	}
	// a's start is not recorded yet: the ledger holds it, b gets no room.
	db, releaseB := e.gate(b, "n3")
	releaseB()
	if len(db.Start) != 0 || db.Hold != v1alpha1.HoldBudget || !strings.Contains(db.Waiting, "NodeScript/a") {
		t.Fatalf("b: %+v, want held by a's reservation of n1", db)
	}
	releaseA()
	// Released without a recorded start (the start failed): room again.
	if db, release := e.gate(b, "n3"); !slices.Equal(db.Start, []string{"n3"}) {
		t.Fatalf("b starts %v after a's release, want [n3]", db.Start)
	} else {
		release()
	}
}

func TestBudgetGateCountsARecordedMaintenance(t *testing.T) {
	a, b := maintained("a", nil), maintained("b", nil)
	running := func(n *corev1.Node) {
		n.Annotations = map[string]string{stateAnnotation("a"): nodeState{Hash: "x", Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceDraining, Cordoned: true}.Encode()}
	}
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{a, b}, testNode("n1", running), testNode("n2"))
	d, release := e.gate(b, "n2")
	release()
	if len(d.Start) != 0 || !strings.Contains(d.Waiting, "n1 (NodeScript/a)") {
		t.Fatalf("b: %+v, want held by a's maintenance of n1", d)
	}
}

func TestBudgetGatePriority(t *testing.T) {
	low, high := maintained("low", nil), maintained("high", func(s *v1alpha1.NodeScriptSpec) { s.Priority = 5 })
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{low, high}, testNode("n1", func(n *corev1.Node) { n.Spec.Unschedulable = true }), testNode("n2"), testNode("n3"))
	// Both wait while n1 is cordoned.
	for _, ns := range []*v1alpha1.NodeScript{low, high} {
		if d, release := e.gate(ns, "n2"); len(d.Start) != 0 {
			t.Fatalf("%s started %v with no room", ns.Name, d.Start)
		} else {
			release()
		}
	}
	e.updateNode("n1", func(n *corev1.Node) { n.Spec.Unschedulable = false })
	e.sync()
	// low looks first: high waits too and goes first.
	d, release := e.gate(low, "n2")
	release()
	if len(d.Start) != 0 || !strings.Contains(d.Waiting, "nodescript high") {
		t.Fatalf("low: %+v, want it to yield to high", d)
	}
	d, releaseHigh := e.gate(high, "n3")
	if !slices.Equal(d.Start, []string{"n3"}) {
		t.Fatalf("high starts %v, want [n3]", d.Start)
	}
	releaseHigh()
	// high no longer waits: low's turn (the room is free again here,
	// high's start not having been recorded).
	if d, release := e.gate(low, "n2"); !slices.Equal(d.Start, []string{"n2"}) {
		t.Fatalf("low starts %v after high, want [n2]", d.Start)
	} else {
		release()
	}
	// Ties go by name.
	if !ahead("a", 0, "b", 0) || ahead("b", 0, "a", 0) || !ahead("b", 1, "a", 0) {
		t.Error("ahead: want priority first, then name")
	}
}

func TestBudgetGateExclusive(t *testing.T) {
	ex := script(func(s *v1alpha1.NodeScriptSpec) { s.Exclusive = true })
	ex.Name = "ex"
	plain := script(nil)
	plain.Name = "plain"
	other := script(nil)
	other.Name = "other"
	runningFor := func(name string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Annotations = map[string]string{stateAnnotation(name): nodeState{Hash: "x", Phase: v1alpha1.PhaseRunning}.Encode()}
		}
	}
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{ex, plain, other}, testNode("n1", runningFor("plain")), testNode("n2", runningFor("ex")), testNode("n3"))
	// ex does not start where plain runs.
	d, release := e.gate(ex, "n1", "n3")
	if !slices.Equal(d.Start, []string{"n3"}) || !slices.Equal(d.Blocked, []string{"n1: nodescript plain runs here (exclusive)"}) {
		t.Fatalf("ex: start %v blocked %v", d.Start, d.Blocked)
	}
	// other does not start where ex runs, nor where ex is being started (n3).
	d2, release2 := e.gate(other, "n1", "n2", "n3")
	release2()
	release()
	if !slices.Equal(d2.Start, []string{"n1"}) || len(d2.Blocked) != 2 {
		t.Fatalf("other: start %v blocked %v, want [n1] and n2, n3 blocked", d2.Start, d2.Blocked)
	}
}

func TestBudgetGateClosedOnError(t *testing.T) {
	a := maintained("a", func(s *v1alpha1.NodeScriptSpec) { s.MaintenanceBudget = "missing" })
	e := budgetEnv(t, 1, []*v1alpha1.NodeScript{a}, testNode("n1"))
	d, release := e.gate(a, "n1")
	release()
	if len(d.Start) != 0 || d.Hold != v1alpha1.HoldBudget || !strings.Contains(d.Waiting, "does not exist") {
		t.Fatalf("%+v: want closed, naming the missing budget", d)
	}
	// A NodeScript whose runs do not take the node out of service starts.
	plain := script(func(s *v1alpha1.NodeScriptSpec) { s.MaintenanceBudget = "missing" })
	if d, release := e.gate(plain, "n1"); !slices.Equal(d.Start, []string{"n1"}) {
		t.Fatalf("plain starts %v, want [n1]", d.Start)
	} else {
		release()
	}
}

func TestMaintenanceCondition(t *testing.T) {
	c := maintenanceCondition([]string{"b", "a"})
	if c.Type != "nodeexec.io/Maintenance" || c.Status != corev1.ConditionTrue || c.Reason != v1alpha1.ReasonHeldByNodeScript || !slices.Equal(conditionHolders(c), []string{"a", "b"}) {
		t.Fatalf("%+v", c)
	}
	if c := maintenanceCondition(nil); c.Status != corev1.ConditionFalse || conditionHolders(c) != nil {
		t.Fatalf("%+v", c)
	}
}
