package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Backends are the values of spec.backend.name: the backends that reach a
// node (runtime and ephemeral reach a container, and are for one-shot runs).
func Backends() []string { return []string{"debugpod", "nsenter"} }

// Validate checks a NodeScript as `nodeexec apply` and the watcher see it,
// beyond what the CRD's OpenAPI schema can express. Each error names its
// field (e.g. spec.rollout.maxConcurrency).
func Validate(ns *NodeScript) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	s := &ns.Spec
	if ns.Name != "" {
		if msgs := validation.IsDNS1123Label(ns.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), ns.Name, strings.Join(msgs, "; ")+" (the name labels the watcher's pods, so at most 63 characters)"))
		}
	}
	if _, err := metav1.LabelSelectorAsSelector(&s.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("nodeSelector"), s.NodeSelector, err.Error()))
	}
	if strings.TrimSpace(s.Script) == "" {
		errs = append(errs, field.Required(spec.Child("script"), "give the script to run on each node"))
	}
	if s.OnFailure.Rollback && strings.TrimSpace(s.RollbackScript) == "" {
		errs = append(errs, field.Required(spec.Child("rollbackScript"), "onFailure.rollback is set: give the script that undoes spec.script"))
	}
	if s.OnFailure.Drain && !s.OnFailure.Cordon {
		errs = append(errs, field.Invalid(spec.Child("onFailure", "drain"), true, "drain needs cordon: set onFailure.cordon too"))
	}
	if b := s.Backend.Name; b != "" && !slices.Contains(Backends(), b) {
		errs = append(errs, field.NotSupported(spec.Child("backend", "name"), b, Backends()))
	}
	if ns := s.Backend.Namespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, field.Invalid(spec.Child("backend", "namespace"), ns, strings.Join(msgs, "; ")))
		}
	}
	if p := s.Backend.Profile; p != "" && s.Backend.Name != "" && s.Backend.Name != "debugpod" {
		errs = append(errs, field.Invalid(spec.Child("backend", "profile"), p, "a profile applies to the debugpod backend only"))
	}
	for i, n := range s.Backend.Namespaces {
		if !slices.Contains([]string{"mnt", "uts", "ipc", "net", "pid", "cgroup", "user"}, n) {
			errs = append(errs, field.NotSupported(spec.Child("backend", "namespaces").Index(i), n, []string{"mnt", "uts", "ipc", "net", "pid", "cgroup", "user"}))
		}
	}
	for i, r := range s.Backend.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(spec.Child("backend", "imagePullSecrets").Index(i).Child("name"), r.Name,
				strings.Join(msgs, "; ")+": name a docker-registry secret in spec.backend.namespace"))
		}
	}
	if s.Timeout != nil && s.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(spec.Child("timeout"), s.Timeout.Duration.String(), "must be positive"))
	}
	r := spec.Child("rollout")
	if s.Rollout.Canary != nil && *s.Rollout.Canary < 0 {
		errs = append(errs, field.Invalid(r.Child("canary"), *s.Rollout.Canary, "must be 0 or more"))
	}
	if p := s.Rollout.Promotion; p != "" && p != PromotionAutomatic && p != PromotionManual {
		errs = append(errs, field.NotSupported(r.Child("promotion"), p, []string{PromotionAutomatic, PromotionManual}))
	}
	if to := s.Rollout.PromoteTo; to != "" && to != "all" {
		if _, err := labels.Parse(to); err != nil {
			errs = append(errs, field.Invalid(r.Child("promoteTo"), to, "want \"all\" or a label selector: "+err.Error()))
		}
	}
	for i, b := range s.Rollout.Batches {
		errs = append(errs, countOrPercent(r.Child("batches").Index(i), b, 1)...)
	}
	if c := s.Rollout.MaxConcurrency; c != nil {
		errs = append(errs, countOrPercent(r.Child("maxConcurrency"), *c, 1)...)
	}
	if m := s.Rollout.MaxFailures; m != nil {
		errs = append(errs, countOrPercent(r.Child("maxFailures"), *m, 0)...)
	}
	if l := s.Retry.Limit; l != nil && *l < 0 {
		errs = append(errs, field.Invalid(spec.Child("retry", "limit"), *l, "must be 0 or more"))
	}
	if t := s.StartupTaint; t != nil && t.Key == "" {
		errs = append(errs, field.Required(spec.Child("startupTaint", "key"), "name the taint new nodes register with"))
	}
	return errs
}

// countOrPercent accepts a count >= lo or a percentage from lo% to 100%.
func countOrPercent(p *field.Path, v intstr.IntOrString, lo int) field.ErrorList {
	if v.Type == intstr.Int {
		if int(v.IntVal) < lo {
			return field.ErrorList{field.Invalid(p, v.IntVal, fmt.Sprintf("must be %d or more, or a percentage such as 20%%", lo))}
		}
		return nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v.StrVal, "want a number or a percentage such as 20%")}
	}
	if n < lo || n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, fmt.Sprintf("want a percentage from %d%% to 100%%", lo))}
	}
	return nil
}

// ValidatePromotion refuses to promote a halted rollout: a halt means the
// error budget or a canary said stop; fix the spec (which starts a new
// rollout) instead.
func ValidatePromotion(ns *NodeScript, to string) error {
	if meta := findCondition(ns.Status.Conditions, ConditionHalted); meta != nil && meta.Status == metav1.ConditionTrue {
		return fmt.Errorf("nodescript %q is halted (%s: %s): promotion refused; change the spec to start a new rollout", ns.Name, meta.Reason, meta.Message)
	}
	if to != "all" {
		if _, err := labels.Parse(to); err != nil {
			return fmt.Errorf("--to %q: want \"all\" or a label selector: %w", to, err)
		}
	}
	return nil
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// SpecHash identifies what a node runs: the scripts, the backend (but not
// its image pull secrets, which are credentials) and the timeout, not the
// rollout controls (changing the pace reruns nothing). A
// node annotated with this hash is not run again; a changed hash runs again.
// The result is the first 16 hex digits of a SHA-256.
func SpecHash(s *NodeScriptSpec) string {
	backend := s.Backend
	backend.ImagePullSecrets = nil
	b, _ := json.Marshal(struct {
		Script, VerifyScript, RollbackScript string
		Backend                              BackendSpec
		Timeout                              *metav1.Duration
	}{s.Script, s.VerifyScript, s.RollbackScript, backend, s.Timeout})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}
