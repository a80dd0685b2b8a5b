package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// promStub is an httptest stand-in for Prometheus' GET /api/v1/query
// (unit tests only): it answers a vector of values (none: no series), or
// fails with status when set, and counts the queries.
type promStub struct {
	mu      sync.Mutex
	values  []float64
	status  int
	queries atomic.Int64
	srv     *httptest.Server
}

func newPromStub(t *testing.T) *promStub {
	p := &promStub{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.queries.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		if p.status != 0 {
			w.WriteHeader(p.status)
			fmt.Fprint(w, `{"status":"error","errorType":"internal","error":"stub failure"}`)
			return
		}
		var result []any
		for i, v := range p.values {
			result = append(result, map[string]any{"metric": map[string]string{"__name__": "m", "i": fmt.Sprint(i)}, "value": []any{1700000000, fmt.Sprint(v)}})
		}
		if result == nil {
			result = []any{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *promStub) set(status int, values ...float64) {
	p.mu.Lock()
	p.status, p.values = status, values
	p.mu.Unlock()
}

// amStub is an httptest stand-in for Alertmanager's GET /api/v2/alerts
// (unit tests only), answering the alerts set (label sets).
type amStub struct {
	mu     sync.Mutex
	alerts []map[string]string
	srv    *httptest.Server
}

func newAMStub(t *testing.T) *amStub {
	a := &amStub{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/alerts" || r.URL.Query().Get("active") != "true" || r.URL.Query().Get("silenced") != "false" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		out := []any{}
		for _, ls := range a.alerts {
			out = append(out, map[string]any{"labels": ls, "status": map[string]any{"state": "active", "silencedBy": []string{}, "inhibitedBy": []string{}}})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *amStub) set(alerts ...map[string]string) {
	a.mu.Lock()
	a.alerts = alerts
	a.mu.Unlock()
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func gatedScript(gates ...v1alpha1.Gate) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Gates = gates
		three, zero := intstr.FromInt32(3), int32(0)
		s.Rollout.MaxConcurrency = &three
		s.Rollout.Canary = &zero
	})
}

func gateStatusOf(t *testing.T, ns *v1alpha1.NodeScript, name string) v1alpha1.GateStatus {
	t.Helper()
	for _, g := range ns.Status.Gates {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no status.gates entry %q in %+v", name, ns.Status.Gates)
	return v1alpha1.GateStatus{}
}

// Many nodes and many reconciles within one interval make one query.
func TestGateQueriesCachedPerInterval(t *testing.T) {
	prom := newPromStub(t)
	ns := gatedScript(v1alpha1.Gate{Name: "errors", Interval: dur(10 * time.Second), Prometheus: &v1alpha1.PrometheusGate{URL: prom.srv.URL, Query: "up == 0"}})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"), testNode("n4"))
	for range 5 {
		e.reconcile()
	}
	if got := prom.queries.Load(); got != 1 {
		t.Fatalf("5 reconciles of 4 nodes within the interval: %d queries, want 1", got)
	}
	if got := testutil.ToFloat64(e.c.w.metrics.gateQueries.WithLabelValues("fix", "errors", "ok")); got != 1 {
		t.Errorf("nodeexec_watcher_gate_queries_total = %v, want 1", got)
	}
	e.clock.Step(9 * time.Second)
	e.reconcile()
	if got := prom.queries.Load(); got != 1 {
		t.Fatalf("9s later: %d queries, want 1", got)
	}
	e.clock.Step(time.Second)
	e.reconcile()
	e.reconcile()
	if got := prom.queries.Load(); got != 2 {
		t.Fatalf("one interval later: %d queries, want 2", got)
	}
	// A changed gate spec is read again at once.
	e.setSpec(func(s *v1alpha1.NodeScriptSpec) { s.Gates[0].Prometheus.Query = "up == 2" })
	e.reconcile()
	if got := prom.queries.Load(); got != 3 {
		t.Fatalf("after a spec change: %d queries, want 3", got)
	}
	g := gateStatusOf(t, e.nodeScript(), "errors")
	if !g.Open || g.Value != "0 series" {
		t.Errorf("status.gates: %+v, want open with 0 series", g)
	}
}

// A firing alert holds every node; resolving it releases them, with the
// condition Gated and the Events GateClosed and GateOpened.
func TestGateAlertsHoldAndRelease(t *testing.T) {
	am := newAMStub(t)
	am.set(map[string]string{"alertname": "NodeDown", "severity": "critical"}, map[string]string{"alertname": "Watchdog", "severity": "critical"})
	ns := gatedScript(v1alpha1.Gate{Name: "no-critical", Interval: dur(5 * time.Second),
		Alerts: &v1alpha1.AlertsGate{URL: am.srv.URL, Matchers: []string{"severity=critical"}, Ignore: []string{"alertname=Watchdog"}}})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	after := e.reconcile()
	if p := e.pods(); len(p) != 0 {
		t.Fatalf("gate closed: pods %v created", p)
	}
	if after <= 0 || after > 5*time.Second {
		t.Errorf("requeue after %s, want within the gate's interval 5s", after)
	}
	got := e.nodeScript()
	g := gateStatusOf(t, got, "no-critical")
	if g.Open || !strings.Contains(g.Value, "1 firing") || !strings.Contains(g.Value, "NodeDown") || strings.Contains(g.Value, "Watchdog") {
		t.Errorf("status.gates: %+v, want closed on NodeDown only", g)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionGated)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "no-critical") || !strings.Contains(c.Message, "NodeDown") {
		t.Errorf("condition Gated: %+v", c)
	}
	if p := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing); p == nil || p.Reason != v1alpha1.HoldGated {
		t.Errorf("condition Progressing: %+v, want reason %s", p, v1alpha1.HoldGated)
	}
	e.checkEvents("closed", v1alpha1.ReasonGateClosed)
	if v := testutilGauge(e, "no-critical"); v != 0 {
		t.Errorf("gate open gauge %v, want 0", v)
	}
	// Still firing a reconcile later: no second Event.
	e.reconcile()
	e.checkEvents("still closed")

	am.set()
	e.clock.Step(5 * time.Second)
	e.reconcile()
	if p := e.pods(); len(p) != 2 {
		t.Fatalf("gate open: pods %v, want both nodes started", p)
	}
	e.checkEvents("opened", v1alpha1.ReasonGateOpened)
	got = e.nodeScript()
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionGated); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("condition Gated after the alert resolved: %+v", c)
	}
	if v := testutilGauge(e, "no-critical"); v != 1 {
		t.Errorf("gate open gauge %v, want 1", v)
	}
}

