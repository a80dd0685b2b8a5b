package v1alpha1

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateForecast checks spec.rollout.windowMargin: 0 or more.
func validateForecast(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	if m := s.Rollout.WindowMargin; m != nil && m.Duration < 0 {
		return field.ErrorList{field.Invalid(spec.Child("rollout", "windowMargin"), m.Duration.String(),
			"must be 0 or more, e.g. 5m (the slack kept before the maintenance window closes; leave it out for 5m)")}
	}
	return nil
}
