package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrePullPodGolden(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		mutate func(*v1alpha1.NodeScriptSpec)
	}{
		{"prepull-debugpod", nil},
		{"prepull-nsenter", func(s *v1alpha1.NodeScriptSpec) {
			s.Backend = v1alpha1.BackendSpec{Name: "nsenter", Namespace: "ops",
				Image: "registry.example:5000/ops/nodeexec@sha256:" + strings.Repeat("ab", 32), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "ops-registry"}}}
			s.Timeout = &metav1.Duration{Duration: time.Minute}
			s.SecretEnv = []v1alpha1.SecretEnvSource{{Secret: "token"}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix-sysctl", UID: "6c1f0d4e-0000-4000-8000-000000000001"}, Spec: v1alpha1.NodeScriptSpec{
				Script: "sysctl -w net.ipv4.ip_forward=1",
			}}
			if c.mutate != nil {
				c.mutate(&ns.Spec)
			}
			run, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "node-a.example", Action: v1alpha1.ActionRun, Attempt: 2, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			before := run.DeepCopy()
			pod := prePullPod(run, runPodName(ns.Name, v1alpha1.SpecHash(&ns.Spec), "node-a.example", v1alpha1.ActionPrePull, 2), prePullTimeout(ns), now)
			golden.CheckYAML(t, c.name+".yaml", pod)
			if run.Spec.Containers[0].Image != before.Spec.Containers[0].Image || len(run.Spec.Volumes) != len(before.Spec.Volumes) {
				t.Error("PrePullPod changed the run pod")
			}
			// What matters, whatever the golden file says.
			if pod.Spec.NodeName != run.Spec.NodeName || pod.Spec.Containers[0].Image != run.Spec.Containers[0].Image ||
				pod.Spec.Containers[0].ImagePullPolicy != run.Spec.Containers[0].ImagePullPolicy ||
				!slices.Equal(pod.Spec.ImagePullSecrets, run.Spec.ImagePullSecrets) || len(pod.Spec.Tolerations) == 0 {
				t.Errorf("not pinned to the node with the run's image, pull policy, pull secrets and tolerations: %+v", pod.Spec)
			}
			if pod.Spec.HostPID || pod.Spec.HostNetwork || len(pod.Spec.Volumes) > 0 || len(pod.Spec.Containers[0].Env) > 0 || len(pod.Spec.Containers[0].EnvFrom) > 0 {
				t.Errorf("the pre-pull pod keeps the run's privileges or environment: %+v", pod.Spec)
			}
			if pod.Labels[v1alpha1.LabelAction] != v1alpha1.ActionPrePull || pod.Labels[v1alpha1.LabelNodeScript] != ns.Name {
				t.Errorf("labels %v", pod.Labels)
			}
		})
	}
}

func TestPrePullStep(t *testing.T) {
	since := t0
	pod := func(phase corev1.PodPhase, st ...corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pull-0", Image: "registry.test/nope:missing"}}}, Status: corev1.PodStatus{Phase: phase}}
		for _, s := range st {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "pull-0", State: s})
		}
		return p
	}
	waitingFor := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "the registry said: manifest unknown"}}
	}
	for _, c := range []struct {
		name       string
		pod        *corev1.Pod
		now        time.Time
		want, msgs string
	}{
		{"not seen yet", nil, since, prePullGoing, ""},
		{"scheduled", pod(corev1.PodPending), since, prePullGoing, ""},
		{"pulling", pod(corev1.PodPending, waitingFor("ContainerCreating")), since.Add(time.Second), prePullGoing, ""},
		{"ErrImagePull", pod(corev1.PodPending, waitingFor("ErrImagePull")), since, prePullFailed, `ErrImagePull: image "registry.test/nope:missing" cannot be pulled: the registry said: manifest unknown (fix spec.backend.image`},
		{"ImagePullBackOff", pod(corev1.PodPending, waitingFor("ImagePullBackOff")), since, prePullFailed, "ImagePullBackOff: "},
		{"InvalidImageName", pod(corev1.PodPending, waitingFor("InvalidImageName")), since, prePullFailed, "InvalidImageName: "},
		{"ErrImageNeverPull", pod(corev1.PodPending, waitingFor("ErrImageNeverPull")), since, prePullFailed, "spec.backend.imagePullSecrets"},
		{"running", pod(corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}), since, prePullDone, ""},
		{"exited", pod(corev1.PodSucceeded, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}), since, prePullDone, ""},
		// An image without `true`: pulled, then its container cannot start.
		{"no true in the image", pod(corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError"}}), since, prePullDone, ""},
		{"CreateContainerError", pod(corev1.PodPending, waitingFor("CreateContainerError")), since, prePullDone, ""},
		{"rejected by the kubelet", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu"}}, since, prePullFailed, "ended before the pull: OutOfcpu: Node didn't"},
		{"timeout", pod(corev1.PodPending, waitingFor("ContainerCreating")), since.Add(defaultTimeout), prePullFailed, "not pulled within 10m0s (spec.timeout)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, msg := prePullStep(c.pod, "fallback:image", since, c.now, defaultTimeout)
			if got != c.want || !strings.Contains(msg, c.msgs) {
				t.Errorf("got %q %q, want %q with %q", got, msg, c.want, c.msgs)
			}
		})
	}
}

// prePullSpec is a NodeScript under spec.maintenance cordon and drain,
// pre-pulling by default.
func prePullSpec(mutate ...func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, Drain: &v1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}}
		s.Retry.Limit = ptr.To[int32](1)
		for _, m := range mutate {
			m(s)
		}
	})
}

