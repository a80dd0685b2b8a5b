package watcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The tests of reconcile's phases, one at a time, on one node n1.

// phase runs one phase of NodeScript ns over the synced caches and
// returns the calls it made; after, when set, changes the cluster behind
// the caches' back first.
func (e *env) phase(after func(*env), run func(nodeSet) error) ([]string, error) {
	e.t.Helper()
	e.sync()
	cached, err := e.c.listNodes("fix")
	if err != nil {
		e.t.Fatal(err)
	}
	if after != nil {
		after(e)
		e.cs.ClearActions()
	}
	err = run(cached)
	return describe(e.cs.Actions()), err
}

// phaseCase is a case of a phase's test: the cluster before (n1's state
// and changes, pods) and what the phase leaves (n1's state, calls, Events).
type phaseCase struct {
	name  string
	spec  func(*v1alpha1.NodeScriptSpec)
	state *nodeState // n1's; nil: none; no Hash: the spec's
	node  func(*corev1.Node)
	pods  func(t *testing.T, ns *v1alpha1.NodeScript) []*corev1.Pod
	// going are the actions with a pod going on n1 (phase 1's output).
	going []string
	after func(*env)

	want        *nodeState // n1's; nil: unchanged; no Hash: the spec's
	wantCalls   []string
	wantReasons []string
	wantErr     string
}

// uncache drops run pod name from the pod cache, as an informer that has
// not seen it yet would lack it.
func uncache(name string) func(*env) {
	return func(e *env) {
		if err := e.podCache.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultNamespace, Name: name}}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// setUp is an env holding c's cluster, and its NodeScript.
func (c phaseCase) setUp(t *testing.T) (*env, *v1alpha1.NodeScript) {
	ns := script(c.spec)
	mutate := []func(*corev1.Node){}
	if c.state != nil {
		mutate = append(mutate, withState(hashed(*c.state, ns)))
	}
	if c.node != nil {
		mutate = append(mutate, c.node)
	}
	objs := []runtime.Object{testNode("n1", mutate...)}
	if c.pods != nil {
		for _, p := range c.pods(t, ns) {
			objs = append(objs, p)
		}
	}
	return newEnv(t, []*v1alpha1.NodeScript{ns}, objs...), ns
}

// check fails the test unless the phase left what c wants.
func (c phaseCase) check(t *testing.T, e *env, ns *v1alpha1.NodeScript, calls []string, err error) {
	t.Helper()
	if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
		t.Errorf("error %v, want %q", err, c.wantErr)
	}
	if diff := cmp.Diff(c.wantCalls, calls, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	want := nodeState{Phase: v1alpha1.PhasePending}
	switch {
	case c.want != nil:
		want = hashed(*c.want, ns)
	case c.state != nil:
		want = hashed(*c.state, ns)
	}
	if diff := cmp.Diff(want, e.state("n1"), cmpopts.IgnoreFields(nodeState{}, "NextRetry", "Message")); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
	e.checkEvents("events", c.wantReasons...)
}

// hashed is s with ns's spec hash when it has none.
func hashed(s nodeState, ns *v1alpha1.NodeScript) nodeState {
	if s.Hash == "" {
		s.Hash = v1alpha1.SpecHash(&ns.Spec)
	}
	return s
}

// state is a state of n1 for NodeScript ns (of its spec hash once hashed):
// the run of attempt 1 since t0, changed by mutate.
func state(ns *v1alpha1.NodeScript, phase string, mutate func(*nodeState)) *nodeState {
	s := &nodeState{Phase: phase, Attempts: 1, Since: t0, Pod: podName(ns, "n1", v1alpha1.ActionRun, 1), BootID: "boot-1"}
	if mutate != nil {
		mutate(s)
	}
	return s
}

// pod returns the pods option of a phaseCase: the pod of action attempt 1
// on n1 with status st, changed by mutate.
func pod(action string, st corev1.PodStatus, mutate func(*corev1.Pod)) func(*testing.T, *v1alpha1.NodeScript) []*corev1.Pod {
	return func(t *testing.T, ns *v1alpha1.NodeScript) []*corev1.Pod {
		p := runPod(t, ns, "n1", action, 1)
		p.Status = st
		if mutate != nil {
			mutate(p)
		}
		return []*corev1.Pod{p}
	}
}

