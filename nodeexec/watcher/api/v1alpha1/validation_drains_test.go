package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// spec.maintenance.drain.onTimeout and spec.maintenance.maxBlockedNodes:
// each bad value refused naming its field and the fix.
func TestValidateDrains(t *testing.T) {
	drain := func(mutate func(*MaintenanceSpec)) func(*NodeScript) {
		return func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{}}
			mutate(n.Spec.Maintenance)
		}
	}
	minute := &metav1.Duration{Duration: time.Minute}
	tests := map[string]struct {
		mutate func(*NodeScript)
		want   string // "" = valid
	}{
		"retry":              {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout = DrainOnTimeoutRetry }), ""},
		"skip":               {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout = DrainOnTimeoutSkip }), ""},
		"force with timeout": {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout, m.Drain.Timeout = DrainOnTimeoutForce, minute }), ""},
		"bad onTimeout": {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout = "Evict" }),
			`spec.maintenance.drain.onTimeout: Unsupported value: "Evict": supported values: "Retry", "Skip", "Force"`},
		"lowercase onTimeout": {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout = "skip" }), `spec.maintenance.drain.onTimeout: Unsupported value: "skip"`},
		"force without timeout": {drain(func(m *MaintenanceSpec) { m.Drain.OnTimeout = DrainOnTimeoutForce }),
			"spec.maintenance.drain.timeout: Required value: onTimeout: Force deletes the pods left"},
		"force with timeout 0": {drain(func(m *MaintenanceSpec) {
			m.Drain.OnTimeout, m.Drain.Timeout = DrainOnTimeoutForce, &metav1.Duration{}
		}), "spec.maintenance.drain.timeout: Invalid value: \"0s\": onTimeout: Force needs a positive timeout"},
		"maxBlockedNodes":          {drain(func(m *MaintenanceSpec) { m.MaxBlockedNodes = 2 }), ""},
		"negative maxBlockedNodes": {drain(func(m *MaintenanceSpec) { m.MaxBlockedNodes = -1 }), "spec.maintenance.maxBlockedNodes: Invalid value: -1: must be 0 or more"},
		"maxBlockedNodes without drain": {func(n *NodeScript) { n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, MaxBlockedNodes: 1} },
			"spec.maintenance.maxBlockedNodes: Invalid value: 1: counts nodes whose drain is blocked: set maintenance.drain too"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := valid()
			tc.mutate(n)
			errs := Validate(n)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}
