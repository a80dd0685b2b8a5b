package watcher

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// hookOf is a hook running cmd in busybox.
func hookOf(cmd string) *v1alpha1.HookJob {
	return &v1alpha1.HookJob{Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "hook", Image: "busybox:stable", Command: []string{"sh", "-c", cmd}}},
	}}}}}
}

func TestHookJobGolden(t *testing.T) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix-sysctl", UID: "6c1f0d4e-0000-4000-8000-000000000001"}, Spec: v1alpha1.NodeScriptSpec{
		Script: "sysctl -w net.ipv4.ip_forward=1", Backend: v1alpha1.BackendSpec{Namespace: "ops"},
	}}
	h := hookOf("pg-stepdown --node \"$NODESCRIPT_NODE\"")
	h.Timeout = &metav1.Duration{Duration: 90 * time.Second}
	h.Template.Labels = map[string]string{"team": "db"}
	h.Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	h.Template.Spec.Template.Labels = map[string]string{v1alpha1.LabelNodeScript: "someone-else", "app": "stepdown"}
	h.Template.Spec.Template.Spec.ServiceAccountName = "stepdown"
	h.Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "wait", Image: "busybox:stable", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}
	before := h.DeepCopy()
	job := hookJob(ns, h, v1alpha1.HookPreNode, "node-a.example", v1alpha1.SpecHash(&ns.Spec), 2)
	golden.CheckYAML(t, "hook-prenode.yaml", job)
	if h.Template.Spec.TTLSecondsAfterFinished == nil || len(before.Template.Spec.Template.Spec.Containers[0].Env) != len(h.Template.Spec.Template.Spec.Containers[0].Env) {
		t.Error("HookJob changed the template")
	}
	// What matters, whatever the golden file says.
	if job.Namespace != "ops" || job.Labels[v1alpha1.LabelNodeScript] != ns.Name || job.Labels["app.kubernetes.io/managed-by"] != "nodeexec" ||
		len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != ns.UID || *job.Spec.ActiveDeadlineSeconds != 90 ||
		job.Spec.TTLSecondsAfterFinished != nil || job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("job %+v", job)
	}
	if _, ok := job.Spec.Template.Labels[v1alpha1.LabelNodeScript]; ok {
		t.Error("the hook's pods carry the NodeScript label: the run pod informer would take them for run pods")
	}
	for _, c := range append(job.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.Containers...) {
		var names []string
		for _, e := range c.Env {
			names = append(names, e.Name)
		}
		for _, want := range []string{v1alpha1.EnvHookName, v1alpha1.EnvHookNode, v1alpha1.EnvHook, v1alpha1.EnvHookHash} {
			if !slices.Contains(names, want) {
				t.Errorf("container %s lacks %s: %v", c.Name, want, names)
			}
		}
	}
	rollout := hookJob(ns, hookOf("true"), v1alpha1.HookPreRollout, "", v1alpha1.SpecHash(&ns.Spec), 1)
	for _, e := range rollout.Spec.Template.Spec.Containers[0].Env {
		if e.Name == v1alpha1.EnvHookNode {
			t.Error("a rollout hook has NODESCRIPT_NODE")
		}
	}
	if *rollout.Spec.ActiveDeadlineSeconds != int64(v1alpha1.DefaultHookTimeout.Seconds()) || *rollout.Spec.BackoffLimit != 0 {
		t.Errorf("defaults: deadline %d backoffLimit %d", *rollout.Spec.ActiveDeadlineSeconds, *rollout.Spec.BackoffLimit)
	}
}

func TestHookJobName(t *testing.T) {
	short := hookJobName("fix", v1alpha1.HookPreNode, "n1", "0123456789abcdef", 1)
	if short != "fix-prenode-n1-01234567-1" {
		t.Errorf("short name %q", short)
	}
	long := strings.Repeat("a", 63)
	seen := map[string]bool{}
	for _, c := range [][2]string{{long, "node-1.example.com"}, {long, "node-2.example.com"}, {"fix", "node.with.dots"}, {"fix", strings.Repeat("n", 253)}} {
		for attempt := 1; attempt <= 2; attempt++ {
			n := hookJobName(c[0], v1alpha1.HookPostNode, c[1], "0123456789abcdef", attempt)
			if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
				t.Errorf("%q: %v", n, msgs)
			}
			if seen[n] {
				t.Errorf("%q given twice", n)
			}
			seen[n] = true
			if n != hookJobName(c[0], v1alpha1.HookPostNode, c[1], "0123456789abcdef", attempt) {
				t.Error("not deterministic")
			}
		}
	}
}

