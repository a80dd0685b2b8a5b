package watcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestRunPodGolden(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	base := func(mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
		ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix-sysctl", UID: "6c1f0d4e-0000-4000-8000-000000000001"}, Spec: v1alpha1.NodeScriptSpec{
			Script: "sysctl -w net.ipv4.ip_forward=1", RollbackScript: "sysctl -w net.ipv4.ip_forward=0", VerifyScript: "sysctl -n net.ipv4.ip_forward | grep -q 1",
		}}
		if mutate != nil {
			mutate(&ns.Spec)
		}
		return ns
	}
	for _, c := range []struct {
		name   string
		ns     *v1alpha1.NodeScript
		action string
	}{
		{"debugpod-run", base(nil), v1alpha1.ActionRun},
		{"debugpod-netadmin-verify", base(func(s *v1alpha1.NodeScriptSpec) { s.Backend.Profile = "netadmin" }), v1alpha1.ActionVerify},
		{"nsenter-rollback", base(func(s *v1alpha1.NodeScriptSpec) {
			s.Backend = v1alpha1.BackendSpec{Name: "nsenter", Namespace: "ops", Namespaces: []string{"mnt", "net"},
				Image: "registry.example:5000/ops/nodeexec@sha256:" + strings.Repeat("ab", 32), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "ops-registry"}}}
			s.Timeout = &metav1.Duration{Duration: time.Minute}
		}), v1alpha1.ActionRollback},
		// spec.reboot: IfRequired wraps the script (the sentinel check, exit
		// 194) and gives it the sentinel's path; the reboot pod runs the
		// reboot command.
		{"nsenter-run-reboot-ifrequired", base(func(s *v1alpha1.NodeScriptSpec) {
			s.Backend.Name, s.Reboot, s.RebootSentinel = "nsenter", v1alpha1.RebootIfRequired, "/run/nodeexec/reboot-required"
		}), v1alpha1.ActionRun},
		{"debugpod-reboot", base(func(s *v1alpha1.NodeScriptSpec) { s.Reboot = v1alpha1.RebootAlways }), v1alpha1.ActionReboot},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := runPodSpec{NodeScript: c.ns, Backend: testBackend(t, c.ns), Node: "node-a.example", Action: c.action, Attempt: 2, Now: now}
			if c.action == v1alpha1.ActionRun || c.action == v1alpha1.ActionVerify {
				// What the watcher's start gives them (annotations_env.go).
				rs.Place, rs.BootID = &rolloutPlace{Ordinal: 3, Canary: c.action == v1alpha1.ActionVerify}, "0f7c1d2e-boot"
			}
			pod, err := buildRunPod(rs)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, c.name+".yaml", pod)
		})
	}
}

func TestRunPodProperties(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}, Spec: v1alpha1.NodeScriptSpec{Script: "true", RollbackScript: "true"}}
	a, _ := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionRun, Attempt: 1, Now: now})
	b, _ := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionRun, Attempt: 1, Now: now.Add(time.Hour)})
	if a.Name != b.Name {
		t.Errorf("the name depends on the time: %s, %s", a.Name, b.Name)
	}
	for _, other := range []runPodSpec{
		{NodeScript: ns, Node: "n1", Action: v1alpha1.ActionRun, Attempt: 2, Now: now},
		{NodeScript: ns, Node: "n2", Action: v1alpha1.ActionRun, Attempt: 1, Now: now},
		{NodeScript: ns, Node: "n1", Action: v1alpha1.ActionRollback, Attempt: 1, Now: now},
	} {
		other.Backend = testBackend(t, ns)
		p, err := buildRunPod(other)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name == a.Name {
			t.Errorf("%+v has the same name as the first run: %s", other, p.Name)
		}
	}
	c := a.Spec.Containers[0]
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || a.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("termination message policy %q restart policy %q", c.TerminationMessagePolicy, a.Spec.RestartPolicy)
	}
	if got := strings.Join(c.Command, " "); got != "chroot /host sh -c true" {
		t.Errorf("command %q", got)
	}
	if a.Spec.ActiveDeadlineSeconds == nil || *a.Spec.ActiveDeadlineSeconds != int64((defaultTimeout+podexec.DeadlineSlack)/time.Second) {
		t.Errorf("activeDeadlineSeconds %v", a.Spec.ActiveDeadlineSeconds)
	}
	for _, bad := range []string{"runtime", "ephemeral"} {
		ns := ns.DeepCopy()
		ns.Spec.Backend.Name = bad
		if b, err := nodeBackend(ns, fake.NewClientset()); err == nil || !strings.Contains(err.Error(), "target a container") {
			t.Errorf("NodeBackend for backend %s: (%v, %v), want a refusal", bad, b, err)
		}
	}
	// A backend that cannot build a run-to-completion pod is refused.
	if _, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: execOnly{}, Node: "n1", Action: v1alpha1.ActionRun, Attempt: 1, Now: now}); err == nil || !strings.Contains(err.Error(), "spec.backend.name") {
		t.Errorf("a backend without CompletionPod: %v", err)
	}
}

