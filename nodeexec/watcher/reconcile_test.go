package watcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The tests of reconcile end to end: a NodeScript rolled out over fake
// clients, its pods finished by the test as kubelets would, time moved by
// the fake clock.

// runningNode finds the node whose state is Running, and its pod; it fails the
// test unless exactly one is.
func (e *env) runningNode(names ...string) (string, string) {
	e.t.Helper()
	var found []string
	pod := ""
	for _, n := range names {
		if s := e.state(n); s.Phase == v1alpha1.PhaseRunning {
			found, pod = append(found, n), s.Pod
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("nodes running: %v, want one", found)
	}
	return found[0], pod
}

// condition is the stored NodeScript's condition typ.
func (e *env) condition(typ string) metav1.Condition {
	e.t.Helper()
	c := meta.FindStatusCondition(e.nodeScript().Status.Conditions, typ)
	if c == nil {
		e.t.Fatalf("no condition %s", typ)
	}
	return *c
}

func TestReconcileRollout(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.RecordOutput = true })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"))
	names := []string{"n1", "n2", "n3"}

	if after := e.reconcile(); after != 0 {
		t.Errorf("first reconcile: look again after %s, want 0", after)
	}
	canary, pod := e.runningNode(names...)
	if want := podName(ns, canary, v1alpha1.ActionRun, 1); pod != want {
		t.Errorf("canary pod %s, want %s", pod, want)
	}
	// The pod is the run's record while it goes: nothing else is written.
	if diff := cmp.Diff([]string{"create pods " + pod}, e.calls[""]); diff != "" {
		t.Errorf("first reconcile, clientset (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"get nodescripts fix", "patch nodescripts fix", "patch nodescripts/status fix"}, e.calls["dyn"]); diff != "" {
		t.Errorf("first reconcile, dynamic client (-want +got):\n%s", diff)
	}
	want := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Attempts: 1, Since: t0, Pod: pod, BootID: "boot-1"}
	if diff := cmp.Diff(want, e.state(canary)); diff != "" {
		t.Errorf("canary state (-want +got):\n%s", diff)
	}
	got := e.nodeScript()
	// The status counts the nodes as Decide found them, before the start.
	if got.Status.Stage != v1alpha1.StageCanary || got.Status.Nodes != 3 || got.Status.Pending != 3 || got.Status.SpecHash != hash || !hasFinalizer(got) {
		t.Errorf("after the first reconcile: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
	if c := e.condition(v1alpha1.ConditionProgressing); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.StageCanary {
		t.Errorf("Progressing: %+v", c)
	}

	// Each run succeeds in turn; the next node starts in the reconcile that
	// records it.
	done := map[string]bool{}
	for i := range names {
		e.clock.Step(time.Minute)
		e.setPod(pod, exited(0))
		prevNode, prevPod := canary, pod
		e.reconcile()
		done[prevNode] = true
		s := e.state(prevNode)
		if s.Phase != v1alpha1.PhaseSucceeded || s.ExitCode == nil || *s.ExitCode != 0 || !s.Since.Equal(e.clock.Now()) {
			t.Errorf("run %d on %s: state %+v, want Succeeded with exit code 0", i, prevNode, s)
		}
		wantActions := []string{
			"get pods/log", "get configmaps fix." + prevNode, "create configmaps fix." + prevNode,
			"patch nodes/status " + prevNode, "delete pods " + prevPod,
		}
		wantReasons := []string{v1alpha1.ReasonSucceeded}
		if i < len(names)-1 {
			canary, pod = e.runningNode(names...)
			if done[canary] {
				t.Fatalf("node %s started again", canary)
			}
			wantActions = append(wantActions, "create pods "+pod)
		} else {
			wantReasons = append(wantReasons, v1alpha1.ReasonComplete)
		}
		if diff := cmp.Diff(wantActions, e.calls[""]); diff != "" {
			t.Errorf("run %d, clientset (-want +got):\n%s", i, diff)
		}
		e.checkEvents(fmt.Sprintf("run %d", i), wantReasons...)
		cm, err := e.cs.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).Get(e.ctx, "fix."+prevNode, metav1.GetOptions{})
		if err != nil || cm.Data[v1alpha1.ActionRun] != "fake logs" {
			t.Errorf("output record of %s: %v %v", prevNode, cm, err)
		}
	}
	if diff := cmp.Diff([]string(nil), e.pods()); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
	st := e.nodeScript().Status
	if st.Stage != v1alpha1.StageComplete || st.Succeeded != 3 {
		t.Errorf("status %+v, want Complete, 3 succeeded", st)
	}
	if c := e.condition(v1alpha1.ConditionComplete); c.Status != metav1.ConditionTrue || c.Message != "3 nodes succeeded" {
		t.Errorf("Complete: %+v", c)
	}
	// Nothing left to do: no call but reading the NodeScript.
	e.reconcile()
	if a := e.calls[""]; len(a) != 0 {
		t.Errorf("a complete rollout made calls: %v", a)
	}
}