func TestJobOutcome(t *testing.T) {
	created := metav1.NewTime(t0)
	cond := func(typ batchv1.JobConditionType, reason string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}, {Type: typ, Status: corev1.ConditionTrue, Reason: reason}}}}
	}
	for _, c := range []struct {
		name string
		job  *batchv1.Job
		now  time.Time
		want string
		msg  string
	}{
		{"going", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}, t0.Add(time.Minute), jobGoing, ""},
		{"complete", cond(batchv1.JobComplete, ""), t0, jobSucceeded, ""},
		{"deadline", cond(batchv1.JobFailed, "DeadlineExceeded"), t0, jobFailed, "DeadlineExceeded"},
		{"backoff", cond(batchv1.JobFailed, "BackoffLimitExceeded"), t0, jobFailed, "BackoffLimitExceeded"},
		{"past its timeout", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}, t0.Add(5*time.Minute + hookDeadlineGrace), jobFailed, "within its timeout"},
	} {
		got, msg := jobOutcome(c.job, c.now, 5*time.Minute)
		if got != c.want || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %q %q, want %q containing %q", c.name, got, msg, c.want, c.msg)
		}
	}
}

// setJob marks the stored Job name Complete (ok) or Failed, as the Job
// controller would.
func (e *env) setJob(name string, ok bool) {
	e.t.Helper()
	j, err := e.cs.BatchV1().Jobs(v1alpha1.DefaultNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	c := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	if !ok {
		c = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
	}
	j.Status.Conditions = append(j.Status.Conditions, c)
	if _, err := e.cs.BatchV1().Jobs(v1alpha1.DefaultNamespace).UpdateStatus(e.ctx, j, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// jobs are the stored Jobs' names, sorted.
func (e *env) jobs() []string {
	e.t.Helper()
	l, err := e.cs.BatchV1().Jobs("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, j := range l.Items {
		out = append(out, j.Name)
	}
	slices.Sort(out)
	return out
}

func hooked(mutate func(*v1alpha1.Hooks, *v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Hooks = &v1alpha1.Hooks{}
		mutate(s.Hooks, s)
	})
}

// preNode without spec.maintenance: the Job first, the run pod once it
// succeeded, then the Job deleted.
func TestPreNodeHookThenRun(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, _ *v1alpha1.NodeScriptSpec) { h.PreNode = hookOf("true") })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.hreconcile()
	job := hookJobName("fix", v1alpha1.HookPreNode, "n1", hash, 1)
	if got := e.jobs(); !slices.Equal(got, []string{job}) || len(e.pods()) != 0 {
		t.Fatalf("jobs %v pods %v, want the preNode Job alone", got, e.pods())
	}
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseRunning || s.Hook != "preNode:Running" || s.Hash != hash {
		t.Fatalf("state %+v", s)
	}
	e.checkEvents("started", v1alpha1.ReasonHookStarted)
	if after := e.hreconcile(); after <= 0 || after > hookRecheck { // still going: nothing new
		t.Errorf("requeue after %s, want at most %s while the hook runs", after, hookRecheck)
	}
	if len(e.pods()) != 0 || len(e.jobs()) != 1 {
		t.Fatalf("pods %v jobs %v while the hook runs", e.pods(), e.jobs())
	}
	e.setJob(job, true)
	e.hreconcile()
	if got := e.pods(); !slices.Equal(got, []string{podName(ns, "n1", v1alpha1.ActionRun, 1)}) {
		t.Fatalf("pods %v, want the run pod (attempt 1)", got)
	}
	if got := e.jobs(); len(got) != 0 {
		t.Errorf("jobs %v left after the hook's outcome", got)
	}
	e.checkEvents("succeeded", v1alpha1.ReasonHookSucceeded)
}