func testutilGauge(e *env, gate string) float64 {
	return testutil.ToFloat64(e.c.w.metrics.gateOpen.WithLabelValues("fix", gate))
}

// A gate open counts only once open continuously for its `for`; a close
// in between starts the count again.
func TestGateFor(t *testing.T) {
	prom := newPromStub(t)
	prom.set(0, 0.01)
	ns := gatedScript(v1alpha1.Gate{Name: "err-rate", For: dur(time.Minute), Interval: dur(10 * time.Second),
		Prometheus: &v1alpha1.PrometheusGate{URL: prom.srv.URL, Query: "job:errors:rate5m", Condition: "< 0.05"}})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	after := e.reconcile()
	g := gateStatusOf(t, e.nodeScript(), "err-rate")
	if g.Open || !g.SeenOpen || !strings.Contains(g.Message, "counts as open after 1m0s") {
		t.Fatalf("seen open, for 1m not passed: %+v", g)
	}
	if len(e.pods()) != 0 || after > 10*time.Second {
		t.Fatalf("pods %v, requeue %s", e.pods(), after)
	}
	e.clock.Step(30 * time.Second)
	prom.set(0, 0.2) // closes
	e.reconcile()
	if g := gateStatusOf(t, e.nodeScript(), "err-rate"); g.Open || g.SeenOpen || !strings.Contains(g.Message, "does not satisfy < 0.05") {
		t.Fatalf("value 0.2: %+v", g)
	}
	e.clock.Step(10 * time.Second)
	prom.set(0, 0.01) // open again at t0+40s
	e.reconcile()
	e.clock.Step(50 * time.Second) // t0+90s: only 50s open
	e.reconcile()
	if len(e.pods()) != 0 {
		t.Fatalf("open 50s of for 1m: pods %v", e.pods())
	}
	e.clock.Step(10 * time.Second) // t0+100s: open 60s
	e.reconcile()
	if len(e.pods()) != 1 {
		t.Fatalf("open for 1m: pods %v, want n1 started", e.pods())
	}
}