func TestReconcileCanaryFails(t *testing.T) {
	for _, c := range []struct {
		name     string
		policy   v1alpha1.FailurePolicy
		cordoned bool // by an administrator, before the run
		// after the failure
		wantReasons []string
		wantState   nodeState // its Cordoned, CordonedByUs, Rollback and Drain
		wantPods    func(*v1alpha1.NodeScript) []string
		// after the spec is fixed and ran
		wantUnschedulable bool
	}{
		{
			name:        "halt",
			wantReasons: []string{v1alpha1.ReasonFailed, v1alpha1.ReasonHalted},
			wantPods:    func(*v1alpha1.NodeScript) []string { return nil },
		},
		{
			name:        "rollback, cordon and drain",
			policy:      v1alpha1.FailurePolicy{Rollback: true, Cordon: true, Drain: true},
			wantReasons: []string{v1alpha1.ReasonCordoned, v1alpha1.ReasonDrained, v1alpha1.ReasonFailed, v1alpha1.ReasonHalted},
			wantState:   nodeState{Cordoned: true, CordonedByUs: true, Rollback: v1alpha1.PhaseRunning, Drain: v1alpha1.ReasonDrained},
			wantPods: func(ns *v1alpha1.NodeScript) []string {
				return []string{podName(ns, "n1", v1alpha1.ActionRollback, 1)}
			},
		},
		{
			name:              "cordoned before: left cordoned",
			policy:            v1alpha1.FailurePolicy{Cordon: true},
			cordoned:          true,
			wantReasons:       []string{v1alpha1.ReasonFailed, v1alpha1.ReasonHalted},
			wantState:         nodeState{Cordoned: true},
			wantPods:          func(*v1alpha1.NodeScript) []string { return nil },
			wantUnschedulable: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(func(s *v1alpha1.NodeScriptSpec) {
				s.OnFailure = c.policy
				if c.policy.Rollback {
					s.RollbackScript = "undo"
				}
			})
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", func(n *corev1.Node) { n.Spec.Unschedulable = c.cordoned }))
			e.reconcile()
			e.setPod(podName(ns, "n1", v1alpha1.ActionRun, 1), exited(3))
			e.reconcile()
			if c.policy.Drain {
				// The drain runs in the background, then requeues the NodeScript.
				key, _ := e.queue.Get()
				e.queue.Done(key)
			}
			s := e.state("n1")
			if s.Phase != v1alpha1.PhaseFailed || s.ExitCode == nil || *s.ExitCode != 3 {
				t.Errorf("state %+v, want Failed with exit code 3", s)
			}
			got := nodeState{Cordoned: s.Cordoned, CordonedByUs: s.CordonedByUs, Rollback: s.Rollback, Drain: s.Drain}
			if diff := cmp.Diff(c.wantState, got); diff != "" {
				t.Errorf("failure policy state (-want +got):\n%s", diff)
			}
			e.checkEvents("after the failure", c.wantReasons...)
			if diff := cmp.Diff(c.wantPods(ns), e.pods()); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
			if e.node("n1").Spec.Unschedulable != (c.policy.Cordon || c.cordoned) {
				t.Errorf("unschedulable %t", e.node("n1").Spec.Unschedulable)
			}
			if cond := e.condition(v1alpha1.ConditionHalted); cond.Status != metav1.ConditionTrue || cond.Reason != "CanaryFailed" || e.nodeScript().Status.Stage != v1alpha1.StageHalted {
				t.Errorf("Halted: %+v", cond)
			}
			if c.policy.Rollback {
				e.setPod(podName(ns, "n1", v1alpha1.ActionRollback, 1), exited(0))
				e.reconcile()
				s := e.state("n1")
				if s.Phase != v1alpha1.PhaseRolledBack || s.Rollback != v1alpha1.PhaseSucceeded || s.RollbackExitCode == nil || *s.RollbackExitCode != 0 {
					t.Errorf("after the rollback: %+v", s)
				}
				e.checkEvents("after the rollback", v1alpha1.ReasonRolledBack)
			}

			// A fixed spec runs on the node again; once it succeeded the
			// watcher's own cordon is undone, never another's.
			e.setSpec(func(s *v1alpha1.NodeScriptSpec) { s.Script = "true # fixed" })
			e.reconcile()
			e.setPod(podName(e.nodeScript(), "n1", v1alpha1.ActionRun, 1), exited(0))
			e.reconcile()
			if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.CordonedByUs {
				t.Errorf("after the fixed spec: %+v", s)
			}
			if got := e.node("n1").Spec.Unschedulable; got != c.wantUnschedulable {
				t.Errorf("after the fixed spec: unschedulable %t, want %t", got, c.wantUnschedulable)
			}
			wantReasons := []string{v1alpha1.ReasonComplete, v1alpha1.ReasonSucceeded}
			if c.policy.Cordon && !c.cordoned {
				wantReasons = append(wantReasons, v1alpha1.ReasonUncordoned)
			}
			e.checkEvents("after the fixed spec", wantReasons...)
		})
	}
}

