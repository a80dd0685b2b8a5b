package v1alpha1

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidateHooks(t *testing.T) {
	hook := func(mutate func(*HookJob)) *HookJob {
		h := &HookJob{Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "hook", Image: "busybox:stable"}},
		}}}}}
		if mutate != nil {
			mutate(h)
		}
		return h
	}
	for name, c := range map[string]struct {
		hooks *Hooks
		want  []string // nil = valid
	}{
		"all ok": {&Hooks{PreNode: hook(nil), PostNode: hook(func(h *HookJob) { h.Template.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }),
			PreRollout: hook(func(h *HookJob) { h.Timeout = &metav1.Duration{Duration: time.Minute} }), PostRollout: hook(nil)}, nil},
		"no containers": {&Hooks{PreNode: hook(func(h *HookJob) { h.Template.Spec.Template.Spec.Containers = nil })},
			[]string{"spec.hooks.preNode.template.spec.template.spec.containers: Required value"}},
		"no image": {&Hooks{PostNode: hook(func(h *HookJob) { h.Template.Spec.Template.Spec.Containers[0].Image = "" })},
			[]string{"spec.hooks.postNode.template.spec.template.spec.containers[0].image: Required value"}},
		"bad name": {&Hooks{PostNode: hook(func(h *HookJob) { h.Template.Spec.Template.Spec.Containers[0].Name = "Hook_1" })},
			[]string{"spec.hooks.postNode.template.spec.template.spec.containers[0].name: Invalid value"}},
		"restart always": {&Hooks{PreRollout: hook(func(h *HookJob) { h.Template.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways })},
			[]string{"spec.hooks.preRollout.template.spec.template.spec.restartPolicy: Unsupported value"}},
		"short timeout": {&Hooks{PostRollout: hook(func(h *HookJob) { h.Timeout = &metav1.Duration{Duration: time.Millisecond} })},
			[]string{"spec.hooks.postRollout.timeout: Invalid value"}},
		"own env": {&Hooks{PreNode: hook(func(h *HookJob) {
			h.Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NODESCRIPT_NODE", Value: "x"}}
		})}, []string{"spec.hooks.preNode.template.spec.template.spec.containers[0].env[0].name"}},
		"completions": {&Hooks{PreNode: hook(func(h *HookJob) { h.Template.Spec.Completions = ptr.To[int32](3) })},
			[]string{"spec.hooks.preNode.template.spec.completions"}},
		"suspended": {&Hooks{PreNode: hook(func(h *HookJob) { h.Template.Spec.Suspend = ptr.To(true) })},
			[]string{"spec.hooks.preNode.template.spec.suspend"}},
		"privileged": {&Hooks{PreNode: hook(func(h *HookJob) {
			h.Template.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		})}, []string{"spec.hooks.preNode.template.spec.template.spec: Forbidden", "Pod Security baseline", "privileged"}},
		"host namespaces and hostPath": {&Hooks{PostNode: hook(func(h *HookJob) {
			h.Template.Spec.Template.Spec.HostPID = true
			h.Template.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		})}, []string{"spec.hooks.postNode.template.spec.template.spec: Forbidden", "host namespaces", "hostPath volumes"}},
		"added capability": {&Hooks{PreRollout: hook(func(h *HookJob) {
			h.Template.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		})}, []string{"spec.hooks.preRollout.template.spec.template.spec: Forbidden", "SYS_ADMIN"}},
		"baseline-allowed settings": {&Hooks{PreNode: hook(func(h *HookJob) {
			h.Template.Spec.Template.Spec.ServiceAccountName = "pg-operator"
			h.Template.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
			h.Template.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		})}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			ns.Spec.Hooks = c.hooks
			got := Validate(ns).ToAggregate()
			if c.want == nil {
				if got != nil {
					t.Fatalf("refused: %v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("accepted, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("error %q does not contain %q", got, w)
				}
			}
		})
	}
	errs := ValidateDurationSyntax([]byte("spec:\n  hooks:\n    preNode:\n      timeout: soon\n"))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.hooks.preNode.timeout") {
		t.Errorf("ValidateDurationSyntax: %v", errs)
	}
}

// The hooks are not part of the spec hash: adding one reruns nothing.
func TestHooksNotHashed(t *testing.T) {
	ns := valid()
	before := SpecHash(&ns.Spec)
	ns.Spec.Hooks = &Hooks{PreNode: &HookJob{}}
	if SpecHash(&ns.Spec) != before {
		t.Error("spec.hooks changes the spec hash")
	}
}
