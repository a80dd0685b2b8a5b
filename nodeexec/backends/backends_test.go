package backends

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestNewNode(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	req := nodeexec.Request{Node: "n1", Script: "echo $(HOME)", Timeout: time.Minute}
	for _, tt := range []struct {
		o           NodeOptions
		wantName    string
		wantCommand string
		hostNetwork bool
	}{
		{NodeOptions{}, "debugpod", "chroot /host sh -c echo $$(HOME)", true},
		{NodeOptions{Name: "debugpod", Profile: "baseline", Namespaces: []string{"mnt"}}, "debugpod", "sh -c echo $$(HOME)", false},
		{NodeOptions{Name: "nsenter", Namespaces: []string{"mnt", "pid"}}, "nsenter", "/usr/local/bin/nodeexec agent nsenter --target 1 --namespaces mnt,pid -- sh -c echo $$(HOME)", true},
		{NodeOptions{Name: "nsenter", HostNetwork: ptr.To(false), HostIPC: ptr.To(false)}, "nsenter", "/usr/local/bin/nodeexec agent nsenter --target 1 --namespaces mnt,uts,ipc,net,pid -- sh -c echo $$(HOME)", false},
	} {
		tt.o.Client, tt.o.Namespace, tt.o.RunID = fake.NewClientset(), "ops", "hash1"
		b, err := NewNode(tt.o)
		if err != nil {
			t.Fatalf("NewNode(%+v): %v", tt.o, err)
		}
		if b.Name() != tt.wantName {
			t.Errorf("NewNode(%+v) is %s, want %s", tt.o, b.Name(), tt.wantName)
		}
		cp, ok := nodeexec.As[nodeexec.CompletionPodBuilder](b)
		if !ok {
			t.Fatalf("%s does not implement CompletionPodBuilder", b.Name())
		}
		pod, err := cp.CompletionPod(req, "run-1", now)
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		if got := strings.Join(c.Command, " "); got != tt.wantCommand {
			t.Errorf("%s: command %q, want %q (the request itself, $(VAR) escaped)", b.Name(), got, tt.wantCommand)
		}
		if pod.Name != "run-1" || pod.Namespace != "ops" || pod.Spec.NodeName != "n1" || pod.Labels[nodeexec.LabelRunID] != "hash1" ||
			c.TerminationMessagePolicy != "FallbackToLogsOnError" || pod.Spec.HostNetwork != tt.hostNetwork {
			t.Errorf("%s: pod %s/%s node %q run ID %q policy %q hostNetwork %v", b.Name(), pod.Namespace, pod.Name, pod.Spec.NodeName,
				pod.Labels[nodeexec.LabelRunID], c.TerminationMessagePolicy, pod.Spec.HostNetwork)
		}
		if _, err := cp.CompletionPod(nodeexec.Request{Script: "true"}, "run-2", now); err == nil || !strings.Contains(err.Error(), "Request.Node is empty") {
			t.Errorf("%s: CompletionPod without a node: %v", b.Name(), err)
		}
	}
	for _, o := range []NodeOptions{{Name: "runtime"}, {Name: "ephemeral"}, {Name: "ssh"}} {
		o.Client = fake.NewClientset()
		if _, err := NewNode(o); err == nil || !strings.Contains(err.Error(), "want one of debugpod, nsenter") {
			t.Errorf("NewNode(%q): %v, want a refusal listing the node backends", o.Name, err)
		}
	}
	if _, err := NewNode(NodeOptions{Name: "nsenter", Client: fake.NewClientset(), Namespaces: []string{"netz"}}); err == nil || !strings.Contains(err.Error(), "netz") {
		t.Errorf("unknown namespace: %v", err)
	}
}

// TestDefaultImage: DefaultImage(name) is the image NewNode's backend puts
// in its pod when NodeOptions.Image is empty, for every node backend (the
// admission policy's defaults are pinned to DefaultImage).
func TestDefaultImage(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, name := range append([]string{""}, NodeNames()...) {
		want, err := DefaultImage(name)
		if err != nil {
			t.Fatalf("DefaultImage(%q): %v", name, err)
		}
		b, err := NewNode(NodeOptions{Name: name, Client: fake.NewClientset()})
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := nodeexec.As[nodeexec.CompletionPodBuilder](b)
		pod, err := cp.CompletionPod(nodeexec.Request{Node: "n1", Script: "true"}, "run-1", now)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pod.Spec.Containers {
			if c.Image != want {
				t.Errorf("backend %q runs %s without an image, DefaultImage says %s", name, c.Image, want)
			}
		}
	}
	if _, err := DefaultImage("runtime"); err == nil || !strings.Contains(err.Error(), "want one of debugpod, nsenter") {
		t.Errorf("DefaultImage(runtime): %v, want a refusal listing the node backends", err)
	}
}
