package v1alpha1

import (
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// HookNames are the hooks of spec.hooks, in the order a rollout meets them.
func HookNames() []string { return []string{"preRollout", "preNode", "postNode", "postRollout"} }

// HookByName is spec.hooks' hook called name (one of HookNames), nil when
// not set.
func (h *Hooks) HookByName(name string) *HookJob {
	if h == nil {
		return nil
	}
	switch name {
	case "preRollout":
		return h.PreRollout
	case "preNode":
		return h.PreNode
	case "postNode":
		return h.PostNode
	case "postRollout":
		return h.PostRollout
	}
	return nil
}

// validateHooks checks spec.hooks: each hook's Job template has at least
// one container, each with a name and an image; its pod's restartPolicy is
// Never or OnFailure (empty: Never); no container sets NODESCRIPT_* itself
// (the watcher sets them); the timeout is at least 1s. Unknown fields of
// the template are refused by nodeexec apply's strict decoding.
func validateHooks(spec *field.Path, s *NodeScriptSpec) field.ErrorList {
	var errs field.ErrorList
	for _, name := range HookNames() {
		h := s.Hooks.HookByName(name)
		if h == nil {
			continue
		}
		p := spec.Child("hooks", name)
		if t := h.Timeout; t != nil && t.Duration < time.Second {
			errs = append(errs, field.Invalid(p.Child("timeout"), t.Duration.String(), "must be at least 1s, e.g. 5m (leave it out for the default "+DefaultHookTimeout.String()+")"))
		}
		pod := p.Child("template", "spec", "template", "spec")
		ps := &h.Template.Spec.Template.Spec
		if len(ps.Containers) == 0 {
			errs = append(errs, field.Required(pod.Child("containers"), "give the hook Job at least one container, e.g. {name: hook, image: busybox:stable, command: [sh, -c, ...]}"))
		}
		for i, c := range ps.Containers {
			cp := pod.Child("containers").Index(i)
			if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
				errs = append(errs, field.Invalid(cp.Child("name"), c.Name, "want a DNS label, e.g. hook: "+strings.Join(msgs, "; ")))
			}
			if strings.TrimSpace(c.Image) == "" {
				errs = append(errs, field.Required(cp.Child("image"), "name the image the hook runs"))
			}
			for j, e := range c.Env {
				if strings.HasPrefix(e.Name, "NODESCRIPT_") {
					errs = append(errs, field.Invalid(cp.Child("env").Index(j).Child("name"), e.Name, "the watcher sets the NODESCRIPT_* variables; give the variable another name"))
				}
			}
		}
		errs = append(errs, validateHookPodSecurity(pod, h)...)
		switch ps.RestartPolicy {
		case "", corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure:
		default:
			errs = append(errs, field.NotSupported(pod.Child("restartPolicy"), ps.RestartPolicy, []string{string(corev1.RestartPolicyNever), string(corev1.RestartPolicyOnFailure)}))
		}
		if c := h.Template.Spec.Completions; c != nil && *c != 1 {
			errs = append(errs, field.Invalid(p.Child("template", "spec", "completions"), *c, "a hook is one run: leave completions out or set 1"))
		}
		if h.Template.Spec.Suspend != nil && *h.Template.Spec.Suspend {
			errs = append(errs, field.Invalid(p.Child("template", "spec", "suspend"), true, fmt.Sprintf("a suspended hook Job never runs and would hold the %s step: leave suspend out", name)))
		}
	}
	return errs
}

// hookPodSecurity is the Pod Security Standards' evaluator (the checks the
// API server's PodSecurity admission runs), made once.
var hookPodSecurity = sync.OnceValues(func() (psapolicy.Evaluator, error) {
	return psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
})

// validateHookPodSecurity refuses a hook Job whose pod would not meet the
// Pod Security Standards' baseline level (latest version): hooks are steps
// in the cluster (API calls, a database switchover), never on the node, so
// no privileged container, no host namespaces, hostPath volumes, host
// ports or added capabilities beyond baseline's. The NodeScript's script is
// what runs on the node, under the admission policy's image rule; a hook
// Job must not be a second, unchecked way there. Each violation is named
// as Pod Security names it, on the template's pod spec.
func validateHookPodSecurity(pod *field.Path, h *HookJob) field.ErrorList {
	ev, err := hookPodSecurity()
	if err != nil {
		return field.ErrorList{field.InternalError(pod, err)}
	}
	var errs field.ErrorList
	t := &h.Template.Spec.Template
	for _, r := range ev.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelBaseline, Version: psaapi.LatestVersion()}, &t.ObjectMeta, &t.Spec) {
		if !r.Allowed {
			errs = append(errs, field.Forbidden(pod, fmt.Sprintf("a hook Job's pod must meet Pod Security baseline (hooks run in the cluster, not on the node): %s (%s)", r.ForbiddenReason, r.ForbiddenDetail)))
		}
	}
	return errs
}
