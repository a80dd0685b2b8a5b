package watcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The tests of the Node condition and the operator controls (rerun,
// ignore, run-now), on the fakes.

// condition is node's condition of NodeScript "fix" as stored, or nil.
func (e *env) nodeCondition(node string) *corev1.NodeCondition {
	e.t.Helper()
	return nodescript.FindCondition(e.node(node), nodescript.ConditionType("fix"))
}

// annotate sets (or, with "", removes) annotations of the stored NodeScript "fix".
func (e *env) annotate(ann map[string]string) {
	e.t.Helper()
	ns := e.nodeScript()
	if ns.Annotations == nil {
		ns.Annotations = map[string]string{}
	}
	for k, v := range ann {
		if v == "" {
			delete(ns.Annotations, k)
		} else {
			ns.Annotations[k] = v
		}
	}
	if _, err := e.dyn.Resource(v1alpha1.Resource).Update(e.ctx, toUnstructured(e.t, ns), metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// user makes the fake API server answer SelfSubjectReviews with name.
func (e *env) user(name string) {
	e.cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{Username: name}}}, nil
	})
}

// patches are the clientset's patch calls since the last sync or reconcile.
func (e *env) patches() []string {
	var out []string
	for _, c := range describe(e.cs.Actions()) {
		if strings.HasPrefix(c, "patch ") {
			out = append(out, c)
		}
	}
	return out
}

func TestNodeCondition(t *testing.T) {
	const h = "h1"
	for _, c := range []struct {
		name string
		s    nodeState
		want string // "Status Reason: message"; "" for none
	}{
		{"never ran", nodeState{Phase: v1alpha1.PhasePending}, ""},
		{"succeeded", nodeState{Hash: h, Phase: v1alpha1.PhaseSucceeded, ExitCode: ptr.To(0)}, "True Applied: spec h1 succeeded here"},
		{"failed", nodeState{Hash: h, Phase: v1alpha1.PhaseFailed, ExitCode: ptr.To(3)}, "False Failed: spec h1 failed here: exit code 3"},
		{"timed out", nodeState{Hash: h, Phase: v1alpha1.PhaseFailed, Reason: "Timeout", ExitCode: ptr.To(137)}, "False Failed: spec h1 failed here: Timeout"},
		{"infrastructure", nodeState{Hash: h, Phase: v1alpha1.PhaseFailed, Infrastructure: true, Reason: "ErrImagePull"}, "False Failed: spec h1 failed here: ErrImagePull (an infrastructure failure)"},
		{"rolled back", nodeState{Hash: h, Phase: v1alpha1.PhaseRolledBack, ExitCode: ptr.To(1)}, "False Failed: spec h1 failed here: exit code 1; rolled back"},
		{"running", nodeState{Hash: h, Phase: v1alpha1.PhaseRunning}, "False Pending: spec h1 is running here"},
		{"rerun requested", nodeState{Hash: h, Phase: v1alpha1.PhasePending, Reason: "RerunRequested"}, "False Pending: spec h1 is to run here"},
		{"spec changed", nodeState{Hash: "h0", Phase: v1alpha1.PhaseSucceeded}, "False Outdated: spec h1 not yet run here (last ran spec h0: Succeeded)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ""
			if cond := nodeCondition("fix", h, c.s); cond != nil {
				if cond.Type != "nodeexec.io/fix" || !cond.LastTransitionTime.IsZero() {
					t.Errorf("type %s, transition %s", cond.Type, cond.LastTransitionTime)
				}
				got = string(cond.Status) + " " + cond.Reason + ": " + cond.Message
			}
			if got != c.want {
				t.Errorf("condition %q, want %q", got, c.want)
			}
		})
	}
}