// A failing preNode hook under spec.maintenance: never cordoned, no run
// pod, Failed for the infrastructure (PreHookFailed); the postNode hook
// runs after that failure; the retry runs the hook again as attempt 2.
func TestPreNodeHookFailureNoCordon(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, s *v1alpha1.NodeScriptSpec) {
		h.PreNode, h.PostNode = hookOf("exit 1"), hookOf("true")
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false)}
		s.Retry.Limit = ptr.To[int32](1)
	})
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.hreconcile()
	if e.node("n1").Spec.Unschedulable {
		t.Fatal("cordoned before the preNode hook")
	}
	pre := hookJobName("fix", v1alpha1.HookPreNode, "n1", hash, 1)
	e.setJob(pre, false)
	e.hreconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != v1alpha1.ReasonPreHookFailed || s.Attempts != 1 || s.NextRetry == nil ||
		!strings.Contains(s.Message, "BackoffLimitExceeded") || e.node("n1").Spec.Unschedulable || len(e.pods()) != 0 {
		t.Fatalf("after the failed hook: %+v, cordoned %t, pods %v", s, e.node("n1").Spec.Unschedulable, e.pods())
	}
	e.checkEvents("failed", v1alpha1.ReasonHookStarted, v1alpha1.ReasonHookFailed)
	e.hreconcile() // the postNode hook, after the failure
	post := hookJobName("fix", v1alpha1.HookPostNode, "n1", hash, 1)
	if got := e.jobs(); !slices.Equal(got, []string{post}) || e.state("n1").Hook != "postNode:Running" {
		t.Fatalf("jobs %v state %+v, want the postNode Job", got, e.state("n1"))
	}
	// The retry waits for the postNode hook.
	e.clock.Step(time.Hour)
	e.hreconcile()
	if got := e.jobs(); !slices.Equal(got, []string{post}) {
		t.Fatalf("jobs %v: the retry started while the postNode hook runs", got)
	}
	e.setJob(post, true)
	e.hreconcile() // the postNode hook's outcome recorded, then the retry: the preNode hook again, as attempt 2
	e.checkEvents("postNode, retry", v1alpha1.ReasonHookStarted, v1alpha1.ReasonHookStarted, v1alpha1.ReasonHookSucceeded)
	if s := e.state("n1"); s.Hook != "preNode:Running" || s.Attempts != 1 {
		t.Fatalf("retry: %+v", s)
	}
	if got := e.jobs(); !slices.Equal(got, []string{hookJobName("fix", v1alpha1.HookPreNode, "n1", hash, 2)}) {
		t.Fatalf("retry: jobs %v", got)
	}
	if e.node("n1").Spec.Unschedulable {
		t.Error("cordoned")
	}
}

// A restarted watcher finds the preNode Job by its name: no second Job.
func TestPreNodeHookAdopted(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, _ *v1alpha1.NodeScriptSpec) { h.PreNode = hookOf("true") })
	hash := v1alpha1.SpecHash(&ns.Spec)
	job := hookJob(ns, ns.Spec.Hooks.PreNode, v1alpha1.HookPreNode, "n1", hash, 1)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: t0, Hook: "preNode:Running"})), job)
	e.hreconcile()
	for _, c := range e.calls[""] {
		if strings.HasPrefix(c, "create jobs") {
			t.Errorf("a second Job: %s", c)
		}
	}
	e.setJob(job.Name, true)
	e.hreconcile()
	if got := e.pods(); !slices.Equal(got, []string{podName(ns, "n1", v1alpha1.ActionRun, 1)}) || len(e.jobs()) != 0 {
		t.Fatalf("pods %v jobs %v", got, e.jobs())
	}
	// A Job gone before its outcome was recorded is created again.
	e2 := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: t0, Hook: "preNode:Running"})))
	e2.hreconcile()
	if got := e2.jobs(); !slices.Equal(got, []string{job.Name}) || len(e2.pods()) != 0 {
		t.Fatalf("gone: jobs %v pods %v", got, e2.pods())
	}
}

// postNode after a success: once, its failure does not change the node.
func TestPostNodeAfterSuccess(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, _ *v1alpha1.NodeScriptSpec) { h.PostNode = hookOf("exit 1") })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Attempts: 1, Since: t0})))
	e.hreconcile()
	job := hookJobName("fix", v1alpha1.HookPostNode, "n1", hash, 1)
	if got := e.jobs(); !slices.Equal(got, []string{job}) {
		t.Fatalf("jobs %v", got)
	}
	e.setJob(job, false)
	e.hreconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Hook != "postNode:Failed" {
		t.Fatalf("state %+v", s)
	}
	e.checkEvents("post", v1alpha1.ReasonHookStarted, v1alpha1.ReasonHookFailed, v1alpha1.ReasonComplete)
	e.hreconcile()
	if got := e.jobs(); len(got) != 0 {
		t.Errorf("jobs %v: postNode ran again or was left", got)
	}
}

