package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateWindowMargin(t *testing.T) {
	for _, tc := range []struct {
		margin time.Duration
		bad    bool
	}{{0, false}, {5 * time.Minute, false}, {-time.Second, true}} {
		s := &NodeScriptSpec{Rollout: RolloutSpec{WindowMargin: &metav1.Duration{Duration: tc.margin}}}
		errs := validateForecast(s, nil)
		if (len(errs) > 0) != tc.bad {
			t.Errorf("windowMargin %s: got %v, want refused %t", tc.margin, errs, tc.bad)
		}
		if tc.bad && !strings.Contains(errs.ToAggregate().Error(), "rollout.windowMargin") {
			t.Errorf("windowMargin %s: error %v does not name the field", tc.margin, errs)
		}
	}
	if errs := ValidateDurationSyntax([]byte("spec:\n  rollout:\n    windowMargin: soon\n")); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "spec.rollout.windowMargin") {
		t.Errorf("windowMargin: soon: got %v, want refused naming spec.rollout.windowMargin", errs)
	}
}