// The condition follows the node's record: none (or the one before) while
// the run goes (the pod is the record), Applied once it succeeded, in the
// same patch as the state (and not written again while unchanged),
// Outdated when the spec changes and while the new spec runs, its
// transition time moving only with its status; removed when the node is no
// longer selected or is ignored.
func TestReconcileNodeCondition(t *testing.T) {
	ns := script(nil)
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("other", func(n *corev1.Node) { n.Labels = nil }))
	check := func(what string, wantCalls []string, status corev1.ConditionStatus, reason, msg string, transition time.Time) {
		t.Helper()
		if diff := cmp.Diff(wantCalls, e.calls["conditions"], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: condition writes (-want +got):\n%s", what, diff)
		}
		c := e.nodeCondition("n1")
		if c == nil {
			t.Fatalf("%s: no condition", what)
		}
		if c.Status != status || c.Reason != reason || c.Message != msg || !c.LastTransitionTime.Time.Equal(transition) {
			t.Errorf("%s: condition %+v; want %s %s %q since %s", what, c, status, reason, msg, transition)
		}
		if e.nodeCondition("other") != nil {
			t.Errorf("%s: a node not selected has the condition", what)
		}
	}
	e.reconcile()
	if len(e.calls["conditions"]) != 0 || e.nodeCondition("n1") != nil {
		t.Errorf("started: condition %+v, writes %v; want none while the pod is the record", e.nodeCondition("n1"), e.calls["conditions"])
	}

	e.clock.Step(time.Minute)
	e.setPod(podName(ns, "n1", v1alpha1.ActionRun, 1), exited(0))
	e.reconcile()
	applied := e.clock.Now()
	check("succeeded", nil, corev1.ConditionTrue, v1alpha1.ConditionApplied, "spec "+hash+" succeeded here", applied)
	if !slices.Contains(e.calls[""], "patch nodes/status n1") {
		t.Errorf("succeeded: the state and condition not written in one patch: %v", e.calls[""])
	}
	if n := e.node("n1"); ready(n).Status != corev1.ConditionTrue {
		t.Errorf("the Ready condition changed: %+v", n.Status.Conditions)
	}

	e.clock.Step(time.Minute)
	e.reconcile()
	check("unchanged", nil, corev1.ConditionTrue, v1alpha1.ConditionApplied, "spec "+hash+" succeeded here", applied)

	// The spec changes: Outdated (a new status), then Pending as the new
	// spec starts (the same status: the transition time stays).
	e.setSpec(func(s *v1alpha1.NodeScriptSpec) { s.Script = "echo v2" })
	e.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	hash2 := v1alpha1.SpecHash(&e.nodeScript().Spec)
	e.sync()
	if _, err := e.c.reconcile(e.ctx, "fix"); err == nil || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("reconcile: %v, want the refused pod", err)
	}
	outdated := e.clock.Now()
	c := e.nodeCondition("n1")
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != v1alpha1.ConditionOutdated || !strings.HasPrefix(c.Message, "spec "+hash2+" not yet run here (last ran spec "+hash) || !c.LastTransitionTime.Time.Equal(outdated) {
		t.Errorf("outdated: %+v", c)
	}
	e.cs.ReactionChain = e.cs.ReactionChain[1:]
	e.clock.Step(time.Minute)
	e.reconcile()
	c = e.nodeCondition("n1")
	if len(e.calls["conditions"]) != 0 || c == nil || c.Reason != v1alpha1.ConditionOutdated || !c.LastTransitionTime.Time.Equal(outdated) {
		t.Errorf("the new spec runs: condition %+v, writes %v; want Outdated, unwritten", c, e.calls["conditions"])
	}

	// Ignored, then no longer selected: no condition.
	e.updateNode("n1", func(n *corev1.Node) { n.Annotations[ignoreAnnotation("fix")] = "alice" })
	e.reconcile()
	if diff := cmp.Diff([]string{"patch nodes/status n1"}, e.calls["conditions"]); diff != "" || e.nodeCondition("n1") != nil {
		t.Errorf("ignored: condition %+v, writes %v", e.nodeCondition("n1"), e.calls["conditions"])
	}
	e.updateNode("n1", func(n *corev1.Node) { delete(n.Annotations, ignoreAnnotation("fix")) })
	e.reconcile()
	if e.nodeCondition("n1") == nil {
		t.Error("no longer ignored: no condition")
	}
	e.updateNode("n1", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "b"} })
	e.reconcile()
	if c := e.nodeCondition("n1"); c != nil {
		t.Errorf("not selected: condition %+v", c)
	}
	e.reconcile()
	if len(e.calls["conditions"]) != 0 {
		t.Errorf("a removed condition removed again: %v", e.calls["conditions"])
	}
}