func TestReconcileInfrastructureRetry(t *testing.T) {
	notReady := func(e *env) {
		e.updateNode("n1", func(n *corev1.Node) {
			ready(n).Status, ready(n).LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(e.clock.Now())
		})
		e.clock.Step(time.Minute + time.Second) // NotReadyGrace
	}
	healed := func(e *env) {
		e.updateNode("n1", func(n *corev1.Node) { ready(n).Status = corev1.ConditionTrue })
	}
	for _, c := range []struct {
		name   string
		fail   func(e *env, pod string, attempt int)
		heal   func(e *env)
		reason string
	}{
		{name: "image pull", fail: func(e *env, pod string, _ int) { e.setPod(pod, waiting("ErrImagePull")) }, reason: "ErrImagePull"},
		{name: "node not ready", fail: func(e *env, pod string, _ int) { e.setPod(pod, running); notReady(e) }, heal: healed, reason: "NodeNotReady"},
		{name: "node rebooted", fail: func(e *env, pod string, attempt int) {
			e.setPod(pod, exited(137))
			e.updateNode("n1", func(n *corev1.Node) { n.Status.NodeInfo.BootID = fmt.Sprintf("boot-%d", attempt+1) })
		}, reason: "NodeRebooted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Retry.Limit = ptr.To[int32](1) })
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
			e.reconcile()
			for attempt := 1; attempt <= 2; attempt++ {
				pod := podName(ns, "n1", v1alpha1.ActionRun, attempt)
				if s := e.state("n1"); s.Phase != v1alpha1.PhaseRunning || s.Pod != pod || s.Attempts != attempt {
					t.Fatalf("attempt %d: state %+v, want Running on %s", attempt, s, pod)
				}
				c.fail(e, pod, attempt)
				failedAt := e.clock.Now()
				after := e.reconcile()
				s := e.state("n1")
				if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != c.reason || s.Attempts != attempt || s.NextRetry == nil {
					t.Fatalf("attempt %d: state %+v, want an infrastructure failure %s", attempt, s, c.reason)
				}
				// The backoff: 10s, doubled per attempt, 10% jitter (NextRetry is
				// kept to the second).
				base := 10 * time.Second << (attempt - 1)
				if wait := s.NextRetry.Sub(failedAt); wait < base-time.Second || wait > base+base/10 {
					t.Errorf("attempt %d: retry after %s, want %s to %s", attempt, wait, base, base+base/10)
				}
				if after < time.Second || after > base+base/10 {
					t.Errorf("attempt %d: look again after %s", attempt, after)
				}
				want := []string{v1alpha1.ReasonInfrastructure}
				if attempt == 2 {
					want = append(want, v1alpha1.ReasonHalted)
				}
				e.checkEvents(fmt.Sprintf("attempt %d", attempt), want...)
				if p := e.pods(); len(p) != 0 {
					t.Errorf("attempt %d: pods left: %v", attempt, p)
				}
				if attempt == 2 {
					break
				}
				// Not before the backoff: no pod.
				e.reconcile()
				if p := e.pods(); len(p) != 0 {
					t.Errorf("retried before the backoff: %v", p)
				}
				if c.heal != nil {
					c.heal(e)
				}
				e.clock.Step(base + base/10 + time.Second)
				e.reconcile()
			}
			// The retry limit (1) is spent: the canary failed.
			if st := e.nodeScript().Status; st.Stage != v1alpha1.StageHalted || st.Failed != 1 {
				t.Errorf("after the retry limit: %+v", st)
			}
		})
	}
}

