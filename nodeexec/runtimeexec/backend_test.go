package runtimeexec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/internal/kubeexpand"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

const cid = "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func spec() PodSpec {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return PodSpec{
		PodBase: PodBase{
			Node:             "node-a",
			Name:             "nodeexec-node-a-x2x2x",
			Namespace:        "default",
			RunID:            "run1234567",
			Image:            agent.DefaultImage,
			ImagePullPolicy:  corev1.PullIfNotPresent,
			ImagePullSecrets: []string{"regcred"},
			Requests:         corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			Now:              now,
			Deadline:         now.Add(90*time.Second + 500*time.Millisecond),
			Command:          []string{"cat", "/etc/hostname"},
		},
		Target: "apps/web-0/nginx",
	}
}

// TestBuildPodGolden pins the whole agent pod. Run with -update after a deliberate change.
func TestBuildPodGolden(t *testing.T) {
	for name, mutate := range map[string]func(*PodSpec){
		"pod-default":  func(*PodSpec) {},
		"pod-priority": func(s *PodSpec) { s.PriorityClassName = "system-node-critical"; s.ImagePullSecrets = nil },
		"pod-env":      func(s *PodSpec) { s.Env = map[string]string{"B": "2", "A": "pa$$word $(HOME)"} },
	} {
		t.Run(name, func(t *testing.T) {
			s := spec()
			mutate(&s)
			pod, err := BuildPod(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, name+".yaml", pod)
		})
	}
}

// TestBuildPodProperties checks, independently of the golden file, what the
// agent needs and what every nodeexec object carries.
func TestBuildPodProperties(t *testing.T) {
	pod, err := BuildPod(spec())
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	checks := map[string]bool{
		"hostPID":                       pod.Spec.HostPID,
		"no hostNetwork":                !pod.Spec.HostNetwork,
		"no hostIPC":                    !pod.Spec.HostIPC,
		"privileged":                    c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged,
		"pinned":                        pod.Spec.NodeName == "node-a",
		"tolerates all":                 len(pod.Spec.Tolerations) == 1 && pod.Spec.Tolerations[0].Operator == corev1.TolerationOpExists,
		"managed-by":                    pod.Labels[nodeexec.LabelManagedBy] == nodeexec.ManagedByValue,
		"run-id":                        pod.Labels[nodeexec.LabelRunID] == "run1234567",
		"deadline annotation":           pod.Annotations[nodeexec.AnnotationDeadline] == "2026-11-21T12:01:30Z",
		"activeDeadlineSeconds rounded": pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds == 91,
		"target annotation":             pod.Annotations[AnnotationTarget] == "apps/web-0/nginx",
		"host root volume":              len(pod.Spec.Volumes) == 1 && pod.Spec.Volumes[0].HostPath != nil && pod.Spec.Volumes[0].HostPath.Path == "/",
		"mounted read-only at /host":    len(c.VolumeMounts) == 1 && c.VolumeMounts[0].MountPath == agent.HostRoot && c.VolumeMounts[0].ReadOnly,
		"no env":                        len(c.Env) == 0,
		"no token":                      pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken,
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: not so in %+v", name, pod)
		}
	}
	for name, mutate := range map[string]func(*PodSpec){
		"no target": func(s *PodSpec) { s.Target = "" },
		"no node":   func(s *PodSpec) { s.Node = "" },
		"deadline":  func(s *PodSpec) { s.Deadline = s.Now },
	} {
		s := spec()
		mutate(&s)
		if _, err := BuildPod(s); err == nil {
			t.Errorf("%s: BuildPod accepted %+v", name, s)
		}
	}
}

func targetPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "apps"},
		Spec:       corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "sidecar"}, {Name: "nginx"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "sidecar", ContainerID: "containerd://aaaaaaaaaaaa", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			{Name: "nginx", ContainerID: cid, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
}

func TestContainerTarget(t *testing.T) {
	node, name, id, err := ContainerTarget(targetPod(), "nginx")
	if err != nil || node != "node-b" || name != "nginx" || id != cid {
		t.Errorf("ContainerTarget = %q %q %q %v", node, name, id, err)
	}
	p := targetPod()
	p.Annotations = map[string]string{"kubectl.kubernetes.io/default-container": "nginx"}
	if _, name, _, err := ContainerTarget(p, ""); err != nil || name != "nginx" {
		t.Errorf("default-container annotation: %q %v", name, err)
	}
	if _, _, _, err := ContainerTarget(targetPod(), ""); !errors.Is(err, nodeexec.ErrContainerNotRunning) || !strings.Contains(err.Error(), "CrashLoopBackOff") {
		t.Errorf("first container waiting: %v; want nodeexec.ErrContainerNotRunning naming the reason", err)
	}
	if _, _, _, err := ContainerTarget(targetPod(), "db"); !errors.Is(err, nodeexec.ErrContainerNotFound) || !strings.Contains(err.Error(), "sidecar, nginx") {
		t.Errorf("unknown container: %v", err)
	}
	p = targetPod()
	p.DeletionTimestamp = &metav1.Time{}
	if _, _, _, err := ContainerTarget(p, "nginx"); !errors.Is(err, nodeexec.ErrContainerNotRunning) {
		t.Errorf("deleting: %v", err)
	}
}

func newTestBackend(t *testing.T, client *fake.Clientset, mutate func(*Options)) (*Backend, error) {
	t.Helper()
	o := Options{PodOptions: podexec.PodOptions{Client: client, Config: &rest.Config{Host: "https://127.0.0.1:1"}}, PodNamespace: "apps", Pod: "web-0", Container: "nginx"}
	if mutate != nil {
		mutate(&o)
	}
	return New(o)
}

func TestNewInvalid(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no client":         {func(o *Options) { o.Client = nil }, "Options.Client is nil"},
		"no config":         {func(o *Options) { o.Config = nil }, "Options.Config is nil"},
		"no pod":            {func(o *Options) { o.Pod = "" }, "Options.Pod is empty"},
		"bad pod":           {func(o *Options) { o.Pod = "Web_0" }, `invalid pod name "Web_0"`},
		"bad namespace":     {func(o *Options) { o.Namespace = "Not_NS" }, `invalid namespace "Not_NS"`},
		"bad pod namespace": {func(o *Options) { o.PodNamespace = "a/b" }, `invalid namespace "a/b"`},
		"unknown ns":        {func(o *Options) { o.Namespaces = []nsenter.Namespace{"netz"} }, `unknown namespace "netz"`},
		"empty ns":          {func(o *Options) { o.Namespaces = []nsenter.Namespace{} }, "Namespaces is empty"},
		"relative endpoint": {func(o *Options) { o.RuntimeEndpoints = []string{"run/x.sock"} }, "absolute socket path"},
		"pull policy":       {func(o *Options) { o.ImagePullPolicy = "Sometimes" }, "invalid image pull policy"},
		"run id":            {func(o *Options) { o.RunID = "a b" }, "invalid RunID"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := newTestBackend(t, fake.NewClientset(), tt.mutate)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPodAndAgentCommand(t *testing.T) {
	client := fake.NewClientset(targetPod())
	b, err := newTestBackend(t, client, func(o *Options) {
		o.NameSuffix = func() string { return "x2x2x" }
		o.Namespace = "nodeexec-ops"
		o.RuntimeEndpoints = []string{"/run/k.sock"}
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "runtime" || len(b.RunID()) != 10 {
		t.Errorf("Name %q RunID %q", b.Name(), b.RunID())
	}
	node, argv, err := b.AgentCommand(t.Context(), nodeexec.Request{Command: []string{"id"}, Env: map[string]string{"SECRETNAME": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	// The variables are not on the command line (the exec request's URL, the
	// node's process list): the agent reads them from its environment.
	want := []string{agent.Path, "agent", "container-exec", "--container-id", cid, "--runtime-endpoint", "/run/k.sock", "--namespaces", "mnt,uts,ipc,net,pid", "--env-from-agent", "--", "id"}
	if diff := cmp.Diff(want, argv); diff != "" || node != "node-b" {
		t.Errorf("node %q argv (-want +got):\n%s", node, diff)
	}
	if joined := strings.Join(argv, " "); strings.Contains(joined, "s3cr3t-value") || strings.Contains(joined, "SECRETNAME") {
		t.Errorf("a -e variable is on the agent's command line: %q", argv)
	}
	// The pod path: in the agent container's environment, as ExecEnvVar.
	envPod, err := b.Pod(nodeexec.Request{Node: "node-b", Command: []string{"id"}, Timeout: time.Minute, Env: map[string]string{"SECRETNAME": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := envPod.Spec.Containers[0]; len(c.Env) != 1 || c.Env[0].Name != agent.ExecEnvVar || c.Env[0].Value != `{"SECRETNAME":"s3cr3t-value"}` ||
		strings.Contains(strings.Join(c.Command, " "), "s3cr3t-value") || strings.Contains(envPod.Annotations[nodeexec.AnnotationCommand], "s3cr3t-value") {
		t.Errorf("agent pod for a request with Env: env %+v, command %q, annotations %v", c.Env, c.Command, envPod.Annotations)
	}
	// What the kubelet's expansion of the container's environment gives the agent.
	nasty := map[string]string{"A": "pa$$word", "B": "$(HOME)", "C": "x$(Y)z$$"}
	envPod, err = b.Pod(nodeexec.Request{Node: "node-b", Command: []string{"id"}, Timeout: time.Minute, Env: nasty})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := agent.DecodeExecEnv(kubeexpand.Expand(envPod.Spec.Containers[0].Env[0].Value, map[string]string{"HOME": "/root", "Y": "y"})); err != nil || !cmp.Equal(got, nasty) {
		t.Errorf("after the kubelet's expansion the agent reads %v (%v), want %v", got, err, nasty)
	}
	if _, _, err := b.AgentCommand(t.Context(), nodeexec.Request{Node: "node-a", Command: []string{"id"}}); !errors.Is(err, nodeexec.ErrWrongNode) {
		t.Errorf("wrong node: %v", err)
	}
	pod, err := b.Pod(nodeexec.Request{Node: "node-b", Command: []string{"id"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "nodeexec-ops" || pod.Name != "nodeexec-node-b-x2x2x" || pod.Spec.Containers[0].Image != agent.DefaultImage ||
		pod.Annotations[AnnotationTarget] != "apps/web-0/nginx" || *pod.Spec.ActiveDeadlineSeconds != 90 {
		t.Errorf("pod = %+v", pod)
	}
}

// TestRunRefusesBeforeCreating: a missing pod or a container that does not
// run creates nothing.
func TestRunRefusesBeforeCreating(t *testing.T) {
	stopped := targetPod()
	stopped.Status.ContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
	for name, tt := range map[string]struct {
		objects []*corev1.Pod
		pod     string
		want    error
	}{
		"missing":     {nil, "web-0", nodeexec.ErrPodNotFound},
		"not running": {[]*corev1.Pod{stopped}, "web-0", nodeexec.ErrContainerNotRunning},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			for _, p := range tt.objects {
				if _, err := client.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			client.ClearActions()
			b, err := newTestBackend(t, client, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}})
			if !errors.Is(err, tt.want) || res.ExitCode != -1 || res.Backend != Name {
				t.Errorf("Run = %+v, %v; want %v", res, err, tt.want)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("unexpected API call %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// TestPodDescriber: Pod(req) (what --explain prints) needs the target
// container's name, from Options.Container or from the last Target; it
// makes no API call.
func TestPodDescriber(t *testing.T) {
	req := nodeexec.Request{Node: "node-b", Command: []string{"id"}, Timeout: time.Minute}
	tp := targetPod()
	tp.Annotations = map[string]string{"kubectl.kubernetes.io/default-container": "nginx"}
	b, err := newTestBackend(t, fake.NewClientset(tp), func(o *Options) { o.Container = "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pod(req); err == nil || !strings.Contains(err.Error(), "not known yet") {
		t.Errorf("Pod before TargetNode, no Options.Container: %v, want an error saying the container is not known", err)
	}
	if node, err := b.TargetNode(t.Context()); err != nil || node != "node-b" {
		t.Fatalf("TargetNode = %q, %v", node, err)
	}
	pod, err := b.Pod(req)
	if err != nil || pod.Annotations[AnnotationTarget] != "apps/web-0/nginx" || pod.Spec.NodeName != "node-b" {
		t.Errorf("Pod after TargetNode: %v, %v", pod, err)
	}
	b, err = newTestBackend(t, fake.NewClientset(), nil) // Options.Container "nginx"
	if err != nil {
		t.Fatal(err)
	}
	if pod, err := b.Pod(req); err != nil || pod.Annotations[AnnotationTarget] != "apps/web-0/nginx" {
		t.Errorf("Pod with Options.Container: %v, %v", pod, err)
	}
}