// A condition written is not written again while the node cache does not
// show it yet.
func TestNodeConditionsStaleCache(t *testing.T) {
	ns := script(nil)
	hash := v1alpha1.SpecHash(&ns.Spec)
	succeeded := nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, ExitCode: ptr.To(0), Since: t0, Attempts: 1}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(succeeded)))
	calls, err := e.phase(nil, func(cached nodeSet) error { return e.c.nodeConditions(e.ctx, ns, hash, cached, t0) })
	if err != nil || !cmp.Equal(calls, []string{"patch nodes/status n1"}) {
		t.Fatalf("first: calls %v, %v", calls, err)
	}
	// The same cache again (the informer has not seen the write).
	cached, _ := e.c.listNodes("fix")
	e.cs.ClearActions()
	if err := e.c.nodeConditions(e.ctx, ns, hash, cached, t0.Add(time.Minute)); err != nil || len(e.cs.Actions()) != 0 {
		t.Errorf("stale cache: calls %v, %v", describe(e.cs.Actions()), err)
	}
	if c := e.nodeCondition("n1"); c == nil || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("condition %+v", c)
	}
}

// Deleting the NodeScript removes its condition and its rerun and ignore
// annotations with its state.
func TestFinalizeRemovesConditionAndRequests(t *testing.T) {
	ns := script(nil)
	ns.Finalizers = []string{v1alpha1.Finalizer}
	now := metav1.NewTime(t0)
	ns.DeletionTimestamp = &now
	cond := corev1.NodeCondition{Type: nodescript.ConditionType("fix"), Status: corev1.ConditionTrue, Reason: v1alpha1.ConditionApplied, Message: "spec h succeeded here"}
	e := newEnv(t, []*v1alpha1.NodeScript{ns},
		testNode("n1", withState(nodeState{Hash: "h", Phase: v1alpha1.PhaseSucceeded}), func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, cond)
			n.Annotations[rerunAnnotation("fix")] = "h"
		}),
		testNode("n2", func(n *corev1.Node) {
			n.Annotations = map[string]string{ignoreAnnotation("fix"): "alice"}
			n.Status.Conditions = append(n.Status.Conditions, *cond.DeepCopy())
		}),
		testNode("n3"))
	e.reconcile()
	for _, node := range []string{"n1", "n2"} {
		n := e.node(node)
		if len(n.Annotations) != 0 || nodescript.FindCondition(n, nodescript.ConditionType("fix")) != nil || ready(n).Status != corev1.ConditionTrue {
			t.Errorf("node %s after finalize: annotations %v, conditions %+v", node, n.Annotations, n.Status.Conditions)
		}
	}
	if diff := cmp.Diff([]string{"patch nodes n1", "patch nodes n2"}, slices.Sorted(slices.Values(e.calls[""]))); diff != "" {
		t.Errorf("node patches (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"patch nodes/status n1", "patch nodes/status n2"}, e.calls["conditions"]); diff != "" {
		t.Errorf("condition patches (-want +got):\n%s", diff)
	}
	if hasFinalizer(e.nodeScript()) {
		t.Error("finalizer kept")
	}
}

// completed is an env where NodeScript ns has succeeded on n1 and n2.
func completed(t *testing.T, ns *v1alpha1.NodeScript, more ...runtime.Object) *env {
	t.Helper()
	hash := v1alpha1.SpecHash(&ns.Spec)
	s := nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, ExitCode: ptr.To(0), Attempts: 1, Since: t0.Add(-time.Hour), Pod: "old"}
	objs := append([]runtime.Object{testNode("n1", withState(s)), testNode("n2", withState(s))}, more...)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, objs...)
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete {
		t.Fatalf("not complete: %+v", st)
	}
	e.recorded()
	return e
}

