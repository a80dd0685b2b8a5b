package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateAnnotationGates(t *testing.T) {
	gate := func(keys ...string) *AnnotationGate { return &AnnotationGate{Annotations: keys} }
	for name, c := range map[string]struct {
		hooks *Hooks
		want  []string // none = valid
	}{
		"none":  {&Hooks{}, nil},
		"ok":    {&Hooks{BeforeRun: gate("example.com/db-stepped-down", "ceph-noout"), AfterRun: &AnnotationGate{Annotations: []string{"example.com/ok"}, Timeout: &metav1.Duration{Duration: time.Hour}}}, nil},
		"empty": {&Hooks{BeforeRun: gate()}, []string{"spec.hooks.beforeRun.annotations: Required value"}},
		"bad key": {&Hooks{AfterRun: gate("example.com/a b")},
			[]string{`spec.hooks.afterRun.annotations[0]: Invalid value: "example.com/a b": not an annotation key`}},
		"bad prefix": {&Hooks{BeforeRun: gate("Not_A_Domain/k")},
			[]string{`spec.hooks.beforeRun.annotations[0]: Invalid value: "Not_A_Domain/k": not an annotation key`}},
		"duplicate": {&Hooks{BeforeRun: gate("example.com/a", "example.com/a")},
			[]string{`spec.hooks.beforeRun.annotations[1]: Duplicate value: "example.com/a"`}},
		"our domain": {&Hooks{BeforeRun: gate("nodeexec.io/ok")},
			[]string{`spec.hooks.beforeRun.annotations[0]: Invalid value: "nodeexec.io/ok": in the watcher's own domain`}},
		"our subdomain": {&Hooks{AfterRun: gate("fix.nodescript.nodeexec.io/state")},
			[]string{`spec.hooks.afterRun.annotations[0]: Invalid value: "fix.nodescript.nodeexec.io/state": in the watcher's own domain`}},
		"zero timeout": {&Hooks{BeforeRun: &AnnotationGate{Annotations: []string{"a"}, Timeout: &metav1.Duration{}}},
			[]string{`spec.hooks.beforeRun.timeout: Invalid value: "0s": must be positive`}},
		"too many": {&Hooks{AfterRun: gate(strings.Split("a b c d e f g h i j k l m n o p q", " ")...)},
			[]string{"spec.hooks.afterRun.annotations: Too many: 17: must have at most 16 items"}},
	} {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			ns.Spec.Hooks = c.hooks
			err := Validate(ns).ToAggregate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