func TestReconcileLostRun(t *testing.T) {
	ns := script(nil)
	lost := nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhaseRunning, Attempts: 1, Since: t0, Pod: "n2-gone"}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2", withState(lost)))
	e.reconcile()
	s := e.state("n2")
	if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != "PodDisappeared" || s.NextRetry == nil {
		t.Errorf("lost run recorded as %+v", s)
	}
	if ev := e.recorded(); len(ev) != 1 || !strings.Contains(ev[0], v1alpha1.ReasonInfrastructure+" nodescript fix: run pod n2-gone disappeared") {
		t.Errorf("events %q", ev)
	}

	// A pod this watcher created and that disappeared before the cache
	// showed it is lost once a minute passed.
	e.clock.Step(time.Minute)
	e.reconcile()
	node, pod := e.runningNode("n1", "n2")
	if err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Delete(e.ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.c.w.expect(pod, e.clock.Now()) // created, not seen by the informer
	e.reconcile()
	if s, _ := e.c.w.state(e.ctx, "fix", e.node(node)); s.Phase != v1alpha1.PhaseRunning {
		t.Errorf("a pod just created counts as lost: %+v", s)
	}
	e.clock.Step(time.Minute + time.Second)
	e.reconcile()
	if s := e.state(node); s.Phase != v1alpha1.PhaseFailed || s.Reason != "PodDisappeared" {
		t.Errorf("a minute later: %+v", s)
	}
}

// A run pod the cache does not show a minute after its creation (a pod
// informer lagging under load) is not lost while the API server has it: no
// retry, no second run, no Event; it is lost once the API server has it
// no more.
func TestReconcileLostRunCacheLags(t *testing.T) {
	ns := script(nil)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	node, pod := e.runningNode("n1")
	e.clock.Step(time.Minute + time.Second)
	lagging := func() {
		e.t.Helper()
		e.sync()
		if err := e.podCache.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: pod}}); err != nil {
			t.Fatal(err)
		}
		e.cs.ClearActions()
		if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	lagging()
	if s, _ := e.c.w.state(e.ctx, "fix", e.node(node)); s.Phase != v1alpha1.PhaseRunning || s.Pod != pod {
		t.Errorf("a run whose pod the API server has is recorded %+v", s)
	}
	if p := e.pods(); !slices.Equal(p, []string{pod}) {
		t.Errorf("pods %v, want only %s", p, pod)
	}
	if ev := e.recorded(); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
	// Expected again for a minute: no second GET meanwhile.
	lagging()
	for _, a := range e.cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			t.Errorf("got the pod again within the minute: %v", a)
		}
	}
	// Gone from the API server too: lost.
	if err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Delete(e.ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute + time.Second)
	e.reconcile()
	if s := e.state(node); s.Phase != v1alpha1.PhaseFailed || s.Reason != "PodDisappeared" {
		t.Errorf("once the pod is gone: %+v", s)
	}
}