func TestRecordFinished(t *testing.T) {
	ns := script(nil) // the NodeScript of every case (no spec changes)
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	code := func(c int) func(*nodeState) { return func(s *nodeState) { s.ExitCode = ptr.To(c) } }
	// finished is the state finish records for the run pod.
	finished := func(phase string, mutate func(*nodeState)) *nodeState {
		return state(ns, phase, func(s *nodeState) {
			s.BootID = ""
			mutate(s)
		})
	}
	infra := func(reason string) *nodeState {
		return finished(v1alpha1.PhaseFailed, func(s *nodeState) { s.Infrastructure, s.Reason, s.ExitCode = true, reason, nil })
	}
	deleted := func(name string) []string { return []string{"patch nodes/status n1", "delete pods " + name} }
	// A failure on a node whose cached boot ID is the run's is checked
	// against the API's.
	failed := append([]string{"get nodes n1"}, deleted(run)...)
	for _, c := range []struct {
		phaseCase
		busy bool
	}{
		{phaseCase: phaseCase{
			name: "run succeeded", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, exited(0), nil),
			// A success keeps the boot the run started in (spec.reapply.onReboot).
			want: state(ns, v1alpha1.PhaseSucceeded, code(0)), wantCalls: deleted(run), wantReasons: []string{v1alpha1.ReasonSucceeded},
		}},
		{phaseCase: phaseCase{
			name: "run failed", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, exited(2), nil),
			want: finished(v1alpha1.PhaseFailed, code(2)), wantCalls: failed, wantReasons: []string{v1alpha1.ReasonFailed},
		}},
		{phaseCase: phaseCase{
			name: "run timed out", state: state(ns, v1alpha1.PhaseRunning, nil),
			pods: pod(v1alpha1.ActionRun, corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded"}, nil),
			want: finished(v1alpha1.PhaseFailed, func(s *nodeState) { s.Reason, s.ExitCode = "Timeout", ptr.To(-1) }), wantCalls: failed, wantReasons: []string{v1alpha1.ReasonFailed},
		}},
		{phaseCase: phaseCase{
			name: "image not pulled", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, waiting("ErrImagePull"), nil),
			want: infra("ErrImagePull"), wantCalls: deleted(run), wantReasons: []string{v1alpha1.ReasonInfrastructure},
		}},
		{phaseCase: phaseCase{
			name: "node not ready past the grace", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, running, nil),
			node: func(n *corev1.Node) {
				ready(n).Status, ready(n).LastTransitionTime = corev1.ConditionUnknown, metav1.NewTime(t0.Add(-2*time.Minute))
			},
			want: infra("NodeNotReady"), wantCalls: deleted(run), wantReasons: []string{v1alpha1.ReasonInfrastructure},
		}},
		{phaseCase: phaseCase{
			name: "node rebooted, the cache not yet showing it", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, exited(137), nil),
			after: func(e *env) { e.updateNode("n1", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" }) },
			want:  infra("NodeRebooted"), wantCalls: failed, wantReasons: []string{v1alpha1.ReasonInfrastructure},
		}},
		{phaseCase: phaseCase{
			name: "failed, node not rebooted", state: state(ns, v1alpha1.PhaseRunning, nil), pods: pod(v1alpha1.ActionRun, exited(137), nil),
			want: finished(v1alpha1.PhaseFailed, code(137)), wantCalls: failed, wantReasons: []string{v1alpha1.ReasonFailed},
		}},
		{phaseCase: phaseCase{
			name: "running pod adopted", pods: pod(v1alpha1.ActionRun, running, nil),
			want: finished(v1alpha1.PhaseRunning, func(*nodeState) {}), // the pod is the record: nothing written
		}, busy: true},
		{phaseCase: phaseCase{
			name: "terminating pod", state: state(ns, v1alpha1.PhaseRunning, nil),
			pods: pod(v1alpha1.ActionRun, running, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }),
		}, busy: true},
		{phaseCase: phaseCase{
			// Recorded and deleted by this process, its node NotReady: the
			// kubelet cannot confirm, so the pod holds its concurrency slot.
			name: "terminating pod this process recorded", state: state(ns, v1alpha1.PhaseFailed, nil),
			pods:  pod(v1alpha1.ActionRun, running, func(p *corev1.Pod) { p.UID, p.DeletionTimestamp = "uid-1", ptr.To(metav1.NewTime(t0)) }),
			after: func(e *env) { e.c.w.recorded("uid-1", t0) },
			want:  state(ns, v1alpha1.PhaseFailed, nil),
		}, busy: true},
		{phaseCase: phaseCase{
			name: "recorded before: deleted only", state: state(ns, v1alpha1.PhaseSucceeded, code(0)), pods: pod(v1alpha1.ActionRun, exited(0), nil),
			wantCalls: []string{"delete pods " + run},
		}},
		{phaseCase: phaseCase{
			name: "verify passed", state: state(ns, v1alpha1.PhaseSucceeded, code(0)), pods: pod(v1alpha1.ActionVerify, exited(0), nil),
			want:      state(ns, v1alpha1.PhaseSucceeded, func(s *nodeState) { s.ExitCode, s.Verified = ptr.To(0), true }),
			wantCalls: deleted(podName(ns, "n1", v1alpha1.ActionVerify, 1)), wantReasons: []string{v1alpha1.ReasonVerified},
		}},
		{phaseCase: phaseCase{
			name: "verify failed", state: state(ns, v1alpha1.PhaseSucceeded, code(0)), pods: pod(v1alpha1.ActionVerify, exited(1), nil),
			want:      state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.ExitCode, s.Reason = ptr.To(1), "VerifyFailed" }),
			wantCalls: deleted(podName(ns, "n1", v1alpha1.ActionVerify, 1)), wantReasons: []string{v1alpha1.ReasonVerifyFailed},
		}},
		{phaseCase: phaseCase{
			name: "rollback succeeded", state: state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseRunning }), pods: pod(v1alpha1.ActionRollback, exited(0), nil),
			want:      state(ns, v1alpha1.PhaseRolledBack, func(s *nodeState) { s.Rollback, s.RollbackExitCode = v1alpha1.PhaseSucceeded, ptr.To(0) }),
			wantCalls: deleted(podName(ns, "n1", v1alpha1.ActionRollback, 1)), wantReasons: []string{v1alpha1.ReasonRolledBack},
		}},
		{phaseCase: phaseCase{
			name: "rollback failed", state: state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseRunning }), pods: pod(v1alpha1.ActionRollback, exited(1), nil),
			want:      state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Rollback, s.RollbackExitCode = v1alpha1.PhaseFailed, ptr.To(1) }),
			wantCalls: deleted(podName(ns, "n1", v1alpha1.ActionRollback, 1)), wantReasons: []string{v1alpha1.ReasonRollbackFailed},
		}},
		{phaseCase: phaseCase{
			name: "node gone", pods: pod(v1alpha1.ActionRun, exited(0), func(p *corev1.Pod) { p.Spec.NodeName = "n9" }),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ns := c.setUp(t)
			var going runPods
			calls, err := e.phase(c.after, func(cached nodeSet) (err error) {
				going, err = e.c.recordFinished(e.ctx, ns, cached, e.clock.Now())
				return err
			})
			c.check(t, e, ns, calls, err)
			if going.busy["n1"] != c.busy {
				t.Errorf("n1 busy: %t, want %t", going.busy["n1"], c.busy)
			}
		})
	}
}

