//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// jobLog records, from an informer, the hook Jobs of a NodeScript: per
// hook the Jobs (by UID) and each one's completion time.
type jobLog struct {
	mu        sync.Mutex
	byHook    map[string][]types.UID
	names     map[types.UID]string
	completed map[types.UID]time.Time
	failed    map[types.UID]bool
}

func recordJobs(t *testing.T, name string) *jobLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &jobLog{byHook: map[string][]types.UID{}, names: map[types.UID]string{}, completed: map[types.UID]time.Time{}, failed: map[types.UID]bool{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(v1alpha1.DefaultNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelNodeScript + "=" + name }))
	inf := factory.Batch().V1().Jobs().Informer()
	seen := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.names[j.UID]; !ok {
			l.names[j.UID] = j.Name
			h := j.Labels[v1alpha1.LabelHook]
			l.byHook[h] = append(l.byHook[h], j.UID)
		}
		if c := j.Status.CompletionTime; c != nil {
			l.completed[j.UID] = c.Time
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				l.failed[j.UID] = true
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }, DeleteFunc: func(any) {},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("job informer did not sync")
	}
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	return l
}

// jobs is the number of Jobs of hook seen, and when the first completed.
func (l *jobLog) jobs(hook string) (int, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	uids := l.byHook[hook]
	if len(uids) == 0 {
		return 0, time.Time{}
	}
	return len(uids), l.completed[uids[0]]
}

// hookJobTemplate is a hook's YAML: a Job running sh -c cmd in the suite's image.
func hookJobTemplate(cmd string) string {
	return fmt.Sprintf(`{timeout: 60s, template: {spec: {template: {spec: {containers: [{name: hook, image: %q, command: [sh, -c, %q]}]}}}}}`, env.image, cmd)
}

// TestWatcherHooks: on the first node a NodeScript with preRollout,
// preNode and postNode hooks (the API server restarted while the
// preRollout Job runs) runs each hook once, its preNode Job done before
// the run pod is created, and completes; on the second node at the same
// time a NodeScript whose preNode hook fails holds the node (PreHookFailed,
// never cordoned, no run pod), and its postNode hook runs after that
// failure. Every hook Job is deleted once its outcome is recorded.
func TestWatcherHooks(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	t0 := time.Now()
	okName, badName := uniqueName("e2e-hooks-ok-"), uniqueName("e2e-hooks-bad-")
	cleanupNodeScript(t, dyn, okName, env.nodes[0])
	cleanupNodeScript(t, dyn, badName, env.nodes[1])
	t.Cleanup(func() {
		for _, n := range []string{okName, badName} {
			_ = env.client.BatchV1().Jobs(v1alpha1.DefaultNamespace).DeleteCollection(context.Background(),
				metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + n})
		}
	})
	okPods, badPods := recordPods(t, okName), recordPods(t, badName)
	okJobs, badJobs := recordJobs(t, okName), recordJobs(t, badName)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  script: 'true'
  hooks:
    preRollout: %s
    preNode: %s
    postNode: %s
---
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  script: 'true'
  retry: {limit: 0}
  maintenance: {cordon: true}
  hooks:
    preNode: %s
    postNode: %s