func TestReconcileAdoptsRunningPod(t *testing.T) {
	ns := script(nil)
	pod := runPod(t, ns, "n1", v1alpha1.ActionRun, 1)
	pod.Status = running
	// A watcher restarted while a run pod goes: the pod is the record,
	// nothing is written and nothing else started.
	pod.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	pod.Annotations[v1alpha1.AnnotationBootID] = "boot-1"
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), pod)
	e.reconcile()
	if len(e.calls[""]) != 0 {
		t.Errorf("clientset: %v, want no call", e.calls[""])
	}
	want := nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhaseRunning, Attempts: 1, Since: t0.Add(-time.Minute), Pod: pod.Name, BootID: "boot-1"}
	if diff := cmp.Diff(want, e.state("n1")); diff != "" {
		t.Errorf("state, as Status shows it (-want +got):\n%s", diff)
	}
	if s, _ := e.c.w.state(e.ctx, "fix", e.node("n1")); !cmp.Equal(want, s) {
		t.Errorf("the watcher's view: %+v, want %+v", s, want)
	}
	if st := e.nodeScript().Status; st.Running != 1 {
		t.Errorf("status counts %d running, want 1", st.Running)
	}
	// Adopted once.
	e.reconcile()
	if a := e.calls[""]; len(a) != 0 {
		t.Errorf("second reconcile: %v", a)
	}
}

func TestReconcileRemovesStartupTaint(t *testing.T) {
	taint := corev1.Taint{Key: "example.com/unconfigured", Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Taint{Key: "example.com/other", Value: "x", Effect: corev1.TaintEffectNoExecute}
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.StartupTaint = &taint })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{other, taint} }))
	e.reconcile()
	if got := e.node("n1").Spec.Taints; len(got) != 2 {
		t.Errorf("taints removed before the script succeeded: %v", got)
	}
	e.setPod(podName(ns, "n1", v1alpha1.ActionRun, 1), exited(0))
	e.reconcile()
	if diff := cmp.Diff([]corev1.Taint{other}, e.node("n1").Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	e.checkEvents("after the run", v1alpha1.ReasonSucceeded, v1alpha1.ReasonTaintRemoved, v1alpha1.ReasonComplete)
}

func TestReconcileVerify(t *testing.T) {
	for _, c := range []struct {
		name    string
		exit    int32
		want    func(nodeState) bool
		reasons []string
		stage   string
		pods    int // after the verify: the next node's run pod, or none
	}{
		{"pass", 0, func(s nodeState) bool { return s.Phase == v1alpha1.PhaseSucceeded && s.Verified }, []string{v1alpha1.ReasonVerified}, v1alpha1.StageRolling, 1},
		{"fail", 1, func(s nodeState) bool {
			return s.Phase == v1alpha1.PhaseFailed && s.Reason == "VerifyFailed" && *s.ExitCode == 1
		}, []string{v1alpha1.ReasonHalted, v1alpha1.ReasonVerifyFailed}, v1alpha1.StageHalted, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(func(s *v1alpha1.NodeScriptSpec) {
				s.VerifyScript = "check"
				s.Rollout.SoakTime = &metav1.Duration{Duration: 5 * time.Minute}
			})
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
			e.reconcile()
			canary, pod := e.runningNode("n1", "n2")
			e.setPod(pod, exited(0))
			if after := e.reconcile(); after != 2*time.Second {
				t.Errorf("soaking: look again after %s, want 2s", after)
			}
			if st := e.nodeScript().Status; st.Stage != v1alpha1.StageSoaking {
				t.Errorf("stage %s, want Soaking", st.Stage)
			}
			if p := e.pods(); len(p) != 0 {
				t.Errorf("pods while soaking: %v", p)
			}
			e.clock.Step(5 * time.Minute)
			e.reconcile()
			verify := podName(ns, canary, v1alpha1.ActionVerify, 1)
			if diff := cmp.Diff([]string{"create pods " + verify}, e.calls[""]); diff != "" {
				t.Errorf("after the soak time (-want +got):\n%s", diff)
			}
			e.reconcile() // the verify pod runs: not started twice
			if a := e.calls[""]; len(a) != 0 {
				t.Errorf("verify pod going: %v", a)
			}
			e.recorded()
			e.setPod(verify, exited(c.exit))
			e.reconcile()
			if s := e.state(canary); !c.want(s) {
				t.Errorf("canary state %+v", s)
			}
			e.checkEvents("after the verify", c.reasons...)
			if st := e.nodeScript().Status; st.Stage != c.stage || len(e.pods()) != c.pods {
				t.Errorf("status %+v, pods %v", st, e.pods())
			}
		})
	}
}