// nodeexec rerun --node n1: n1 forgets its record and runs again (attempt
// 2, the retry limit counted from it), n2 does not; the request goes.
func TestRerun(t *testing.T) {
	ns := script(nil)
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := completed(t, ns)
	res, err := nodescripts.Rerun(e.ctx, e.cs, e.dyn, "fix", nodeexec.Targets{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&nodescripts.RerunResult{Hash: hash, Nodes: []string{"n1"}}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if v := e.node("n1").Annotations[rerunAnnotation("fix")]; v != hash {
		t.Fatalf("rerun annotation %q", v)
	}
	e.clock.Step(time.Minute)
	e.reconcile()
	pod := podName(ns, "n1", v1alpha1.ActionRun, 2)
	want := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Attempts: 2, AttemptsBefore: 1, Since: e.clock.Now(), Pod: pod, BootID: "boot-1"}
	if diff := cmp.Diff(want, e.state("n1")); diff != "" {
		t.Errorf("n1 (-want +got):\n%s", diff)
	}
	if _, has := e.node("n1").Annotations[rerunAnnotation("fix")]; has {
		t.Error("the rerun request was kept")
	}
	if s := e.state("n2"); s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 1 {
		t.Errorf("n2 ran again: %+v", s)
	}
	// The state (Pending, request removed) then the start (Running).
	if diff := cmp.Diff([]string{"patch nodes/status n1", "create pods " + pod}, e.calls[""]); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	e.checkEvents("rerun", v1alpha1.ReasonRerun)
	if c := e.nodeCondition("n1"); c == nil || c.Reason != v1alpha1.ConditionPending {
		t.Errorf("condition while running again: %+v", c)
	}
	e.setPod(pod, exited(0))
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 2 {
		t.Errorf("after the rerun: %+v", s)
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete || st.Succeeded != 2 {
		t.Errorf("status %+v", st)
	}
	e.checkEvents("rerun finished", v1alpha1.ReasonSucceeded, v1alpha1.ReasonComplete)

	// A retry budget of its own: an infrastructure failure on attempt 4 of
	// a node rerun after attempt 3 is retried with a limit of 1.
	infra := nodeState{Hash: hash, Phase: v1alpha1.PhaseFailed, Infrastructure: true, Attempts: 4, AttemptsBefore: 3, NextRetry: ptr.To(t0)}
	cl := newCluster("a")
	cl["a"].State = infra
	d := decide(t, script(func(s *v1alpha1.NodeScriptSpec) { s.Retry.Limit = ptr.To[int32](1) }), cl, t0)
	if len(d.Start) != 1 {
		t.Errorf("after a rerun, the retry limit counts from it: %+v", d)
	}
}

// A rerun request waits for the run in progress; one for another spec,
// or on a node not selected, is dropped with an Event.
func TestRerunRequests(t *testing.T) {
	ns := script(nil)
	hash := v1alpha1.SpecHash(&ns.Spec)
	succeeded := state(ns, v1alpha1.PhaseSucceeded, nil)
	for _, c := range []struct {
		phaseCase
		request   string
		selected  bool
		wantState string // the state rerun returns: its phase
		wantWrite bool
	}{
		{phaseCase: phaseCase{name: "applied", state: succeeded,
			want:      &nodeState{Phase: v1alpha1.PhasePending, Attempts: 1, AttemptsBefore: 1, Since: t0, Reason: "RerunRequested"},
			wantCalls: []string{"patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonRerun}},
			request: hash, selected: true, wantState: v1alpha1.PhasePending, wantWrite: true},
		{phaseCase: phaseCase{name: "keeps the cordon record", state: state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Cordoned, s.CordonedByUs, s.ExitCode = true, true, ptr.To(1) }),
			want:      &nodeState{Phase: v1alpha1.PhasePending, Attempts: 1, AttemptsBefore: 1, Since: t0, Reason: "RerunRequested", Cordoned: true, CordonedByUs: true},
			wantCalls: []string{"patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonRerun}},
			request: hash, selected: true, wantState: v1alpha1.PhasePending, wantWrite: true},
		{phaseCase: phaseCase{name: "running: waits", state: state(ns, v1alpha1.PhaseRunning, nil)},
			request: hash, selected: true, wantState: v1alpha1.PhaseRunning},
		{phaseCase: phaseCase{name: "rollback going: waits", state: state(ns, v1alpha1.PhaseFailed, nil), going: []string{v1alpha1.ActionRollback}},
			request: hash, selected: true, wantState: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{name: "another spec: dropped", state: succeeded, wantCalls: []string{"patch nodes n1"}, wantReasons: []string{v1alpha1.ReasonRerunDropped}},
			request: "old", selected: true, wantState: v1alpha1.PhaseSucceeded, wantWrite: true},
		{phaseCase: phaseCase{name: "not selected: dropped", state: succeeded, wantCalls: []string{"patch nodes n1"}, wantReasons: []string{v1alpha1.ReasonRerunDropped}},
			request: hash, selected: false, wantState: v1alpha1.PhaseSucceeded, wantWrite: true},
		{phaseCase: phaseCase{name: "no record: dropped quietly", wantCalls: []string{"patch nodes n1"}},
			request: hash, selected: true, wantState: v1alpha1.PhasePending, wantWrite: true},
		{phaseCase: phaseCase{name: "no request", state: succeeded},
			selected: true, wantState: v1alpha1.PhaseSucceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.request != "" {
				c.node = func(n *corev1.Node) {
					if n.Annotations == nil {
						n.Annotations = map[string]string{}
					}
					n.Annotations[rerunAnnotation("fix")] = c.request
				}
			}
			e, ns := c.setUp(t)
			calls, err := e.phase(nil, func(cached nodeSet) error {
				n := cached.byName["n1"]
				s, _ := e.c.w.state(e.ctx, "fix", n)
				got, write := e.c.rerun(e.ctx, ns, hash, n, s, c.selected, c.runPods(), t0)
				if got.Phase != c.wantState || (write != nil) != c.wantWrite {
					t.Errorf("state %s, write %t; want %s, %t", got.Phase, write != nil, c.wantState, c.wantWrite)
				}
				if write == nil {
					return nil
				}
				return write()
			})
			c.check(t, e, ns, calls, err)
			if _, has := e.node("n1").Annotations[rerunAnnotation("fix")]; has == c.wantWrite && c.request != "" {
				t.Errorf("request kept: %t, want %t", has, !c.wantWrite)
			}
		})
	}
}

// Rerun checks every node before changing any.
func TestRerunRefuses(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.ExcludeNodes = []string{"excluded"} })
	hash := v1alpha1.SpecHash(&ns.Spec)
	ran := withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded})
	e := newEnv(t, []*v1alpha1.NodeScript{ns},
		testNode("n1", ran),
		testNode("fresh"),
		testNode("old", withState(nodeState{Hash: "old", Phase: v1alpha1.PhaseSucceeded})),
		testNode("excluded", ran),
		testNode("ignored", ran, func(n *corev1.Node) { n.Annotations[ignoreAnnotation("fix")] = "alice" }),
		testNode("other", ran, func(n *corev1.Node) { n.Labels = map[string]string{"pool": "b"} }))
	for _, c := range []struct {
		name    string
		targets nodeexec.Targets
		is      error
		want    []string
	}{
		{"no target", nodeexec.Targets{}, nil, []string{"exactly one of", "--node", "--selector"}},
		{"both", nodeexec.Targets{Nodes: []string{"n1"}, Selector: "pool=a"}, nil, []string{"exactly one of"}},
		{"bad name", nodeexec.Targets{Nodes: []string{"N_1"}}, nil, []string{`"N_1"`, "not a node name"}},
		{"bad selector", nodeexec.Targets{Selector: "a in ("}, nil, []string{`invalid label selector "a in ("`}},
		{"unknown node", nodeexec.Targets{Nodes: []string{"n1", "gone"}}, nodeexec.ErrNodeNotFound, []string{`["gone"]`}},
		{"never ran", nodeexec.Targets{Nodes: []string{"n1", "fresh"}}, nil, []string{"node fresh has not run spec " + hash}},
		{"older spec", nodeexec.Targets{Nodes: []string{"old"}}, nil, []string{"node old has not run spec"}},
		{"excluded", nodeexec.Targets{Nodes: []string{"excluded"}}, nil, []string{"node excluded is not selected by nodescript fix"}},
		{"ignored", nodeexec.Targets{Nodes: []string{"ignored"}}, nil, []string{"node ignored is not selected"}},
		{"not selected", nodeexec.Targets{Nodes: []string{"other"}}, nil, []string{"node other is not selected"}},
		{"selector matches none that ran", nodeexec.Targets{Selector: "pool=b"}, nodeexec.ErrNoNodes, []string{`label selector "pool=b" matched no node that nodescript fix selects`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.cs.ClearActions()
			_, err := nodescripts.Rerun(e.ctx, e.cs, e.dyn, "fix", c.targets)
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("err %v, want %v", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if p := e.patches(); len(p) != 0 {
				t.Errorf("patched: %v", p)
			}
		})
	}
	if _, err := nodescripts.Rerun(e.ctx, e.cs, e.dyn, "missing", nodeexec.Targets{All: true}); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("missing NodeScript: %v", err)
	}
	// --all: every selected node with a record of the current spec.
	res, err := nodescripts.Rerun(e.ctx, e.cs, e.dyn, "fix", nodeexec.Targets{All: true})
	if err != nil || !cmp.Equal(res.Nodes, []string{"n1"}) {
		t.Errorf("all: %+v, %v", res, err)
	}
}

