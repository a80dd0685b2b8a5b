package nsenter

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func spec() PodSpec {
	return PodSpec{
		Node:             "node-a",
		Name:             "nodeexec-node-a-x2x2x",
		Namespace:        "default",
		RunID:            "run1234567",
		Image:            DefaultAgentImage,
		ImagePullPolicy:  corev1.PullIfNotPresent,
		ImagePullSecrets: []string{"regcred"},
		Requests:         podexec.DefaultRequests(),
		HostNetwork:      true,
		HostIPC:          true,
		Env:              map[string]string{"B": "2", "A": "1"},
		Now:              testNow,
		Deadline:         testNow.Add(90*time.Second + 500*time.Millisecond),
		Command:          AgentArgv(DefaultNamespaces(), []string{"sh", "-c", "hostname"}),
	}
}

// TestBuildPodGolden pins the whole pod: node-shell's hostPID privileged pod
// plus what nodeexec adds. Run with -update after a deliberate change.
func TestBuildPodGolden(t *testing.T) {
	tests := map[string]func(*PodSpec){
		"default": func(*PodSpec) {},
		"podnetwork": func(s *PodSpec) {
			s.HostNetwork, s.HostIPC = false, false
			s.ImagePullSecrets, s.Env = nil, nil
			s.PriorityClassName = "system-node-critical"
			s.Command = AgentArgv([]Namespace{Mount, UTS, IPC, PID}, []string{"ip", "addr"})
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec()
			mutate(&s)
			pod, err := BuildPod(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, "pod-"+name+".yaml", pod)
		})
	}
}

// TestBuildPodProperties checks, independently of the golden files, what the
// mechanism needs: hostPID, privileged, pinned to the node, every taint
// tolerated, the holder, and nodeexec's labels, annotations and deadline.
func TestBuildPodProperties(t *testing.T) {
	for _, host := range []bool{true, false} {
		s := spec()
		s.HostNetwork, s.HostIPC = host, host
		pod, err := BuildPod(s)
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		if !pod.Spec.HostPID || pod.Spec.HostNetwork != host || pod.Spec.HostIPC != host {
			t.Errorf("host=%v: hostPID %v hostNetwork %v hostIPC %v", host, pod.Spec.HostPID, pod.Spec.HostNetwork, pod.Spec.HostIPC)
		}
		if c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) {
			t.Errorf("container is not privileged: %+v", c.SecurityContext)
		}
		if pod.Spec.NodeName != "node-a" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Spec.Tolerations[0].Key != "" {
			t.Errorf("nodeName %q tolerations %+v: want pinned to node-a, tolerating everything", pod.Spec.NodeName, pod.Spec.Tolerations)
		}
		if diff := cmp.Diff([]string{AgentPath, "agent", "hold", "--duration", "91s"}, c.Command); diff != "" {
			t.Errorf("holder (-want +got):\n%s", diff)
		}
		if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 91 {
			t.Errorf("activeDeadlineSeconds = %v, want 91 (90.5 s rounded up)", pod.Spec.ActiveDeadlineSeconds)
		}
		if !cmp.Equal(pod.Labels, map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: "run1234567"}) {
			t.Errorf("labels = %v", pod.Labels)
		}
		if pod.Annotations[nodeexec.AnnotationNode] != "node-a" || pod.Annotations[nodeexec.AnnotationDeadline] != "2026-11-21T12:01:30Z" ||
			!strings.Contains(pod.Annotations[nodeexec.AnnotationCommand], `"agent","nsenter"`) {
			t.Errorf("annotations = %v", pod.Annotations)
		}
		if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
			t.Error("the pod mounts a service account token")
		}
		if len(pod.Spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("volumes %v mounts %v: the agent needs none (it enters the node's mount namespace)", pod.Spec.Volumes, c.VolumeMounts)
		}
	}
}