func TestReconcileInvalidSpec(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Script = "" })
	ns.Generation = 3
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if a := e.calls[""]; len(a) != 0 {
		t.Errorf("an invalid spec touched the cluster: %v", a)
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageHalted || st.ObservedGeneration != 3 {
		t.Errorf("status %+v", st)
	}
	if c := e.condition(v1alpha1.ConditionHalted); c.Status != metav1.ConditionTrue || c.Reason != "InvalidSpec" || !strings.Contains(c.Message, "spec.script") {
		t.Errorf("Halted: %+v", c)
	}
	if c := e.condition(v1alpha1.ConditionProgressing); c.Status != metav1.ConditionFalse || c.Reason != "InvalidSpec" {
		t.Errorf("Progressing: %+v", c)
	}
}

func TestReconcileDeleted(t *testing.T) {
	ns := script(nil)
	deleted := metav1.NewTime(t0)
	ns.DeletionTimestamp, ns.Finalizers = &deleted, []string{v1alpha1.Finalizer}
	state := nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhaseSucceeded}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(state)), testNode("n2"))
	e.reconcile()
	if diff := cmp.Diff([]string{"patch nodes n1"}, e.calls[""]); diff != "" {
		t.Errorf("clientset (-want +got):\n%s", diff)
	}
	if _, has := e.node("n1").Annotations[stateAnnotation("fix")]; has {
		t.Error("the state annotation is left")
	}
	if f := e.nodeScript().Finalizers; len(f) != 0 {
		t.Errorf("finalizers %v", f)
	}

	// Gone: nothing to do.
	if err := e.dyn.Tracker().Delete(v1alpha1.Resource, "", "fix"); err != nil {
		t.Fatal(err)
	}
	if after := e.reconcile(); after != 0 || len(e.calls[""]) != 0 || len(e.calls["dyn"]) != 0 {
		t.Errorf("a NodeScript gone: after %s, calls %v %v", after, e.calls[""], e.calls["dyn"])
	}
}

func TestReconcilePodCreateFails(t *testing.T) {
	ns := script(nil)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	e.sync()
	if _, err := e.c.reconcile(e.ctx, "fix"); err == nil || !strings.Contains(err.Error(), "quota exceeded") {
		t.Errorf("reconcile: %v, want the create's error", err)
	}
	if c := e.condition(v1alpha1.ConditionProgressing); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPodCreate || !strings.Contains(c.Message, "quota exceeded") {
		t.Errorf("Progressing: %+v", c)
	}
	if s := e.state("n1"); s.Phase != v1alpha1.PhasePending {
		t.Errorf("state %+v, want Pending", s)
	}
}

func TestProcessNext(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.SoakTime = &metav1.Duration{Duration: time.Minute} })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	e.reconcile()
	_, pod := e.runningNode("n1", "n2")
	e.setPod(pod, exited(0))
	e.sync()
	e.queue.Add("fix")
	if !e.c.processNext(e.ctx) {
		t.Fatal("processNext: the queue is shut down")
	}
	if n := e.queue.NumRequeues("fix"); n != 0 {
		t.Errorf("requeues after a success: %d", n)
	}
	// Soaking: requeued 2 seconds later.
	deadline := time.Now().Add(time.Second)
	for e.queue.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not requeued")
		}
		e.clock.Step(time.Second)
		time.Sleep(time.Millisecond)
	}
	if e.clock.Since(t0) < 2*time.Second {
		t.Errorf("requeued after %s, want 2s", e.clock.Since(t0))
	}

	// A failed reconcile is retried with backoff.
	e.clock.Step(time.Minute)
	e.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	e.sync()
	if !e.c.processNext(e.ctx) {
		t.Fatal("processNext: the queue is shut down")
	}
	if n := e.queue.NumRequeues("fix"); n != 1 {
		t.Errorf("requeues after a failure: %d, want 1", n)
	}
	e.queue.ShutDown()
	if e.c.processNext(e.ctx) {
		t.Error("processNext after shutdown")
	}
}

