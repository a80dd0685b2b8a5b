package v1alpha1

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePostComplete checks spec.rollout.postCompleteDelay (0 or more)
// and spec.postCompleteLabels (each key a qualified label name, each value
// a label value), naming the field and the fix.
func validatePostComplete(spec *field.Path, s *NodeScriptSpec) field.ErrorList {
	var errs field.ErrorList
	if d := s.Rollout.PostCompleteDelay; d != nil && d.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("rollout", "postCompleteDelay"), d.Duration.String(), "must be 0 or more, e.g. 5m (the pause after a node succeeded before the next starts)"))
	}
	p := spec.Child("postCompleteLabels")
	keys := make([]string, 0, len(s.PostCompleteLabels))
	for k := range s.PostCompleteLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors in a stable order
	for _, k := range keys {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Key(k), k, "not a label key: "+strings.Join(msgs, "; ")+" (e.g. example.com/kernel-upgraded)"))
		}
		if v := s.PostCompleteLabels[k]; len(validation.IsValidLabelValue(v)) > 0 {
			errs = append(errs, field.Invalid(p.Key(k), v, "not a label value: "+strings.Join(validation.IsValidLabelValue(v), "; ")+" (e.g. \"true\" or 6.8.0)"))
		}
	}
	return errs
}