func TestBuildPodInvalid(t *testing.T) {
	tests := map[string]struct {
		mutate func(*PodSpec)
		want   string
	}{
		"no node":       {func(s *PodSpec) { s.Node = "" }, "Node is empty"},
		"no image":      {func(s *PodSpec) { s.Image = "" }, "Image is empty"},
		"no run id":     {func(s *PodSpec) { s.RunID = "" }, "RunID must be set"},
		"past deadline": {func(s *PodSpec) { s.Deadline = s.Now }, "Deadline must be after Now"},
		"bad secret":    {func(s *PodSpec) { s.ImagePullSecrets = []string{"Bad_Name"} }, `image pull secret "Bad_Name"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec()
			tt.mutate(&s)
			_, err := BuildPod(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestAgentArgv(t *testing.T) {
	got := AgentArgv([]Namespace{Mount, Net}, []string{"sh", "-c", "echo --namespaces"})
	want := []string{"/usr/local/bin/nodeexec", "agent", "nsenter", "--target", "1", "--namespaces", "mnt,net", "--", "sh", "-c", "echo --namespaces"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func newTestBackend(t *testing.T, mutate func(*Options)) (*Backend, error) {
	t.Helper()
	o := Options{Client: fake.NewClientset(), Config: &rest.Config{Host: "https://127.0.0.1:1"}}
	if mutate != nil {
		mutate(&o)
	}
	return New(o)
}

func TestNewDefaults(t *testing.T) {
	b, err := newTestBackend(t, func(o *Options) { o.NameSuffix = func() string { return "x2x2x" } })
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "nsenter" || len(b.RunID()) != 10 {
		t.Errorf("Name %q RunID %q", b.Name(), b.RunID())
	}
	if diff := cmp.Diff(DefaultNamespaces(), b.Namespaces()); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	pod, err := b.Pod(nodeexec.Request{Node: "node-a", Script: "hostname", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if pod.Namespace != "default" || pod.Name != "nodeexec-node-a-x2x2x" || c.Image != "nodeexec.local/agent:"+AgentVersion || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("namespace %q name %q image %q policy %q", pod.Namespace, pod.Name, c.Image, c.ImagePullPolicy)
	}
	if !pod.Spec.HostNetwork || !pod.Spec.HostIPC || !pod.Spec.HostPID {
		t.Errorf("defaults: hostNetwork %v hostIPC %v hostPID %v, want all true", pod.Spec.HostNetwork, pod.Spec.HostIPC, pod.Spec.HostPID)
	}
	if !c.Resources.Requests.Cpu().Equal(resource.MustParse("10m")) || !c.Resources.Requests.Memory().Equal(resource.MustParse("16Mi")) {
		t.Errorf("requests = %v", c.Resources.Requests)
	}
	if diff := cmp.Diff([]string{AgentPath, "agent", "hold", "--duration", "90s"}, c.Command); diff != "" {
		t.Errorf("holder for a 1m timeout (-want +got):\n%s", diff)
	}
	want := []string{AgentPath, "agent", "nsenter", "--target", "1", "--namespaces", "mnt,uts,ipc,net,pid", "--", "sh", "-c", "hostname"}
	if diff := cmp.Diff(want, b.Argv(nodeexec.Request{Script: "hostname"})); diff != "" {
		t.Errorf("script argv (-want +got):\n%s", diff)
	}
}

func TestNewOptions(t *testing.T) {
	b, err := newTestBackend(t, func(o *Options) {
		o.Namespace = "ops"
		o.Namespaces = []Namespace{Mount, UTS}
		o.HostNetwork, o.HostIPC = ptr.To(false), ptr.To(true)
		o.Image = "registry.example/nodeexec-agent:0.1.0"
		o.ImagePullPolicy = corev1.PullAlways
		o.RunID = "myrun"
	})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := b.Pod(nodeexec.Request{Node: "n", Command: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "ops" || pod.Spec.HostNetwork || !pod.Spec.HostIPC || pod.Labels[nodeexec.LabelRunID] != "myrun" ||
		pod.Spec.Containers[0].Image != "registry.example/nodeexec-agent:0.1.0" || pod.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("options not applied: %+v", pod)
	}
	if got := b.Argv(nodeexec.Request{Command: []string{"id"}}); strings.Join(got, " ") != AgentPath+" agent nsenter --target 1 --namespaces mnt,uts -- id" {
		t.Errorf("argv = %q", got)
	}
}

func TestNewInvalid(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no client":         {func(o *Options) { o.Client = nil }, "Options.Client is nil"},
		"no config":         {func(o *Options) { o.Config = nil }, "Options.Config is nil"},
		"bad k8s namespace": {func(o *Options) { o.Namespace = "Not_A_Namespace" }, `invalid namespace "Not_A_Namespace"`},
		"empty namespaces":  {func(o *Options) { o.Namespaces = []Namespace{} }, "Options.Namespaces: empty"},
		"unknown namespace": {func(o *Options) { o.Namespaces = []Namespace{Mount, "netz"} }, "netz"},
		"all in the list":   {func(o *Options) { o.Namespaces = []Namespace{"all"} }, `unknown namespace "all"`},
		"empty name":        {func(o *Options) { o.Namespaces = []Namespace{Mount, ""} }, `no namespace in ""`},
		"repeated":          {func(o *Options) { o.Namespaces = []Namespace{Net, Net} }, `"net" is listed twice`},
		"pull policy":       {func(o *Options) { o.ImagePullPolicy = "Sometimes" }, `invalid image pull policy "Sometimes"`},
		"run id":            {func(o *Options) { o.RunID = "not a label" }, `invalid RunID "not a label"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := newTestBackend(t, tt.mutate)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: (%v, %v), want an error containing %q", b, err, tt.want)
			}
		})
	}
}

// TestRunValidatesBeforeCreating: a bad request creates nothing.
func TestRunValidatesBeforeCreating(t *testing.T) {
	client := fake.NewClientset()
	b, err := New(Options{Client: client, Config: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []nodeexec.Request{
		{Command: []string{"id"}},
		{Node: "n"},
		{Node: "n", Command: []string{"id"}, Script: "id"},
	} {
		res, err := b.Run(t.Context(), req)
		if err == nil || res.ExitCode != -1 || res.Backend != Name {
			t.Errorf("Run(%+v) = %+v, %v; want an error and exit -1", req, res, err)
		}
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d API calls made for invalid requests: %v", n, client.Actions())
	}
}