// A paused NodeScript and one outside its maintenance window start
// nothing, say why in the Progressing condition (and when the window
// opens, looking again then); resumed or in the window, the canary starts.
func TestReconcileHolds(t *testing.T) {
	for _, c := range []struct {
		name       string
		hold       func(*v1alpha1.NodeScriptSpec)
		release    func(*v1alpha1.NodeScriptSpec)
		reason     string
		nextWindow bool
	}{
		{"paused", func(s *v1alpha1.NodeScriptSpec) { s.Paused = true }, func(s *v1alpha1.NodeScriptSpec) { s.Paused = false }, v1alpha1.HoldPaused, false},
		// t0 is 12:00 UTC.
		{"window", func(s *v1alpha1.NodeScriptSpec) { s.Window = &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"} },
			func(s *v1alpha1.NodeScriptSpec) { s.Window = &v1alpha1.MaintenanceWindow{Start: "11:00", End: "13:00"} }, v1alpha1.HoldOutsideWindow, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(c.hold)
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
			after := e.reconcile()
			if pods := e.pods(); len(pods) != 0 {
				t.Errorf("held: pods %v created", pods)
			}
			if got := e.condition(v1alpha1.ConditionProgressing); got.Status != metav1.ConditionFalse || got.Reason != c.reason {
				t.Errorf("held: Progressing %+v, want False, %s", got, c.reason)
			}
			st := e.nodeScript().Status
			if c.nextWindow {
				want := time.Date(t0.Year(), t0.Month(), t0.Day(), 22, 0, 0, 0, time.UTC)
				if st.NextWindow == nil || !st.NextWindow.Time.Equal(want) || after != want.Sub(t0) {
					t.Errorf("next window %v, look again after %s; want %s, after %s", st.NextWindow, after, want, want.Sub(t0))
				}
			} else if st.NextWindow != nil {
				t.Errorf("next window %v, want none", st.NextWindow)
			}
			e.setSpec(c.release)
			e.reconcile()
			if pods := e.pods(); len(pods) != 1 {
				t.Errorf("released: pods %v, want the canary's", pods)
			}
			if st := e.nodeScript().Status; st.NextWindow != nil {
				t.Errorf("released: next window %v", st.NextWindow)
			}
		})
	}
}

// A plain run costs three writes per node (issue 11, target 3): the pod's
// creation, one patch of the node's status with the outcome (annotation and
// condition together), the pod's deletion; and the successes of a
// reconcile are one Event on the NodeScript, not one per node.
func TestReconcileWritesPerRun(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("100%"))
	})
	names := []string{"n1", "n2", "n3", "n4"}
	var objs []runtime.Object
	for _, n := range names {
		objs = append(objs, testNode(n))
	}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, objs...)
	var writes []string
	count := func() {
		for _, c := range append(e.calls[""], e.calls["conditions"]...) {
			if !strings.HasPrefix(c, "get ") && !strings.HasPrefix(c, "list ") {
				writes = append(writes, c)
			}
		}
	}
	e.reconcile()
	count()
	for _, n := range names {
		e.setPod(podName(ns, n, v1alpha1.ActionRun, 1), exited(0))
	}
	e.clock.Step(time.Minute)
	e.reconcile()
	count()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete || st.Succeeded != int32(len(names)) {
		t.Fatalf("status %+v, want Complete with every node succeeded", st)
	}
	if len(writes) != 3*len(names) {
		t.Errorf("%d writes for %d nodes, want 3 per node: %v", len(writes), len(names), writes)
	}
	for _, n := range names {
		if c := e.nodeCondition(n); c == nil || c.Reason != v1alpha1.ConditionApplied {
			t.Errorf("node %s: condition %+v, want Applied", n, c)
		}
	}
	ev := e.recorded()
	var succeeded []string
	for _, x := range ev {
		if strings.Contains(x, v1alpha1.ReasonSucceeded) {
			succeeded = append(succeeded, x)
		}
	}
	if len(succeeded) != 1 || !strings.Contains(succeeded[0], "succeeded on 4 node(s): n1, n2, n3, n4") {
		t.Errorf("success Events %q, want one naming the 4 nodes", succeeded)
	}
}