// execOnly is a backend without nodeexec.CompletionPodBuilder.
type execOnly struct{}

func (execOnly) Name() string { return "exec-only" }
func (execOnly) Run(context.Context, nodeexec.Request) (nodeexec.Result, error) {
	return nodeexec.Result{}, errors.New("not run")
}

func TestPodOutcome(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	term := func(code int32, reason, msg string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}}}
	}
	waitingMsg := func(reason, msg string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "c", Image: "registry.example/img:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
	waiting := func(reason string) []corev1.ContainerStatus { return waitingMsg(reason, "m") }
	for _, c := range []struct {
		name          string
		status        corev1.PodStatus
		deleting      bool
		ready         bool
		notReadySince time.Time
		want          runOutcome
	}{
		{"running", corev1.PodStatus{Phase: corev1.PodRunning}, false, true, time.Time{}, runOutcome{ExitCode: -1}},
		{"pending", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting("ContainerCreating")}, false, true, time.Time{}, runOutcome{ExitCode: -1}},
		{"succeeded", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: term(0, "Completed", "")}, false, true, time.Time{}, runOutcome{Done: true}},
		{"script failed", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term(3, "Error", "oops\n")}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: 3, Tail: "oops\n"}},
		{"timeout", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded", Message: "too long", ContainerStatuses: term(137, "Error", "half")}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Reason: "Timeout", Message: "too long", Tail: "half"}},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "disk"}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "Evicted", Message: "disk"}},
		{"rejected by kubelet", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu"}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "OutOfcpu"}},
		{"preempted", corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}, ContainerStatuses: term(137, "Error", "")}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "Disrupted"}},
		{"never ran", corev1.PodStatus{Phase: corev1.PodFailed}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "ContainerNotRun"}},
		{"image pull", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting("ErrImagePull")}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "ErrImagePull", Message: pullMessage("registry.example/img:1", "m")}}, // the image from the status: the informer trims the spec
		{"secret missing", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waitingMsg("CreateContainerConfigError", `secret "s" not found`)}, false, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "CreateContainerConfigError", Message: `secret "s" not found`}},
		{"kubelet's secret cache not synced", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waitingMsg("CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition")}, false, true, time.Time{}, runOutcome{ExitCode: -1}},
		{"deleted by someone", corev1.PodStatus{Phase: corev1.PodRunning}, true, true, time.Time{}, runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "PodDeleted", Message: "the run's pod was deleted before the run ended"}},
		{"node briefly NotReady", corev1.PodStatus{Phase: corev1.PodRunning}, false, false, now.Add(-10 * time.Second), runOutcome{ExitCode: -1}},
		{"node NotReady", corev1.PodStatus{Phase: corev1.PodRunning}, false, false, now.Add(-2 * time.Minute), runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "NodeNotReady", Message: "the node has not been Ready for 2m0s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: c.status}
			if c.deleting {
				pod.DeletionTimestamp = &metav1.Time{Time: now}
			}
			if d := cmp.Diff(c.want, podOutcome(pod, c.ready, c.notReadySince, now, DefaultNotReadyGrace)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestTrimNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{"x": "y", stateAnnotation("fix"): `{"hash":"h","phase":"Running","since":"2026-11-21T00:00:00Z"}`,
				rerunAnnotation("fix"): "h", ignoreAnnotation("fix-2"): "alice", "fix." + v1alpha1.AnnotationPrefix + "/other": "dropped"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}, PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, Message: "kubelet is ready"},
				{Type: "example.com/Other", Status: corev1.ConditionTrue},
				{Type: nodescript.ConditionType("fix"), Status: corev1.ConditionTrue, Reason: v1alpha1.ConditionApplied, Message: "spec h succeeded here", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Time{Time: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}},
			},
			Images: []corev1.ContainerImage{{Names: []string{"busybox"}}},
		},
	}
	got, _ := trimNode(n)
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{stateAnnotation("fix"): n.Annotations[stateAnnotation("fix")], rerunAnnotation("fix"): "h", ignoreAnnotation("fix-2"): "alice"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: n.Spec.Taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}},
			{Type: nodescript.ConditionType("fix"), Status: corev1.ConditionTrue, Reason: v1alpha1.ConditionApplied, Message: "spec h succeeded here", LastTransitionTime: metav1.Time{Time: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}},
		}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("trimNode (-want +got):\n%s", d)
	}
	// A heartbeat changes nothing the watcher keeps.
	n2 := n.DeepCopy()
	n2.ResourceVersion = "8"
	n2.Status.Conditions[1].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
	n2.Status.Conditions[3].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
	got2, _ := trimNode(n2)
	if !sameNode(got.(*corev1.Node), got2.(*corev1.Node)) {
		t.Error("a heartbeat-only update is seen as a change")
	}
	n2.Labels = map[string]string{"a": "c"}
	got3, _ := trimNode(n2)
	if sameNode(got.(*corev1.Node), got3.(*corev1.Node)) {
		t.Error("a label change is not seen")
	}
}

