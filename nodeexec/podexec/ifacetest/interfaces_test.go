// Package ifacetest checks, over every backend of the module, which optional
// interfaces of package nodeexec each one implements, against a table, and
// that each backend that creates a pod describes it (nodeexec.PodDescriber,
// what `nodeexec run --explain` prints).
package ifacetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
)

// implements lists the optional interfaces b itself implements (not through
// Wrapper), by name.
func implements(b nodeexec.Backend) []string {
	var out []string
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	_, ok := b.(nodeexec.Preflighter)
	add(ok, "Preflighter")
	_, ok = b.(nodeexec.PreflightSkipper)
	add(ok, "PreflightSkipper")
	_, ok = b.(nodeexec.Requirer)
	add(ok, "Requirer")
	_, ok = b.(nodeexec.PodDescriber)
	add(ok, "PodDescriber")
	_, ok = b.(nodeexec.CompletionPodBuilder)
	add(ok, "CompletionPodBuilder")
	_, ok = b.(nodeexec.CommandDescriber)
	add(ok, "CommandDescriber")
	_, ok = b.(nodeexec.TargetResolver)
	add(ok, "TargetResolver")
	_, ok = b.(nodeexec.HostRooter)
	add(ok, "HostRooter")
	_, ok = b.(nodeexec.Wrapper)
	add(ok, "Wrapper")
	_, ok = b.(nodeexec.Explainer)
	add(ok, "Explainer")
	return out
}

// target is a running pod on node-b for the backends that target a container.
func target() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "apps"},
		Spec:       corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "nginx", ContainerID: "containerd://0123", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}},
	}
}

func TestBackendInterfaces(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	nsenter := func(t *testing.T) nodeexec.Backend {
		b, err := nsenterpod.New(nsenterpod.Options{PodOptions: nsenterpod.PodOptions{Client: fake.NewClientset(), Config: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		new  func(t *testing.T) nodeexec.Backend
		// want are the optional interfaces the backend implements itself.
		want []string
		// createsPod: the backend creates a pod per run, which Pod describes
		// (directly or through what it wraps).
		createsPod bool
	}{
		{
			name: debugpod.Name,
			new: func(t *testing.T) nodeexec.Backend {
				b, err := debugpod.New(debugpod.Options{PodOptions: debugpod.PodOptions{Client: fake.NewClientset(), Config: cfg}})
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			want:       []string{"Preflighter", "Requirer", "PodDescriber", "CompletionPodBuilder", "CommandDescriber", "HostRooter"},
			createsPod: true,
		},
		{
			name:       nsenterpod.Name,
			new:        nsenter,
			want:       []string{"Preflighter", "Requirer", "PodDescriber", "CompletionPodBuilder", "CommandDescriber"},
			createsPod: true,
		},
		{
			name: runtimeexec.Name,
			new: func(t *testing.T) nodeexec.Backend {
				b, err := runtimeexec.New(runtimeexec.Options{PodOptions: runtimeexec.PodOptions{Client: fake.NewClientset(target()), Config: cfg}, PodNamespace: "apps", Pod: "web-0"})
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			want:       []string{"Preflighter", "Requirer", "PodDescriber", "TargetResolver"},
			createsPod: true,
		},
		{
			name: ephemeral.Name,
			new: func(t *testing.T) nodeexec.Backend {
				b, err := ephemeral.New(ephemeral.Options{Client: fake.NewClientset(target()), Config: cfg, Namespace: "apps", Pod: "web-0"})
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			want: []string{"Preflighter", "Requirer", "TargetResolver"},
		},
		{
			name: "resident",
			new: func(t *testing.T) nodeexec.Backend {
				b, err := resident.Wrap(nsenter(t), resident.WrapOptions{Client: fake.NewClientset(), Config: cfg})
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			want:       []string{"Preflighter", "PreflightSkipper", "Wrapper", "Explainer"},
			createsPod: true, // the wrapped nsenter backend's, where no agent runs
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.new(t)
			if diff := cmp.Diff(tt.want, implements(b)); diff != "" {
				t.Errorf("optional interfaces (-want +got):\n%s", diff)
			}
			// As --explain does: the node of a backend that targets a
			// container is its target pod's (TargetNode), then the pod.
			req := nodeexec.Request{Node: "node-a", Command: []string{"true"}, Timeout: time.Minute}
			if r, ok := nodeexec.As[nodeexec.TargetResolver](b); ok {
				node, err := r.TargetNode(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				req.Node = node
			}
			d, ok := nodeexec.As[nodeexec.PodDescriber](b)
			if ok != tt.createsPod {
				t.Fatalf("PodDescriber found: %v, want %v", ok, tt.createsPod)
			}
			if !ok {
				return
			}
			pod, err := d.Pod(req)
			if err != nil {
				t.Fatalf("Pod: %v", err)
			}
			// One container; debugpod's run without a TTY has the agent container first.
			want := 1
			if b.Name() == debugpod.Name {
				want = 2
			}
			if pod.Spec.NodeName != req.Node || pod.Labels[nodeexec.LabelRunID] == "" || len(pod.Spec.Containers) != want {
				t.Errorf("Pod: node %q, labels %v, %d containers, want %d", pod.Spec.NodeName, pod.Labels, len(pod.Spec.Containers), want)
			}
		})
	}
}
