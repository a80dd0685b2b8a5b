package v1alpha1

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateBudgetFields checks spec.maintenanceBudget (a DNS subdomain, the
// name of a MaintenanceBudget) and spec.priority (MinPriority to
// MaxPriority).
func validateBudgetFields(spec *field.Path, s *NodeScriptSpec) field.ErrorList {
	var errs field.ErrorList
	if b := s.MaintenanceBudget; b != "" {
		if msgs := validation.IsDNS1123Subdomain(b); len(msgs) > 0 {
			errs = append(errs, field.Invalid(spec.Child("maintenanceBudget"), b, "name a MaintenanceBudget (a DNS subdomain: lower-case letters, digits, '-' and '.'): "+strings.Join(msgs, "; ")))
		}
	}
	if p := s.Priority; p < MinPriority || p > MaxPriority {
		errs = append(errs, field.Invalid(spec.Child("priority"), p, fmt.Sprintf("want %d to %d (higher starts first)", MinPriority, MaxPriority)))
	}
	return errs
}

// ValidateBudget reports what is wrong with a MaintenanceBudget: its name
// (a DNS subdomain), spec.nodeSelector (a valid label selector) and
// spec.maxUnavailable (a count of 1 or more, or 1% to 100%). Each error
// names its field and the fix.
func ValidateBudget(b *MaintenanceBudget) field.ErrorList {
	var errs field.ErrorList
	if b.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "name the MaintenanceBudget"))
	} else if msgs := validation.IsDNS1123Subdomain(b.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), b.Name, strings.Join(msgs, "; ")))
	}
	spec := field.NewPath("spec")
	if _, err := metav1.LabelSelectorAsSelector(&b.Spec.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("nodeSelector"), b.Spec.NodeSelector, err.Error()))
	}
	mu := b.Spec.MaxUnavailable
	if mu.Type == 0 && mu.IntVal == 0 {
		errs = append(errs, field.Required(spec.Child("maxUnavailable"), "give a count of 1 or more, or a percentage such as 20%"))
	} else {
		errs = append(errs, countOrPercent(spec.Child("maxUnavailable"), mu, 1)...)
	}
	return errs
}
