package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestValidateBudgetFields(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*NodeScript)
		want   string
	}{
		"budget and priority": {func(n *NodeScript) {
			n.Spec.MaintenanceBudget, n.Spec.Priority, n.Spec.Exclusive = "shared.pool-a", 10, true
		}, ""},
		"budget not a name":     {func(n *NodeScript) { n.Spec.MaintenanceBudget = "Shared_Budget" }, `spec.maintenanceBudget: Invalid value: "Shared_Budget": name a MaintenanceBudget`},
		"priority too high":     {func(n *NodeScript) { n.Spec.Priority = MaxPriority + 1 }, "spec.priority: Invalid value: 1000001: want -1000000 to 1000000"},
		"priority too low":      {func(n *NodeScript) { n.Spec.Priority = MinPriority - 1 }, "spec.priority: Invalid value: -1000001"},
		"priority at the bound": {func(n *NodeScript) { n.Spec.Priority = MinPriority }, ""},
	} {
		ns := valid()
		tc.mutate(ns)
		got := Validate(ns).ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: %v, want valid", name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", name, got, tc.want)
		}
	}
}

func TestValidateBudget(t *testing.T) {
	ok := func() *MaintenanceBudget {
		return &MaintenanceBudget{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: MaintenanceBudgetSpec{MaxUnavailable: intstr.FromInt32(1)}}
	}
	for name, tc := range map[string]struct {
		mutate func(*MaintenanceBudget)
		want   string
	}{
		"count":        {func(*MaintenanceBudget) {}, ""},
		"percent":      {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromString("25%") }, ""},
		"zero":         {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromInt32(0) }, "spec.maxUnavailable: Required value"},
		"negative":     {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromInt32(-1) }, "spec.maxUnavailable: Invalid value: -1: must be 1 or more"},
		"zero percent": {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromString("0%") }, "want a percentage from 1% to 100%"},
		"over 100%":    {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromString("101%") }, "want a percentage from 1% to 100%"},
		"not a number": {func(b *MaintenanceBudget) { b.Spec.MaxUnavailable = intstr.FromString("two") }, `spec.maxUnavailable: Invalid value: "two"`},
		"bad selector": {func(b *MaintenanceBudget) {
			b.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
		}, "spec.nodeSelector: Invalid value"},
		"no name":      {func(b *MaintenanceBudget) { b.Name = "" }, "metadata.name: Required value"},
		"name not DNS": {func(b *MaintenanceBudget) { b.Name = "Workers" }, `metadata.name: Invalid value: "Workers"`},
	} {
		b := ok()
		tc.mutate(b)
		got := ValidateBudget(b).ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: %v, want valid", name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", name, got, tc.want)
		}
	}
}