// The start of `for` is in the status: a new watcher (a restart) reading
// it counts the time already passed.
func TestGateForSurvivesRestart(t *testing.T) {
	prom := newPromStub(t)
	ns := gatedScript(v1alpha1.Gate{Name: "quiet", For: dur(time.Minute), Interval: dur(10 * time.Second), Prometheus: &v1alpha1.PrometheusGate{URL: prom.srv.URL, Query: "ALERTS"}})
	ns.Status.Gates = []v1alpha1.GateStatus{{Name: "quiet", SeenOpen: true, Since: &metav1.Time{Time: t0.Add(-2 * time.Minute)}, LastChecked: &metav1.Time{Time: t0.Add(-5 * time.Second)}}}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if g := gateStatusOf(t, e.nodeScript(), "quiet"); !g.Open || !g.Since.Time.Equal(t0.Add(-2*time.Minute)) {
		t.Fatalf("open since 2m by the status: %+v", g)
	}
	if len(e.pods()) != 1 {
		t.Fatalf("pods %v, want n1 started", e.pods())
	}
}

// A gate whose check fails is closed, with the error in status.
func TestGateErrorIsClosed(t *testing.T) {
	prom := newPromStub(t)
	prom.set(http.StatusInternalServerError)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	ns := gatedScript(
		v1alpha1.Gate{Name: "bad-answer", Prometheus: &v1alpha1.PrometheusGate{URL: prom.srv.URL, Query: "up"}},
		v1alpha1.Gate{Name: "down", Alerts: &v1alpha1.AlertsGate{URL: down.URL}},
	)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if len(e.pods()) != 0 {
		t.Fatalf("gates erroring: pods %v", e.pods())
	}
	got := e.nodeScript()
	for _, name := range []string{"bad-answer", "down"} {
		g := gateStatusOf(t, got, name)
		if g.Open || g.Value != "error" || !strings.Contains(g.Message, "the check failed") {
			t.Errorf("%s: %+v, want closed with the error", name, g)
		}
	}
	if g := gateStatusOf(t, got, "bad-answer"); !strings.Contains(g.Message, "500") {
		t.Errorf("bad-answer: message %q lacks the server's error", g.Message)
	}
	if got := testutil.ToFloat64(e.c.w.metrics.gateQueries.WithLabelValues("fix", "down", "error")); got != 1 {
		t.Errorf("error queries %v, want 1", got)
	}
}

// A timeout is bounded by Options.GateTimeout, and closes the gate.
func TestGateTimeout(t *testing.T) {
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(block); slow.Close() })
	ns := gatedScript(v1alpha1.Gate{Name: "slow", Prometheus: &v1alpha1.PrometheusGate{URL: slow.URL, Query: "up"}})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.c.w.o.GateTimeout = 200 * time.Millisecond
	start := time.Now()
	e.reconcile()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("reconcile took %s with a gate timeout of 200ms", took)
	}
	if g := gateStatusOf(t, e.nodeScript(), "slow"); g.Open || !strings.Contains(g.Message, "context deadline exceeded") {
		t.Errorf("%+v, want closed by the timeout", g)
	}
}

// A closed gate holds promotion: the canary soaked, the rest wait.
func TestGateHoldsPromotion(t *testing.T) {
	am := newAMStub(t)
	am.set(map[string]string{"alertname": "X"})
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Gates = []v1alpha1.Gate{{Name: "quiet", Interval: dur(time.Second), Alerts: &v1alpha1.AlertsGate{URL: am.srv.URL}}}
	})
	done := nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-time.Hour)}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(done)), testNode("n2", withState(done)), testNode("n3"))
	e.reconcile()
	if len(e.pods()) != 0 {
		t.Fatalf("gate closed after the soak: pods %v", e.pods())
	}
	if got := e.nodeScript(); got.Status.Stage != v1alpha1.StageRolling || meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing).Reason != v1alpha1.HoldGated {
		t.Errorf("stage %s, conditions %+v", got.Status.Stage, got.Status.Conditions)
	}
	am.set()
	e.clock.Step(time.Second)
	e.reconcile()
	if len(e.pods()) != 1 {
		t.Fatalf("gate open: pods %v, want n3 started", e.pods())
	}
}

// With spec.checkScript, the check runs before the gates are asked; the
// script waits for them.
func TestGateLetsChecksRun(t *testing.T) {
	am := newAMStub(t)
	am.set(map[string]string{"alertname": "X"})
	ns := gatedScript(v1alpha1.Gate{Name: "quiet", Alerts: &v1alpha1.AlertsGate{URL: am.srv.URL}})
	ns.Spec.CheckScript = "exit 1"
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2", withState(nodeState{Hash: hash, Phase: v1alpha1.PhasePending, Checked: true})))
	e.reconcile()
	pods, err := e.cs.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "n1" || pods.Items[0].Labels[v1alpha1.LabelAction] != v1alpha1.ActionCheck {
		t.Fatalf("pods %v, want only n1's check", e.pods())
	}
}