// nodeexec ignore: the node is left out of the rollout (not counted, not
// started) and nodeexec status says so; unignored, it runs.
func TestIgnore(t *testing.T) {
	ns := script(nil)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.user("alice")
	for _, c := range []struct {
		name  string
		nodes []string
		is    error
		want  string
	}{
		{"none", nil, nil, "no node named"},
		{"bad name", []string{"a b"}, nil, `"a b": not a node name`},
		{"unknown", []string{"n1", "gone"}, nodeexec.ErrNodeNotFound, `["gone"]`},
	} {
		e.cs.ClearActions()
		if _, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "fix", c.nodes, true); err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
		if p := e.patches(); len(p) != 0 {
			t.Errorf("%s: patched %v", c.name, p)
		}
	}
	if _, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "missing", []string{"n1"}, true); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("missing NodeScript: %v", err)
	}

	who, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "fix", []string{"n1"}, true)
	if err != nil || who.User != "alice" {
		t.Fatalf("ignore: %+v, %v", who, err)
	}
	if v, has := e.node("n1").Annotations[ignoreAnnotation("fix")]; !has || v != "alice" {
		t.Errorf("ignore annotation %q", v)
	}
	e.reconcile()
	if p := e.pods(); len(p) != 0 {
		t.Errorf("an ignored node started: %v", p)
	}
	if st := e.nodeScript().Status; st.Nodes != 0 {
		t.Errorf("an ignored node counted: %+v", st)
	}
	rep, err := nodescripts.Status(e.ctx, e.cs, e.dyn, "fix")
	if err != nil || len(rep.Nodes) != 1 || !rep.Nodes[0].Ignored || rep.Nodes[0].IgnoredBy != "alice" || rep.Nodes[0].Selected {
		t.Errorf("status: %+v, %v", rep, err)
	}

	if _, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "fix", []string{"n1"}, false); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseRunning {
		t.Errorf("unignored: %+v", s)
	}
}

