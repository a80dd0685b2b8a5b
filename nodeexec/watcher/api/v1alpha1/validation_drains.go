package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateDrains checks spec.maintenance.drain.onTimeout and
// spec.maintenance.maxBlockedNodes (m is spec.maintenance, at path mp).
func validateDrains(m *MaintenanceSpec, mp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m == nil {
		return nil
	}
	if m.MaxBlockedNodes < 0 {
		errs = append(errs, field.Invalid(mp.Child("maxBlockedNodes"), m.MaxBlockedNodes, "must be 0 or more (0: never halt on blocked drains)"))
	} else if m.MaxBlockedNodes > 0 && m.Drain == nil {
		errs = append(errs, field.Invalid(mp.Child("maxBlockedNodes"), m.MaxBlockedNodes, "counts nodes whose drain is blocked: set maintenance.drain too, or leave maxBlockedNodes out"))
	}
	d := m.Drain
	if d == nil || d.OnTimeout == "" {
		return errs
	}
	p := mp.Child("drain", "onTimeout")
	switch {
	case !slices.Contains(DrainOnTimeouts(), d.OnTimeout):
		errs = append(errs, field.NotSupported(p, d.OnTimeout, DrainOnTimeouts()))
	case d.OnTimeout == DrainOnTimeoutForce && d.Timeout == nil:
		// Force deletes pods past their PodDisruptionBudgets: an explicit
		// opt-in, with the time it waits for them given explicitly too.
		errs = append(errs, field.Required(mp.Child("drain", "timeout"), "onTimeout: Force deletes the pods left after the timeout, ignoring their PodDisruptionBudgets: give the timeout explicitly (e.g. 10m)"))
	case d.OnTimeout == DrainOnTimeoutForce && d.Timeout.Duration == 0:
		errs = append(errs, field.Invalid(mp.Child("drain", "timeout"), "0s", "onTimeout: Force needs a positive timeout (0 waits forever, so nothing would be forced), e.g. 10m"))
	}
	return errs
}
