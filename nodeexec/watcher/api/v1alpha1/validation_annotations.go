package v1alpha1

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateAnnotationGates checks spec.hooks.beforeRun and afterRun (p is
// spec.hooks): at least one annotation each, every key a qualified name,
// none twice, none in the watcher's own domain, and a positive timeout.
func validateAnnotationGates(p *field.Path, h *Hooks) field.ErrorList {
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	for _, g := range []struct {
		name string
		gate *AnnotationGate
	}{{"beforeRun", h.BeforeRun}, {"afterRun", h.AfterRun}} {
		if g.gate == nil {
			continue
		}
		gp := p.Child(g.name)
		if len(g.gate.Annotations) == 0 {
			errs = append(errs, field.Required(gp.Child("annotations"), "name at least one annotation key that another controller sets to \"true\" on the node, e.g. example.com/db-stepped-down (or leave "+g.name+" out)"))
		}
		if len(g.gate.Annotations) > 16 {
			errs = append(errs, field.TooMany(gp.Child("annotations"), len(g.gate.Annotations), 16))
		}
		seen := map[string]bool{}
		for i, k := range g.gate.Annotations {
			ap := gp.Child("annotations").Index(i)
			prefix, _, _ := strings.Cut(k, "/")
			switch msgs := validation.IsQualifiedName(k); {
			case len(msgs) > 0:
				errs = append(errs, field.Invalid(ap, k, "not an annotation key: "+strings.Join(msgs, "; ")+" (e.g. example.com/db-stepped-down)"))
			case seen[k]:
				errs = append(errs, field.Duplicate(ap, k))
			case strings.Contains(k, "/") && (prefix == "nodeexec.io" || strings.HasSuffix(prefix, ".nodeexec.io")):
				errs = append(errs, field.Invalid(ap, k, "in the watcher's own domain (nodeexec.io), which another controller must not set: use your own, e.g. example.com/ready"))
			}
			seen[k] = true
		}
		if t := g.gate.Timeout; t != nil && t.Duration <= 0 {
			errs = append(errs, field.Invalid(gp.Child("timeout"), t.Duration.String(), "must be positive, e.g. 30m (or left out for no timeout)"))
		}
	}
	return errs
}