func TestParseNodeScripts(t *testing.T) {
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: a}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	if got, err := nodescripts.ParseNodeScripts(strings.NewReader(good + "---\n" + strings.Replace(good, "name: a", "name: b", 1))); err != nil || len(got) != 2 {
		t.Fatalf("two good documents: %v, %d", err, len(got))
	}
	for _, c := range []struct{ doc, want string }{
		{strings.Replace(good, "kind: NodeScript", "kind: Pod", 1), "kind NodeScript"},
		{strings.Replace(good, "name: a", "name: "+strings.Repeat("a", 64), 1), "metadata.name"},
		{good + "  bogus: 1\n", "bogus"},
		{strings.Replace(good, "metadata: {name: a}", "metadata: {}", 1), "metadata.name"},
		{good + "  rollout: {maxConcurrency: \"0%\"}\n", "spec.rollout.maxConcurrency"},
		{good + "  backend: {name: runtime}\n", "spec.backend.name"},
		{good + "  backend: {name: nsenter, profile: sysadmin}\n", "spec.backend.profile"},
		{"", "no NodeScript"},
	} {
		if _, err := nodescripts.ParseNodeScripts(strings.NewReader(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseNodeScripts(%q) = %v; want an error naming %q", c.doc, err, c.want)
		}
	}
}

func TestPodOutcomeNotReadyGrace(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if out := podOutcome(pod, false, now.Add(-10*time.Second), now, 5*time.Second); !out.Done || !out.Infrastructure || out.Reason != "NodeNotReady" {
		t.Errorf("NotReady 10s with a 5s grace: %+v; want an infrastructure failure", out)
	}
	if out := podOutcome(pod, false, now.Add(-10*time.Second), now, DefaultNotReadyGrace); out.Done {
		t.Errorf("NotReady 10s with the default grace: %+v; want still running", out)
	}
	if _, err := New(Options{Client: fake.NewSimpleClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), NotReadyGrace: -time.Second}); err == nil || !strings.Contains(err.Error(), "NotReadyGrace") {
		t.Errorf("negative NotReadyGrace: %v; want an error naming it", err)
	}
}

func TestRebooted(t *testing.T) {
	killed := runOutcome{Done: true, ExitCode: 137, Tail: "half"}
	for _, c := range []struct {
		name          string
		out           runOutcome
		start, now    string
		wantInfra     bool
		wantUnchanged bool
	}{
		{"killed by a reboot", killed, "a", "b", true, false},
		{"unknown container status after a reboot", runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "ContainerNotRun"}, "a", "b", true, false},
		{"unknown container status, no reboot", runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "ContainerNotRun"}, "a", "a", true, true},
		{"image pull failure after a reboot", runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "ErrImagePull"}, "a", "b", true, true},
		{"evicted, then a reboot", runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "Evicted"}, "a", "b", true, true},
		{"runtime lost the container (exit 255)", runOutcome{Done: true, ExitCode: 255}, "a", "b", true, false},
		{"boot ID unknown now", killed, "a", "", false, true},
		{"script failed, no reboot", killed, "a", "a", false, true},
		{"boot ID not recorded (older watcher)", killed, "", "b", false, true},
		{"succeeded before the reboot", runOutcome{Done: true}, "a", "b", false, true},
		{"still running", runOutcome{ExitCode: -1}, "a", "b", false, true},
		{"timeout across a reboot", runOutcome{Done: true, ExitCode: -1, Reason: "Timeout"}, "a", "b", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rebooted(c.out, c.start, c.now)
			if c.wantUnchanged {
				if d := cmp.Diff(c.out, got); d != "" {
					t.Errorf("changed (-want +got):\n%s", d)
				}
				return
			}
			if got.Infrastructure != c.wantInfra || got.Reason != "NodeRebooted" || !got.Done || got.ExitCode != -1 || !strings.Contains(got.Message, c.start+" -> "+c.now) {
				t.Errorf("got %+v; want an infrastructure failure NodeRebooted", got)
			}
		})
	}
}