// nodeexec ignore on a node the NodeScript does not select (its selector
// does not match, or spec.excludeNodes names it) is refused naming the node
// and the selector, and changes no node; unignore there is allowed.
func TestIgnoreRefusesUnselected(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.ExcludeNodes = []string{"excluded"} })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("excluded"),
		testNode("other", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "b"} }))
	e.user("alice")
	for _, nodes := range [][]string{{"other"}, {"n1", "excluded"}} {
		e.cs.ClearActions()
		_, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "fix", nodes, true)
		want := fmt.Sprintf("node %s is not selected by nodescript fix (spec.nodeSelector \"pool=a\"", nodes[len(nodes)-1])
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ignore %v: err %v, want %q", nodes, err, want)
		}
		if p := e.patches(); len(p) != 0 {
			t.Errorf("ignore %v: patched %v", nodes, p)
		}
	}
	if _, err := nodescripts.SetIgnored(e.ctx, e.cs, e.dyn, "fix", []string{"other"}, false); err != nil {
		t.Errorf("unignore a node not selected: %v", err)
	}
}

// run-now for longer than MaxRunNowFor is refused, changing nothing.
func TestRunNowTooLong(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Window = &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"} })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	_, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", nodescripts.RunNowOptions{For: nodescripts.MaxRunNowFor + time.Second, Clock: e.clock})
	if err == nil || !strings.Contains(err.Error(), "at most 168h0m0s (MaxRunNowFor)") {
		t.Errorf("err %v, want at most MaxRunNowFor", err)
	}
	if _, set, _ := nodescript.RunNowUntil(e.nodeScript()); set {
		t.Error("override set")
	}
	if _, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", nodescripts.RunNowOptions{For: nodescripts.MaxRunNowFor, Clock: e.clock}); err != nil {
		t.Errorf("MaxRunNowFor itself: %v", err)
	}
}

