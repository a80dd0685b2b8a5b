package nsenterpod

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

func newTestBackend(t *testing.T, mutate func(*Options)) (*Backend, error) {
	t.Helper()
	o := Options{PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{Host: "https://127.0.0.1:1"}}}
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
	if diff := cmp.Diff(nsenter.DefaultNamespaces(), b.o.Namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	pod, err := b.Pod(nodeexec.Request{Node: "node-a", Script: "hostname", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if pod.Namespace != "default" || pod.Name != "nodeexec-node-a-x2x2x" || c.Image != "nodeexec.local/agent:"+agent.Version || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("namespace %q name %q image %q policy %q", pod.Namespace, pod.Name, c.Image, c.ImagePullPolicy)
	}
	if !pod.Spec.HostNetwork || !pod.Spec.HostIPC || !pod.Spec.HostPID {
		t.Errorf("defaults: hostNetwork %v hostIPC %v hostPID %v, want all true", pod.Spec.HostNetwork, pod.Spec.HostIPC, pod.Spec.HostPID)
	}
	if !c.Resources.Requests.Cpu().Equal(resource.MustParse("10m")) || !c.Resources.Requests.Memory().Equal(resource.MustParse("16Mi")) {
		t.Errorf("requests = %v", c.Resources.Requests)
	}
	if diff := cmp.Diff([]string{agent.Path, "agent", "hold", "--duration", "90s"}, c.Command); diff != "" {
		t.Errorf("holder for a 1m timeout (-want +got):\n%s", diff)
	}
	want := []string{agent.Path, "agent", "nsenter", "--target", "1", "--namespaces", "mnt,uts,ipc,net,pid", "--", "sh", "-c", "hostname"}
	if diff := cmp.Diff(want, b.Argv(nodeexec.Request{Script: "hostname"})); diff != "" {
		t.Errorf("script argv (-want +got):\n%s", diff)
	}
}

func TestNewOptions(t *testing.T) {
	b, err := newTestBackend(t, func(o *Options) {
		o.Namespace = "ops"
		o.Namespaces = []nsenter.Namespace{nsenter.Mount, nsenter.UTS}
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
	if got := b.Argv(nodeexec.Request{Command: []string{"id"}}); strings.Join(got, " ") != agent.Path+" agent nsenter --target 1 --namespaces mnt,uts -- id" {
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
		"empty namespaces":  {func(o *Options) { o.Namespaces = []nsenter.Namespace{} }, "Options.Namespaces: empty"},
		"unknown namespace": {func(o *Options) { o.Namespaces = []nsenter.Namespace{nsenter.Mount, "netz"} }, "netz"},
		"all in the list":   {func(o *Options) { o.Namespaces = []nsenter.Namespace{"all"} }, `unknown namespace "all"`},
		"empty name":        {func(o *Options) { o.Namespaces = []nsenter.Namespace{nsenter.Mount, ""} }, `no namespace in ""`},
		"repeated":          {func(o *Options) { o.Namespaces = []nsenter.Namespace{nsenter.Net, nsenter.Net} }, `"net" is listed twice`},
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
	b, err := New(Options{PodOptions: podexec.PodOptions{Client: client, Config: &rest.Config{Host: "https://127.0.0.1:1"}}})
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

// TestAgentCommandEnv: a resident agent gets req.Env through its listener
// (--env-from-agent on the command line, no value on it); SecretEnv, which
// only a pod's spec can take from its Secret, is unsupported there.
func TestAgentCommandEnv(t *testing.T) {
	b, err := newTestBackend(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	node, argv, err := b.AgentCommand(t.Context(), nodeexec.Request{Node: "n1", Command: []string{"sh"}, TTY: true, Env: map[string]string{"TERM": "xterm-256color"}})
	line := strings.Join(argv, " ")
	if err != nil || node != "n1" || !strings.HasPrefix(line, agent.Path+" agent nsenter "+agent.EnvFromAgentFlag+" ") || strings.Contains(line, "xterm") || !agent.NsenterEnvFromAgent(argv) {
		t.Errorf("Env: node %q argv %q err %v", node, argv, err)
	}
	_, argv, err = b.AgentCommand(t.Context(), nodeexec.Request{Node: "n1", Command: []string{"sh"}})
	if err != nil || slices.Contains(argv, agent.EnvFromAgentFlag) || agent.NsenterEnvFromAgent(argv) {
		t.Errorf("no Env: argv %q err %v", argv, err)
	}
	_, _, err = b.AgentCommand(t.Context(), nodeexec.Request{Node: "n1", Command: []string{"id"}, SecretEnv: []nodeexec.SecretEnv{{Secret: "s", Key: "k"}}})
	if !errors.Is(err, nodeexec.ErrUnsupported) {
		t.Errorf("SecretEnv: %v, want ErrUnsupported", err)
	}
}