// An image that cannot be pulled: the node is never cordoned, it fails
// for the infrastructure (PrePullFailed, with the image and the fix),
// and is retried after its backoff with a new pre-pull pod.
func TestPrePullFailureNoCordon(t *testing.T) {
	ns := prePullSpec()
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	after := e.reconcile()
	pull := podName(ns, "n1", v1alpha1.ActionPrePull, 1)
	if got := e.pods(); !slices.Equal(got, []string{pull}) {
		t.Fatalf("pods %v, want the pre-pull pod %s alone", got, pull)
	}
	if e.node("n1").Spec.Unschedulable {
		t.Fatal("cordoned before the image was pulled")
	}
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseRunning || s.Maintenance != v1alpha1.MaintenancePulling || s.Pod != pull || s.Hash != hash || s.CordonedByUs {
		t.Fatalf("pulling: %+v", s)
	}
	_ = after
	e.checkEvents("pulling")
	if after := e.reconcile(); after <= 0 || after > prePullRecheck { // nothing new while the pod has no status
		t.Errorf("requeue after %s, want at most %s while pulling", after, prePullRecheck)
	}
	if got := e.pods(); !slices.Equal(got, []string{pull}) || e.node("n1").Spec.Unschedulable {
		t.Fatalf("pods %v, cordoned %t while pulling", got, e.node("n1").Spec.Unschedulable)
	}
	e.setPod(pull, waiting("ErrImagePull"))
	e.reconcile()
	if e.node("n1").Spec.Unschedulable {
		t.Fatal("cordoned after the pull failed")
	}
	s = e.state("n1")
	if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != v1alpha1.ReasonPrePullFailed || s.Attempts != 1 || s.NextRetry == nil ||
		!strings.Contains(s.Message, "ErrImagePull") || !strings.Contains(s.Message, `image "busybox:stable" cannot be pulled: pull access denied`) {
		t.Fatalf("after the failed pull: %+v", s)
	}
	if got := e.pods(); len(got) != 0 {
		t.Errorf("pods %v left after the failed pull", got)
	}
	e.checkEvents("failed pull", v1alpha1.ReasonPrePullFailed)
	// The retry pulls again (attempt 2), still without a cordon.
	e.clock.Step(time.Hour)
	e.reconcile()
	if got := e.pods(); !slices.Equal(got, []string{podName(ns, "n1", v1alpha1.ActionPrePull, 2)}) || e.node("n1").Spec.Unschedulable {
		t.Fatalf("retry: pods %v, cordoned %t", got, e.node("n1").Spec.Unschedulable)
	}
}

// A pulled image: PrePulled, then cordon and drain as before, the
// pre-pull pod deleted, the run pod's attempt 1.
func TestPrePullThenCordon(t *testing.T) {
	ns := prePullSpec()
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	pull := podName(ns, "n1", v1alpha1.ActionPrePull, 1)
	e.setPod(pull, running)
	e.reconcile()
	if !e.node("n1").Spec.Unschedulable {
		t.Fatal("not cordoned once pulled")
	}
	if got := e.pods(); len(got) != 0 {
		t.Errorf("pods %v: the pre-pull pod is left", got)
	}
	s := e.waitState("n1", func(s nodeState) bool { return s.Maintenance == v1alpha1.MaintenanceDrained })
	if s.Phase != v1alpha1.PhaseRunning || !s.CordonedByUs || s.Attempts != 0 || s.Pod != "" {
		t.Errorf("drained: %+v", s)
	}
	e.reconcile()
	if s := e.state("n1"); s.Pod != podName(ns, "n1", v1alpha1.ActionRun, 1) {
		t.Errorf("run: %+v, want attempt 1", s)
	}
	e.checkEvents("pulled", v1alpha1.ReasonPrePulled, v1alpha1.ReasonCordoned, v1alpha1.ReasonDrained)
}

// A restarted watcher resumes a pull from the node's state: the pod is
// judged again; a pod gone before its outcome was recorded is created again;
// a pre-pull pod the state no longer names is deleted.
func TestPrePullResume(t *testing.T) {
	ns := prePullSpec()
	hash := v1alpha1.SpecHash(&ns.Spec)
	pull := podName(ns, "n1", v1alpha1.ActionPrePull, 1)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenancePulling, Pod: pull, Since: t0})))
	e.reconcile()
	if got := e.pods(); !slices.Equal(got, []string{pull}) || e.node("n1").Spec.Unschedulable {
		t.Fatalf("pods %v, cordoned %t: want the pre-pull pod created again and no cordon", got, e.node("n1").Spec.Unschedulable)
	}
	// A stray pre-pull pod (of a spec since changed) is deleted.
	old := podName(ns, "n2", v1alpha1.ActionPrePull, 1)
	stray, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, pull, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stray = stray.DeepCopy()
	stray.Name, stray.ResourceVersion, stray.Spec.NodeName = old, "", "n2"
	if _, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Create(e.ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.cs.Tracker().Add(testNode("n2", func(n *corev1.Node) { n.Labels["pool"] = "b" }))
	e.reconcile()
	if got := e.pods(); !slices.Equal(got, []string{pull}) {
		t.Errorf("pods %v: the stray pre-pull pod %s is left", got, old)
	}
}

// spec.maintenance.prePull: false cordons at once, as before.
func TestPrePullOff(t *testing.T) {
	ns := prePullSpec(func(s *v1alpha1.NodeScriptSpec) { s.Maintenance.PrePull = ptr.To(false) })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if !e.node("n1").Spec.Unschedulable {
		t.Error("prePull: false: not cordoned at once")
	}
	if nodescript.PrePulls(script(nil)) || nodescript.PrePulls(script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	})) || !nodescript.PrePulls(prePullSpec()) {
		t.Error("PrePulls: want it under spec.maintenance.cordon only")
	}
}