// preRollout holds the rollout until it succeeds; a failure holds it
// (HookFailed) until spec.retry's backoff passed, then a second Job.
func TestPreRolloutHolds(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, _ *v1alpha1.NodeScriptSpec) { h.PreRollout = hookOf("true") })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	e.hreconcile()
	first := hookJobName("fix", v1alpha1.HookPreRollout, "", hash, 1)
	if got := e.jobs(); !slices.Equal(got, []string{first}) || len(e.pods()) != 0 {
		t.Fatalf("jobs %v pods %v", got, e.pods())
	}
	st := e.nodeScript().Status
	if p := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); p == nil || p.Reason != v1alpha1.HoldHookRunning || st.Hooks.PreRollout.Phase != v1alpha1.HookRunning {
		t.Fatalf("status %+v", st)
	}
	e.setJob(first, false)
	e.hreconcile()
	st = e.nodeScript().Status
	if p := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); p == nil || p.Reason != v1alpha1.HoldHookFailed || st.Hooks.PreRollout.Phase != v1alpha1.HookFailed || len(e.pods()) != 0 {
		t.Fatalf("status %+v pods %v", st, e.pods())
	}
	e.hreconcile() // the status records the failure: the Job is deleted
	if got := e.jobs(); len(got) != 0 {
		t.Fatalf("jobs %v after the failure was recorded", got)
	}
	e.clock.Step(time.Hour)
	e.hreconcile()
	second := hookJobName("fix", v1alpha1.HookPreRollout, "", hash, 2)
	if got := e.jobs(); !slices.Equal(got, []string{second}) {
		t.Fatalf("jobs %v, want attempt 2", got)
	}
	e.setJob(second, true)
	e.hreconcile()
	if got := e.pods(); len(got) == 0 {
		t.Fatal("no run pod once preRollout succeeded")
	}
	if st := e.nodeScript().Status; st.Hooks.PreRollout.Phase != v1alpha1.HookSucceeded || st.Hooks.PreRollout.Hash != hash {
		t.Fatalf("status.hooks %+v", st.Hooks)
	}
}

// postRollout runs once when the rollout is Complete, recorded in status.
func TestPostRolloutOnce(t *testing.T) {
	ns := hooked(func(h *v1alpha1.Hooks, _ *v1alpha1.NodeScriptSpec) { h.PostRollout = hookOf("true") })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Attempts: 1, Since: t0})))
	e.hreconcile()
	job := hookJobName("fix", v1alpha1.HookPostRollout, "", hash, 1)
	if got := e.jobs(); !slices.Equal(got, []string{job}) {
		t.Fatalf("jobs %v", got)
	}
	e.setJob(job, true)
	e.hreconcile()
	e.hreconcile()
	if st := e.nodeScript().Status; st.Hooks == nil || st.Hooks.PostRollout.Phase != v1alpha1.HookSucceeded || st.Stage != v1alpha1.StageComplete {
		t.Fatalf("status %+v", st)
	}
	e.hreconcile()
	if got := e.jobs(); len(got) != 0 {
		t.Errorf("jobs %v: postRollout ran again or was left", got)
	}
	e.checkEvents("postRollout", v1alpha1.ReasonHookStarted, v1alpha1.ReasonHookSucceeded, v1alpha1.ReasonComplete)
}

// hreconcile loads the hook Job cache from the fake clientset, as the Job
// informer would, then reconciles.
func (e *env) hreconcile() time.Duration {
	e.t.Helper()
	if e.c.jobs == nil {
		e.c.jobs = cache.NewStore(cache.MetaNamespaceKeyFunc)
	}
	l, err := e.cs.BatchV1().Jobs("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var objs []any
	for i := range l.Items {
		o, _ := trimJob(&l.Items[i])
		objs = append(objs, o)
	}
	_ = e.c.jobs.Replace(objs, "")
	return e.reconcile()
}

// The example of docs/nodescript-hooks.md parses and validates.
func TestHooksDocExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/nodescript-hooks.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Example\n\n```yaml\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no example in docs/nodescript-hooks.md")
	}
	scripts, err := nodescripts.ParseNodeScripts(strings.NewReader(doc))
	if err != nil || len(scripts) != 1 {
		t.Fatalf("%v (%d scripts)", err, len(scripts))
	}
	h := scripts[0].Spec.Hooks
	if h == nil || h.PreRollout == nil || h.PreNode == nil || h.PostRollout == nil || h.PreNode.Template.Spec.Template.Spec.Containers[0].Name != "stepdown" {
		t.Errorf("hooks %+v", h)
	}
}
