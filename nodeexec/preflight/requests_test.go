package preflight

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheckRequests(t *testing.T) {
	node := func(name, cpu, mem string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
		if cpu != "" {
			n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return n
	}
	reqs := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	nodes := []*corev1.Node{node("a", "4", "8Gi"), node("b", "2", "1Gi"), node("c", "", "")}
	tests := []struct {
		name     string
		requests corev1.ResourceList
		want     string // the error; "" for none
	}{
		{"fits every node", reqs("10m", "16Mi"), ""},
		{"exactly the allocatable", reqs("2", "1Gi"), ""},
		{"no requests", nil, ""},
		{"cpu above the smaller node", reqs("3", "16Mi"), `cpu request 3 is more than node "b" can give (allocatable cpu: 2)`},
		{"cpu above every node: the first named", reqs("1000000", "16Mi"), `cpu request 1M is more than node "a" can give (allocatable cpu: 4)`},
		{"memory", reqs("10m", "2Gi"), `memory request 2Gi is more than node "b" can give (allocatable memory: 1Gi)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRequests(nodes, tt.requests)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var tl *RequestTooLargeError
			if err == nil || err.Error() != tt.want || !errors.As(err, &tl) {
				t.Fatalf("error %v, want a *RequestTooLargeError %q", err, tt.want)
			}
		})
	}
}