func TestNodePolicies(t *testing.T) {
	ns := script(nil)
	failed := state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.ExitCode = ptr.To(1) })
	with := func(s *nodeState, mutate func(*nodeState)) *nodeState {
		cp := *s
		mutate(&cp)
		return &cp
	}
	policy := func(p v1alpha1.FailurePolicy) func(*v1alpha1.NodeScriptSpec) {
		return func(s *v1alpha1.NodeScriptSpec) { s.OnFailure, s.RollbackScript = p, "undo" }
	}
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	taint := &corev1.Taint{Key: "example.com/unconfigured", Effect: corev1.TaintEffectNoSchedule}
	tainted := func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{*taint} }
	rollback := podName(script(policy(v1alpha1.FailurePolicy{Rollback: true})), "n1", v1alpha1.ActionRollback, 1)
	retry := t0.Add(30 * time.Second)
	for _, c := range []struct {
		phaseCase
		wantPhase   string // of n1 for Decide
		wantRetryAt time.Time
	}{
		{phaseCase: phaseCase{
			name: "lost run", state: state(ns, v1alpha1.PhaseRunning, nil),
			want:      state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Infrastructure, s.Reason = true, "PodDisappeared" }),
			wantCalls: []string{"get pods " + podName(ns, "n1", v1alpha1.ActionRun, 1), "patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonInfrastructure},
		}, wantPhase: v1alpha1.PhaseRunning},
		{phaseCase: phaseCase{
			name: "run pod in the cache since phase 1's snapshot", state: state(ns, v1alpha1.PhaseRunning, nil),
			pods: func(t *testing.T, ns *v1alpha1.NodeScript) []*corev1.Pod {
				return []*corev1.Pod{runPod(t, ns, "n1", v1alpha1.ActionRun, 1)}
			},
		}, wantPhase: v1alpha1.PhaseRunning},
		{phaseCase: phaseCase{
			name: "run pod in the API server, not yet in the cache", state: state(ns, v1alpha1.PhaseRunning, nil),
			pods: func(t *testing.T, ns *v1alpha1.NodeScript) []*corev1.Pod {
				return []*corev1.Pod{runPod(t, ns, "n1", v1alpha1.ActionRun, 1)}
			},
			after:     uncache(podName(ns, "n1", v1alpha1.ActionRun, 1)),
			wantCalls: []string{"get pods " + podName(ns, "n1", v1alpha1.ActionRun, 1)},
		}, wantPhase: v1alpha1.PhaseRunning},
		{phaseCase: phaseCase{
			name:  "infrastructure failure waiting for its retry",
			state: state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Infrastructure, s.NextRetry = true, &retry }),
		}, wantPhase: v1alpha1.PhaseFailed, wantRetryAt: retry},
		{phaseCase: phaseCase{
			name: "failure policy: cordon", spec: policy(v1alpha1.FailurePolicy{Cordon: true}), state: failed,
			want:      with(failed, func(s *nodeState) { s.Cordoned, s.CordonedByUs = true, true }),
			wantCalls: []string{"patch nodes n1", "patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonCordoned},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "failure policy: cordoned by someone else", spec: policy(v1alpha1.FailurePolicy{Cordon: true}), state: failed, node: cordoned,
			want: with(failed, func(s *nodeState) { s.Cordoned = true }), wantCalls: []string{"patch nodes/status n1"},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "failure policy: rollback", spec: policy(v1alpha1.FailurePolicy{Rollback: true}), state: failed,
			want:      with(failed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseRunning }),
			wantCalls: []string{"create pods " + rollback, "patch nodes/status n1"},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "failure policy: rollback pod going", spec: policy(v1alpha1.FailurePolicy{Rollback: true}), state: failed,
			going: []string{v1alpha1.ActionRollback},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "failure policy: rollback pod lost", spec: policy(v1alpha1.FailurePolicy{Rollback: true}),
			state:     with(failed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseRunning }),
			want:      with(failed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseFailed }),
			wantCalls: []string{"get pods " + rollback, "patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonRollbackFailed},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "failure policy: rollback pod in the API server, not yet in the cache", spec: policy(v1alpha1.FailurePolicy{Rollback: true}),
			state: with(failed, func(s *nodeState) { s.Rollback = v1alpha1.PhaseRunning }),
			pods: func(t *testing.T, ns *v1alpha1.NodeScript) []*corev1.Pod {
				return []*corev1.Pod{runPod(t, ns, "n1", v1alpha1.ActionRollback, 1)}
			},
			after:     uncache(rollback),
			wantCalls: []string{"get pods " + rollback},
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "not selected: no policy", spec: policy(v1alpha1.FailurePolicy{Cordon: true}), state: failed,
			node: func(n *corev1.Node) { n.Labels["pool"] = "b" },
		}, wantPhase: v1alpha1.PhaseFailed},
		{phaseCase: phaseCase{
			name: "succeeded: startup taint removed", spec: func(s *v1alpha1.NodeScriptSpec) { s.StartupTaint = taint },
			state: state(ns, v1alpha1.PhaseSucceeded, nil), node: tainted,
			wantCalls: []string{"patch nodes n1"}, wantReasons: []string{v1alpha1.ReasonTaintRemoved},
		}, wantPhase: v1alpha1.PhaseSucceeded},
		{phaseCase: phaseCase{
			name: "succeeded: the taint's removal fails when the node changed", spec: func(s *v1alpha1.NodeScriptSpec) { s.StartupTaint = taint },
			state: state(ns, v1alpha1.PhaseSucceeded, nil), node: tainted,
			after:     func(e *env) { e.updateNode("n1", func(n *corev1.Node) { n.ResourceVersion = "2" }) },
			wantCalls: []string{"patch nodes n1"}, wantErr: "removing taint example.com/unconfigured: testing value /metadata/resourceVersion failed",
		}, wantPhase: v1alpha1.PhaseSucceeded},
		{phaseCase: phaseCase{
			name: "succeeded: our cordon undone", state: state(ns, v1alpha1.PhaseSucceeded, func(s *nodeState) { s.Cordoned, s.CordonedByUs = true, true }), node: cordoned,
			want:      state(ns, v1alpha1.PhaseSucceeded, nil),
			wantCalls: []string{"patch nodes n1", "patch nodes/status n1"}, wantReasons: []string{v1alpha1.ReasonUncordoned},
		}, wantPhase: v1alpha1.PhaseSucceeded},
		{phaseCase: phaseCase{
			name: "run of an older spec going", state: state(ns, v1alpha1.PhaseSucceeded, func(s *nodeState) { s.Hash = "older" }),
			going: []string{v1alpha1.ActionRun},
		}, wantPhase: v1alpha1.PhaseRunning},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ns := c.setUp(t)
			var (
				nodes   []rolloutNode
				retryAt time.Time
			)
			calls, err := e.phase(c.after, func(cached nodeSet) (err error) {
				nodes, retryAt, err = e.c.nodePolicies(e.ctx, ns, v1alpha1.SpecHash(&ns.Spec), cached, c.runPods(), t0)
				return err
			})
			c.check(t, e, ns, calls, err)
			if len(nodes) != 1 || nodes[0].State.Phase != c.wantPhase {
				t.Errorf("nodes for Decide: %+v, want n1 %s", nodes, c.wantPhase)
			}
			if !retryAt.Equal(c.wantRetryAt) {
				t.Errorf("retry at %s, want %s", retryAt, c.wantRetryAt)
			}
		})
	}
}