func TestGateCEL(t *testing.T) {
	deploy := func(ready int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "shop", "labels": map[string]any{"app": "web"}},
			"spec":     map[string]any{"replicas": int64(3)},
			"status":   map[string]any{"availableReplicas": ready},
		}}
	}
	node := func(name, ready string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name},
			"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": ready}}},
		}}
	}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Node"}, meta.RESTScopeRoot)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{deployments: "DeploymentList", nodes: "NodeList"},
		deploy(1), node("a", "True"), node("b", "False"), node("c", "Unknown"))
	w, err := New(Options{Client: fake.NewSimpleClientset(), Dynamic: dyn, RESTMapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	available := &v1alpha1.CELGate{Resource: v1alpha1.GateResource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"},
		Expression: "object.status.availableReplicas == object.spec.replicas"}
	notReady := func(max int) *v1alpha1.CELGate {
		return &v1alpha1.CELGate{Resource: v1alpha1.GateResource{APIVersion: "v1", Kind: "Node"},
			Expression: fmt.Sprintf("objects.filter(n, n.status.conditions.exists(c, c.type == 'Ready' && c.status != 'True')).size() <= %d", max)}
	}
	ctx := context.Background()
	check := func(what string, g *v1alpha1.CELGate, wantOpen bool, wantErr string) {
		t.Helper()
		res, err := w.evalCEL(ctx, g)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: error %v, want one containing %q", what, err, wantErr)
			}
			return
		}
		if err != nil || res.open != wantOpen {
			t.Errorf("%s: %+v, %v; want open %v", what, res, err, wantOpen)
		}
	}
	check("deployment 1 of 3 available", available, false, "")
	if _, err := dyn.Resource(deployments).Namespace("shop").Update(ctx, deploy(3), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("deployment 3 of 3 available", available, true, "")
	check("2 nodes NotReady, at most 1", notReady(1), false, "")
	check("2 nodes NotReady, at most 2", notReady(2), true, "")
	sel := notReady(0)
	sel.Resource.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}
	check("selector matching nothing", sel, true, "")
	noNS := *available
	noNS.Resource.Namespace = ""
	check("namespaced kind without namespace", &noNS, false, "set resource.namespace")
	missing := *available
	missing.Resource.Name = "gone"
	check("missing object", &missing, false, "not found")
	unknown := *available
	unknown.Resource.Kind = "Nope"
	check("unknown kind", &unknown, false, "Nope")
	notBool := *available
	notBool.Expression = "object.spec.replicas"
	check("a dyn that is not a bool", &notBool, false, "want a bool")
	badField := *available
	badField.Expression = "object.status.nothing == 1"
	check("a missing field", &badField, false, "evaluating")
}

func TestGateConditionHolds(t *testing.T) {
	for _, c := range []struct {
		cond string
		v    float64
		want bool
	}{
		{"< 0.05", 0.01, true}, {"< 0.05", 0.05, false}, {"<= 0.05", 0.05, true}, {">3", 4, true}, {">= 3", 2, false},
		{"== 0", 0, true}, {"== 0", 1, false}, {"!= 0", 1, true}, {" <  -1e3 ", -2000, true},
	} {
		cond, err := v1alpha1.ParseGateCondition(c.cond)
		if err != nil {
			t.Fatalf("%q: %v", c.cond, err)
		}
		if got := cond.Holds(c.v); got != c.want {
			t.Errorf("%q holds for %v: %v, want %v", c.cond, c.v, got, c.want)
		}
	}
}

func TestGateOptions(t *testing.T) {
	if _, err := New(Options{Client: fake.NewSimpleClientset(), Dynamic: fakeDynamic(t), GateTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "Options.GateTimeout") {
		t.Errorf("negative GateTimeout: %v", err)
	}
	w, err := New(Options{Client: fake.NewSimpleClientset(), Dynamic: fakeDynamic(t)})
	if err != nil {
		t.Fatal(err)
	}
	if w.o.GateTimeout != DefaultGateTimeout || w.o.HTTPClient == nil || w.o.HTTPClient.Timeout != DefaultGateTimeout || w.o.RESTMapper == nil {
		t.Errorf("defaults: %s %+v %v", w.o.GateTimeout, w.o.HTTPClient, w.o.RESTMapper)
	}
}