func TestTrimNodeBootID(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b1", KernelVersion: "6"}}}
	a, _ := trimNode(n)
	if got := a.(*corev1.Node).Status.NodeInfo; got.BootID != "b1" || got.KernelVersion != "" {
		t.Errorf("trimmed nodeInfo %+v; want only the boot ID", got)
	}
	n.Status.NodeInfo.BootID = "b2"
	b, _ := trimNode(n)
	if sameNode(a.(*corev1.Node), b.(*corev1.Node)) {
		t.Error("a reboot (new boot ID) is not seen as a change")
	}
}

// spec.configMapEnv: a keyed entry is a configMapKeyRef variable, a whole
// ConfigMap an envFrom source, on the pod's container, for every action.
func TestRunPodConfigMapEnv(t *testing.T) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}, Spec: v1alpha1.NodeScriptSpec{Script: "true", VerifyScript: "true",
		ConfigMapEnv: []v1alpha1.ConfigMapEnvSource{{ConfigMap: "settings", Key: "LEVEL"}, {ConfigMap: "all"}}}}
	for _, action := range []string{v1alpha1.ActionRun, v1alpha1.ActionVerify} {
		pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: action, Attempt: 1, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		wantVar := corev1.EnvVar{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "LEVEL"}}}
		if !slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool { return cmp.Equal(v, wantVar) }) {
			t.Errorf("%s: env %+v lacks %+v", action, c.Env, wantVar)
		}
		wantFrom := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "all"}}}}
		if diff := cmp.Diff(wantFrom, c.EnvFrom); diff != "" {
			t.Errorf("%s: envFrom (-want +got):\n%s", action, diff)
		}
	}
}

// TestRunImage: a NodeScript without spec.backend.image runs its backend's
// default image, resolved by the watcher (RunImage) rather than left to
// the backend; and a pod that Options.Backends builds with any other image
// is refused, so the watcher runs only the image the admission policy
// checked.
func TestRunImage(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ backend, image, want string }{
		{"", "", "busybox:stable"},
		{"debugpod", "", "busybox:stable"},
		{"nsenter", "", "nodeexec.local/agent:0.2.0"},
		{"nsenter", "registry.example/tools/agent:1", "registry.example/tools/agent:1"},
	} {
		ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "img"}, Spec: v1alpha1.NodeScriptSpec{
			Script: "true", Backend: v1alpha1.BackendSpec{Name: c.backend, Image: c.image}}}
		got, err := runImage(&ns.Spec)
		if err != nil || got != c.want {
			t.Errorf("RunImage(backend %q, image %q) = %q, %v; want %q", c.backend, c.image, got, err, c.want)
		}
		if o := nodeBackendOptions(ns); o.Image != c.want {
			t.Errorf("NodeBackendOptions(backend %q, image %q).Image = %q, want %q", c.backend, c.image, o.Image, c.want)
		}
		for _, b := range []struct {
			name  string
			build func(backends.NodeOptions) (nodeexec.Backend, error)
			ok    bool
		}{
			{"default", nil, true},
			{"another image", func(o backends.NodeOptions) (nodeexec.Backend, error) {
				o.Image = "evil.example/root:1"
				return backends.NewNode(o)
			}, false},
		} {
			w, err := New(Options{Client: fake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Backends: b.build})
			if err != nil {
				t.Fatal(err)
			}
			pod, err := w.runPod(runPodSpec{NodeScript: ns, Node: "n1", Action: v1alpha1.ActionRun, Attempt: 1, Now: now})
			switch {
			case b.ok && (err != nil || pod.Spec.Containers[0].Image != c.want):
				t.Errorf("backend %q image %q, %s Backends: pod %v, %v; want image %s", c.backend, c.image, b.name, pod, err, c.want)
			case !b.ok && (err == nil || !strings.Contains(err.Error(), "runs evil.example/root:1, not "+c.want)):
				t.Errorf("backend %q image %q, %s Backends: %v; want a refusal naming both images", c.backend, c.image, b.name, err)
			}
		}
	}
	if _, err := runImage(&v1alpha1.NodeScriptSpec{Backend: v1alpha1.BackendSpec{Name: "ssh"}}); err == nil || !strings.Contains(err.Error(), "spec.backend.name") {
		t.Errorf("RunImage(ssh): %v, want an error naming spec.backend.name", err)
	}
}