// nodeexec run-now: runs start while the window is closed until the
// override ends, recorded in Events with who asked; then the watcher
// removes it and holds again.
func TestRunNow(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Window = &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"} // t0 is 12:00 UTC
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	e.user("alice")
	e.reconcile()
	if st := e.nodeScript().Status; st.NextWindow == nil || len(e.pods()) != 0 {
		t.Fatalf("not held outside the window: %+v", st)
	}

	res, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", nodescripts.RunNowOptions{For: 30 * time.Minute, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	until := t0.Add(30 * time.Minute)
	if !res.Until.Equal(until) || res.By.User != "alice" {
		t.Errorf("result %+v", res)
	}
	ann := e.nodeScript().Annotations
	if ann[v1alpha1.AnnotationRunNow] != until.Format(time.RFC3339) || ann[v1alpha1.AnnotationRunNowBy] != "alice" {
		t.Errorf("annotations %v", ann)
	}
	after := e.reconcile()
	if len(e.pods()) != 1 {
		t.Errorf("run-now: pods %v, want the canary's", e.pods())
	}
	if after != 30*time.Minute {
		t.Errorf("look again after %s, want when the override ends", after)
	}
	st := e.nodeScript().Status
	if c := e.condition(v1alpha1.ConditionProgressing); st.NextWindow != nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "run-now override until "+until.Format(time.RFC3339)) {
		t.Errorf("status %+v, Progressing %+v", st, c)
	}
	evs := e.recorded()
	if len(evs) != 1 || !strings.Contains(evs[0], v1alpha1.ReasonRunNow+" run-now override asked by alice") {
		t.Errorf("events %q", evs)
	}
	e.reconcile()
	e.checkEvents("the same override again") // recorded once

	// It ends: removed, an Event, held again (the run in progress goes on).
	e.clock.Step(30 * time.Minute)
	e.reconcile()
	if ann := e.nodeScript().Annotations; ann[v1alpha1.AnnotationRunNow] != "" || ann[v1alpha1.AnnotationRunNowBy] != "" {
		t.Errorf("expired override kept: %v", ann)
	}
	e.checkEvents("expired", v1alpha1.ReasonRunNowExpired)
	if c := e.condition(v1alpha1.ConditionProgressing); c.Reason != v1alpha1.HoldOutsideWindow {
		t.Errorf("after the override: Progressing %+v", c)
	}

	// Set, then cancelled by hand: an Event says so.
	if _, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", nodescripts.RunNowOptions{Clock: e.clock}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	e.checkEvents("set again", v1alpha1.ReasonRunNow)
	if res, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", nodescripts.RunNowOptions{Cancel: true}); err != nil || !res.Until.IsZero() {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	e.reconcile()
	e.checkEvents("cancelled", v1alpha1.ReasonRunNowCancelled)

	// Unreadable: removed with a warning.
	e.annotate(map[string]string{v1alpha1.AnnotationRunNow: "tonight"})
	e.reconcile()
	e.checkEvents("invalid", v1alpha1.ReasonRunNowInvalid)
	if ann := e.nodeScript().Annotations; ann[v1alpha1.AnnotationRunNow] != "" {
		t.Errorf("invalid override kept: %v", ann)
	}
}