func TestStartRuns(t *testing.T) {
	ns := script(nil)
	withVerify := func(s *v1alpha1.NodeScriptSpec) { s.VerifyScript = "true" }
	hash := v1alpha1.SpecHash(&ns.Spec)
	run := func(attempt int) string { return podName(ns, "n1", v1alpha1.ActionRun, attempt) }
	infra := state(ns, v1alpha1.PhaseFailed, func(s *nodeState) { s.Attempts, s.Infrastructure, s.CordonedByUs, s.Cordoned = 2, true, true, true })
	succeeded := state(ns, v1alpha1.PhaseSucceeded, nil)
	for _, c := range []struct {
		phaseCase
		start, verify []string
	}{
		{phaseCase: phaseCase{
			name: "first run", want: state(ns, v1alpha1.PhaseRunning, nil), wantCalls: []string{"create pods " + run(1)},
		}, start: []string{"n1"}},
		{phaseCase: phaseCase{
			name: "retry", state: infra,
			want:      &nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Attempts: 3, Since: t0, Pod: run(3), BootID: "boot-1", CordonedByUs: true, Cordoned: true},
			wantCalls: []string{"create pods " + run(3)},
		}, start: []string{"n1"}},
		{phaseCase: phaseCase{
			name: "run pod created before, not in the cache yet",
			after: func(e *env) {
				if _, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Create(e.ctx, runPod(t, ns, "n1", v1alpha1.ActionRun, 1), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			// The pod found is the record: created without a boot ID here.
			want: state(ns, v1alpha1.PhaseRunning, func(s *nodeState) { s.BootID = "" }), wantCalls: []string{"create pods " + run(1)},
		}, start: []string{"n1"}},
		{phaseCase: phaseCase{
			name: "create refused",
			after: func(e *env) {
				e.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("quota exceeded")
				})
			},
			wantCalls: []string{"create pods " + run(1)}, wantErr: "node n1: creating run pod: quota exceeded",
		}, start: []string{"n1"}},
		{phaseCase: phaseCase{
			name: "verify", spec: withVerify, state: succeeded, wantCalls: []string{"create pods " + podName(script(withVerify), "n1", v1alpha1.ActionVerify, 1)},
		}, verify: []string{"n1"}},
		{phaseCase: phaseCase{
			name: "verify pod going", state: succeeded, going: []string{v1alpha1.ActionVerify},
		}, verify: []string{"n1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ns := c.setUp(t)
			nodes := []rolloutNode{{Name: "n1", State: e.state("n1")}}
			calls, err := e.phase(c.after, func(cached nodeSet) error {
				d := decision{Hash: hash, Start: c.start, Verify: c.verify}
				return e.c.startRuns(e.ctx, ns, d, cached, nodes, c.runPods(), t0)
			})
			c.check(t, e, ns, calls, err)
		})
	}
}