// A finished pod recorded and deleted is not deleted again by a reconcile
// made while the pod cache still shows it (the informer lags).
func TestReconcileRecordedPodCacheLags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		exit  int32
		phase string
	}{
		{"succeeded", 0, v1alpha1.PhaseSucceeded},
		// A failed run reads the node's boot ID from the API once (a reboot
		// may explain it), and not again for the cache's stale copy.
		{"failed", 1, v1alpha1.PhaseFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := script(nil)
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
			e.reconcile()
			node, pod := e.runningNode("n1")
			// The API server gives every pod a UID.
			p, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.UID = "uid-1"
			if _, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			e.setPod(pod, exited(tc.exit))
			e.sync()
			stale, _, _ := e.podCache.GetByKey(v1alpha1.DefaultNamespace + "/" + pod)
			if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
				t.Fatal(err)
			}
			if s := e.state(node); s.Phase != tc.phase {
				t.Fatalf("state %+v, want %s", s, tc.phase)
			}
			count := func(verb, resource string) (n int) {
				for _, a := range e.cs.Actions() {
					if a.GetVerb() == verb && a.GetResource().Resource == resource {
						n++
					}
				}
				return n
			}
			if n := count("delete", "pods"); n != 1 {
				t.Fatalf("%d pod deletes, want 1", n)
			}
			// The cache still shows the pod: nothing is recorded or deleted
			// again, and the node is not read again.
			e.cs.ClearActions()
			if err := e.podCache.Update(stale); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
				t.Fatal(err)
			}
			for _, a := range e.cs.Actions() {
				if a.GetVerb() != "get" && a.GetVerb() != "list" {
					t.Errorf("a reconcile on the lagging cache wrote %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
			if n := count("get", "nodes"); n != 0 {
				t.Errorf("a reconcile on the lagging cache read the node %d times, want 0", n)
			}
			// After a minute a pod still in the cache is recorded again (a
			// lost delete event must not hide it for good).
			e.clock.Step(time.Minute + time.Second)
			e.cs.ClearActions()
			if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
				t.Fatal(err)
			}
			if n := count("delete", "pods"); n != 1 {
				t.Errorf("after a minute: %d pod deletes, want 1", n)
			}
		})
	}
}

// TestStateFollowsResourceVersion: the decoded state is reused while the
// cached node keeps its resourceVersion, and read again when it changes;
// what this process wrote and the cache does not show yet comes first.
func TestStateFollowsResourceVersion(t *testing.T) {
	e := newEnv(t, []*v1alpha1.NodeScript{script(nil)}, testNode("n1"))
	w := e.c.w
	node := func(rv string, s *nodeState) *corev1.Node {
		return testNode("n1", func(n *corev1.Node) {
			n.ResourceVersion = rv
			if s != nil {
				n.Annotations = map[string]string{stateAnnotation("fix"): s.Encode(), "other": "x"}
			}
		})
	}
	succeeded := nodeState{Hash: "h1", Phase: v1alpha1.PhaseSucceeded, Since: t0, Attempts: 1}
	failed := nodeState{Hash: "h2", Phase: v1alpha1.PhaseFailed, Since: t0, Attempts: 1, ExitCode: ptr.To(3)}
	for i, step := range []struct {
		n    *corev1.Node
		want nodeState
	}{
		{node("10", &succeeded), succeeded},
		{node("10", &succeeded), succeeded}, // same resourceVersion: reused
		{node("11", &failed), failed},
		{node("12", nil), nodeState{Phase: v1alpha1.PhasePending}},
		{node("12", nil), nodeState{Phase: v1alpha1.PhasePending}},
		{node("13", &succeeded), succeeded},
	} {
		got, ok := w.state(e.ctx, "fix", step.n)
		if !ok || !cmp.Equal(got, step.want) {
			t.Errorf("step %d (resourceVersion %s): state %+v, %v; want %+v", i, step.n.ResourceVersion, got, ok, step.want)
		}
	}
	// Written by this process, not yet in the cache: the written state,
	// though the node's resourceVersion is the one last decoded.
	w.note("fix", "n1", failed)
	if got, _ := w.state(e.ctx, "fix", node("13", &succeeded)); !cmp.Equal(got, failed) {
		t.Errorf("after note: state %+v, want %+v", got, failed)
	}
	// The cache shows the write: the annotation again.
	if got, _ := w.state(e.ctx, "fix", node("14", &failed)); !cmp.Equal(got, failed) {
		t.Errorf("cache caught up: state %+v, want %+v", got, failed)
	}
}