func TestRunNowRefuses(t *testing.T) {
	window := &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"}
	for _, c := range []struct {
		name string
		spec func(*v1alpha1.NodeScriptSpec)
		o    nodescripts.RunNowOptions
		want string
	}{
		{"no window", nil, nodescripts.RunNowOptions{}, "has no spec.window"},
		{"paused", func(s *v1alpha1.NodeScriptSpec) { s.Window, s.Paused = window, true }, nodescripts.RunNowOptions{}, "nodeexec resume fix"},
		{"negative", func(s *v1alpha1.NodeScriptSpec) { s.Window = window }, nodescripts.RunNowOptions{For: -time.Hour}, "RunNowOptions.For is -1h0m0s"},
		{"cancel with a duration", func(s *v1alpha1.NodeScriptSpec) { s.Window = window }, nodescripts.RunNowOptions{For: time.Hour, Cancel: true}, "Cancel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, []*v1alpha1.NodeScript{script(c.spec)})
			e.dyn.ClearActions()
			if _, err := nodescripts.RunNow(e.ctx, e.cs, e.dyn, "fix", c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want %q", err, c.want)
			}
			for _, a := range describe(e.dyn.Actions()) {
				if strings.HasPrefix(a, "patch") {
					t.Errorf("patched: %v", a)
				}
			}
		})
	}
}

// WhoAmI names the user, or says clearly why it cannot.
func TestWhoAmI(t *testing.T) {
	e := newEnv(t, nil)
	if who := nodescripts.WhoAmI(e.ctx, e.cs); who.User != v1alpha1.UnknownUser || !strings.Contains(who.Unknown, "no username") {
		t.Errorf("empty review: %+v", who)
	}
	e.cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the server could not find the requested resource")
	})
	if who := nodescripts.WhoAmI(e.ctx, e.cs); who.User != v1alpha1.UnknownUser || !strings.Contains(who.Unknown, "SelfSubjectReview (authentication.k8s.io/v1) failed: the server could not find") {
		t.Errorf("no review: %+v", who)
	}
	e.user("system:admin")
	if who := nodescripts.WhoAmI(e.ctx, e.cs); who != (nodescripts.Requester{User: "system:admin"}) {
		t.Errorf("review: %+v", who)
	}
}

// Decide: a run-now override in effect lets runs start while the window is
// closed, not while paused; an expired or unreadable one does nothing.
func TestDecideRunNow(t *testing.T) {
	window := &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"} // t0 is 12:00 UTC
	for _, c := range []struct {
		name     string
		value    string
		paused   bool
		wantHold string
		wantRun  time.Time
	}{
		{"in effect", t0.Add(time.Hour).Format(time.RFC3339), false, "", t0.Add(time.Hour)},
		{"expired", t0.Format(time.RFC3339), false, v1alpha1.HoldOutsideWindow, time.Time{}},
		{"unreadable", "soon", false, v1alpha1.HoldOutsideWindow, time.Time{}},
		{"paused", t0.Add(time.Hour).Format(time.RFC3339), true, v1alpha1.HoldPaused, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Window, s.Paused = window, c.paused })
			ns.Annotations = map[string]string{v1alpha1.AnnotationRunNow: c.value}
			d := decide(t, ns, newCluster("a", "b"), t0)
			if d.Hold != c.wantHold || !d.RunNow.Equal(c.wantRun) || (c.wantHold == "") != (len(d.Start) == 1) {
				t.Errorf("decision %+v; want hold %q, run-now %s", d, c.wantHold, c.wantRun)
			}
		})
	}
	// Ignored nodes are not selected.
	cl := newCluster("a", "b")
	cl["a"].Ignored = true
	if d := decide(t, script(nil), cl, t0); d.Counts.Nodes != 1 || !cmp.Equal(d.Start, []string{"b"}) {
		t.Errorf("ignored node: %+v", d)
	}
}