// runPods is c.going as phase 1 returns it.
func (c phaseCase) runPods() runPods {
	going := runPods{busy: map[string]bool{}, actions: map[string]bool{}}
	for _, action := range c.going {
		going.actions["n1/"+action] = true
		going.busy["n1"] = going.busy["n1"] || action == v1alpha1.ActionRun
	}
	return going
}

func TestStatus(t *testing.T) {
	counts := phaseCounts{Nodes: 10, Pending: 2, Running: 1, Succeeded: 5, Failed: 1, RolledBack: 1}
	for _, c := range []struct {
		name     string
		d        decision
		startErr error
		// the conditions Halted, Progressing and Complete, as "True Reason: message"
		want   [3]string
		events []string
	}{
		{
			name: "rolling", d: decision{Stage: v1alpha1.StageRolling, Counts: counts},
			want: [3]string{"False Rolling: ", "True Rolling: 5 of 10 nodes succeeded, 1 running", "False Rolling: "},
		},
		{
			name: "awaiting promotion", d: decision{Stage: v1alpha1.StageAwaitingPromotion, Counts: phaseCounts{Nodes: 10, Succeeded: 1, Pending: 9}},
			want: [3]string{"False AwaitingPromotion: ", "False AwaitingPromotion: 1 of 10 nodes succeeded, 0 running; promote with: nodeexec promote fix --to all", "False AwaitingPromotion: "},
		},
		{
			name: "canary failed", d: decision{Stage: v1alpha1.StageHalted, HaltReason: "canary n1 failed", Counts: counts},
			want:   [3]string{"True CanaryFailed: canary n1 failed", "False CanaryFailed: halted: canary n1 failed", "False CanaryFailed: halted"},
			events: []string{v1alpha1.ReasonHalted},
		},
		{
			name: "error budget exceeded", d: decision{Stage: v1alpha1.StageHalted, HaltReason: "3 nodes failed, more than the error budget of 2", Counts: counts},
			want: [3]string{"True ErrorBudgetExceeded: 3 nodes failed, more than the error budget of 2",
				"False ErrorBudgetExceeded: halted: 3 nodes failed, more than the error budget of 2", "False ErrorBudgetExceeded: halted"},
			events: []string{v1alpha1.ReasonHalted},
		},
		{
			name: "complete within the error budget", d: decision{Stage: v1alpha1.StageComplete, Counts: phaseCounts{Nodes: 10, Succeeded: 8, Failed: 1, RolledBack: 1}},
			want: [3]string{"False Complete: ", "False Complete: every selected node ran the script",
				"True Complete: 8 nodes succeeded, 2 failed (within the error budget)"},
			events: []string{v1alpha1.ReasonComplete},
		},
		{
			name: "pods not created", d: decision{Stage: v1alpha1.StageRolling, Counts: counts}, startErr: errors.New("node n3: creating run pod: quota exceeded"),
			want: [3]string{"False Rolling: ", "False PodCreateFailed: node n3: creating run pod: quota exceeded", "False Rolling: "},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(nil)
			ns.Generation = 2
			e := newEnv(t, []*v1alpha1.NodeScript{ns})
			if err := e.c.status(e.ctx, ns, c.d, "h1", c.startErr, t0); err != nil {
				t.Fatal(err)
			}
			st := e.nodeScript().Status
			var got [3]string
			for i, typ := range []string{v1alpha1.ConditionHalted, v1alpha1.ConditionProgressing, v1alpha1.ConditionComplete} {
				cond := e.condition(typ)
				got[i] = string(cond.Status) + " " + cond.Reason + ": " + cond.Message
				if cond.ObservedGeneration != 2 || !cond.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("%s: generation %d, transition %s", typ, cond.ObservedGeneration, cond.LastTransitionTime)
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			wantCounts := v1alpha1.NodeScriptStatus{ObservedGeneration: 2, SpecHash: "h1", Stage: c.d.Stage,
				Nodes: int32(c.d.Counts.Nodes), Pending: int32(c.d.Counts.Pending), Running: int32(c.d.Counts.Running),
				Succeeded: int32(c.d.Counts.Succeeded), Failed: int32(c.d.Counts.Failed), RolledBack: int32(c.d.Counts.RolledBack)}
			if diff := cmp.Diff(wantCounts, st, cmpopts.IgnoreFields(v1alpha1.NodeScriptStatus{}, "Conditions")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			e.checkEvents("events", c.events...)

			if c.startErr != nil {
				return // Progressing flips to True and back: rewritten (a new transition time)
			}
			// The same status again: no write, no Event.
			ns.Status = st
			e.dyn.ClearActions()
			if err := e.c.status(e.ctx, ns, c.d, "h1", c.startErr, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if a := describe(e.dyn.Actions()); len(a) != 0 {
				t.Errorf("unchanged status written: %v", a)
			}
			e.checkEvents("events, unchanged")
		})
	}
}
