package watcher

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// BenchmarkCountBudget1000 is one count of a MaintenanceBudget over 1,000
// nodes, every one cordoned and held by a NodeScript under maintenance (the
// worst case of a rollout at maxConcurrency 100%): what each reconcile of a
// NodeScript naming the budget adds (BenchmarkWatcherSafety measures the
// whole rollout on SIMULATED nodes).
func BenchmarkCountBudget1000(b *testing.B) {
	const n = 1000
	budget := &v1alpha1.MaintenanceBudget{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: v1alpha1.MaintenanceBudgetSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"type": "kwok"}},
			MaxUnavailable: intstr.FromString("100%")}}
	nodes := make([]*corev1.Node, n)
	holders := map[string][]holder{}
	for i := range nodes {
		name := fmt.Sprintf("kwok-node-%d", i)
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"type": "kwok"}},
			Spec:   corev1.NodeSpec{Unschedulable: true},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		holders[name] = []holder{{Name: "bench", Disrupts: true}}
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := countBudget(budget, nodes, budgetSources{}, holders)
		if err != nil || c.Unavailable() != n {
			b.Fatalf("%d unavailable, %v", c.Unavailable(), err)
		}
	}
}