`, okName, env.nodes[0], hookJobTemplate(`sleep 6`), hookJobTemplate(`test "$NODESCRIPT_HOOK" = preNode && test -n "$NODESCRIPT_NODE" && sleep 1`), hookJobTemplate(`true`),
		badName, env.nodes[1], hookJobTemplate(`echo the database did not step down; exit 3`), hookJobTemplate(`test "$NODESCRIPT_HOOK" = postNode`)))

	// The preRollout Job runs: the rollout holds; the API server restarts.
	ns := waitNodeScript(ctx, t, dyn, okName, 30*time.Second, "held by its preRollout hook", func(ns *v1alpha1.NodeScript) bool {
		p := findCond(ns, v1alpha1.ConditionProgressing)
		return p != nil && p.Reason == v1alpha1.HoldHookRunning
	})
	if ns.Status.Hooks == nil || ns.Status.Hooks.PreRollout == nil || ns.Status.Hooks.PreRollout.Phase != v1alpha1.HookRunning {
		t.Fatalf("status.hooks %+v: want preRollout Running", ns.Status.Hooks)
	}
	t.Cleanup(func() { restoreCluster(context.WithoutCancel(ctx), t) })
	if err := env.cluster.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(okPods.runs(env.nodes[0], v1alpha1.ActionRun)); got != 0 {
		t.Errorf("%d run pods while the preRollout hook runs, want 0", got)
	}

	// The failing preNode hook: the node fails for the infrastructure, never cordoned, no run pod.
	var bad nodescripts.NodeState
	var badNode *corev1.Node
	if !waitFor(60*time.Second, func() bool {
		bad, badNode = nodeState(ctx, t, env.nodes[1], badName)
		return bad.Hook == "postNode:Succeeded"
	}) {
		t.Fatalf("node %s: state %+v, want Failed (PreHookFailed) and its postNode hook Succeeded", env.nodes[1], bad)
	}
	if bad.Phase != v1alpha1.PhaseFailed || bad.Reason != v1alpha1.ReasonPreHookFailed || !bad.Infrastructure || !strings.Contains(bad.Message, "preNode") {
		t.Errorf("node %s: state %+v, want Failed, infrastructure, reason %s", env.nodes[1], bad, v1alpha1.ReasonPreHookFailed)
	}
	if badNode.Spec.Unschedulable || bad.CordonedByUs {
		t.Errorf("node %s cordoned (cordonedByUs %t) for a failed preNode hook", env.nodes[1], bad.CordonedByUs)
	}
	if got := badPods.runs(env.nodes[1], v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("run pods %v after a failed preNode hook, want none", got)
	}
	if n, _ := badJobs.jobs(v1alpha1.HookPreNode); n != 1 {
		t.Errorf("%d preNode Jobs, want 1 (retry limit 0)", n)
	}
	if n, _ := badJobs.jobs(v1alpha1.HookPostNode); n != 1 {
		t.Errorf("%d postNode Jobs after the failure, want 1", n)
	}

	// The first node: preRollout once (across the restart), preNode before the run, postNode after.
	waitNodeScript(ctx, t, dyn, okName, 60*time.Second, "complete with preRollout recorded", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1 &&
			ns.Status.Hooks != nil && ns.Status.Hooks.PreRollout != nil && ns.Status.Hooks.PreRollout.Phase == v1alpha1.HookSucceeded
	})
	var ok nodescripts.NodeState
	if !waitFor(30*time.Second, func() bool {
		ok, _ = nodeState(ctx, t, env.nodes[0], okName)
		return ok.Hook == "postNode:Succeeded"
	}) {
		t.Fatalf("node %s: state %+v, want its postNode hook Succeeded", env.nodes[0], ok)
	}
	if n, _ := okJobs.jobs(v1alpha1.HookPreRollout); n != 1 {
		t.Errorf("%d preRollout Jobs, want 1 (adopted after the API server restart)", n)
	}
	n, preDone := okJobs.jobs(v1alpha1.HookPreNode)
	runs := okPods.runs(env.nodes[0], v1alpha1.ActionRun)
	if n != 1 || len(runs) != 1 {
		t.Fatalf("%d preNode Jobs and run pods %v, want 1 and 1", n, runs)
	}
	if runAt := okPods.createdAt(runs[0]); preDone.IsZero() || runAt.Before(preDone) {
		t.Errorf("preNode Job completed at %s, run pod created at %s: want the hook first", preDone, runAt)
	}
	if n, _ := okJobs.jobs(v1alpha1.HookPostNode); n != 1 {
		t.Errorf("%d postNode Jobs, want 1", n)
	}
	out, _, _ := cli(ctx, "", "status", okName)
	if !strings.Contains(out, "hook preRollout: Succeeded") {
		t.Errorf("nodeexec status lacks the preRollout hook:\n%s", out)
	}
	// Every hook Job is deleted once its outcome is recorded.
	for _, name := range []string{okName, badName} {
		if !waitFor(20*time.Second, func() bool {
			l, err := env.client.BatchV1().Jobs(v1alpha1.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + name})
			return err == nil && len(l.Items) == 0
		}) {
			t.Errorf("nodescript %s: hook Jobs left behind", name)
		}
	}
	t.Logf("TestWatcherHooks took %s", time.Since(t0).Round(time.Millisecond))
}

func ptrTo[T any](v T) *T { return &v }

// TestApplyRejectsBadHooks: nodeexec apply refuses a bad spec.hooks naming
// the field, and applies nothing (the good document before it neither).
func TestApplyRejectsBadHooks(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	job := func(pod string) string {
		return "  hooks:\n    preNode: {template: {spec: {template: {spec: " + pod + "}}}}\n"
	}
	cases := []badApply{
		{"no-containers", good + job("{restartPolicy: Never}"), "spec.hooks.preNode.template.spec.template.spec.containers: Required value"},
		{"empty-containers", good + job("{containers: []}"), "spec.hooks.preNode.template.spec.template.spec.containers"},
		{"unknown-field", good + job("{containers: [{name: h, image: busybox, comand: [x]}]}"), "comand"},
		{"restart-always", good + job("{restartPolicy: Always, containers: [{name: h, image: busybox}]}"), "spec.hooks.preNode.template.spec.template.spec.restartPolicy"},
		{"no-image", good + job("{containers: [{name: h}]}"), "spec.hooks.preNode.template.spec.template.spec.containers[0].image"},
		{"own-env", good + job("{containers: [{name: h, image: busybox, env: [{name: NODESCRIPT_NODE, value: x}]}]}"), "spec.hooks.preNode.template.spec.template.spec.containers[0].env[0].name"},
		{"timeout", good + "  hooks:\n    postRollout: {timeout: soon, template: {spec: {template: {spec: {containers: [{name: h, image: busybox}]}}}}}\n", "spec.hooks.postRollout.timeout"},
		{"no-template", good + "  hooks:\n    preRollout: {timeout: 1m}\n", "spec.hooks.preRollout.template.spec.template.spec.containers"},
		{"privileged", good + job("{containers: [{name: h, image: busybox, securityContext: {privileged: true}}]}"), "Pod Security baseline"},
		{"host-path", good + job("{hostNetwork: true, volumes: [{name: r, hostPath: {path: /}}], containers: [{name: h, image: busybox}]}"), "hostPath volumes"},
	}
	expectApplyRefused(ctx, t, dyn, "e2e-badhook-", good, cases)
}
