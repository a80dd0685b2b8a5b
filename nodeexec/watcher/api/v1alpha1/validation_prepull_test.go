package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidatePostComplete(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*NodeScript)
		want   []string // "" = valid
	}{
		"delay ok": {func(n *NodeScript) { n.Spec.Rollout.PostCompleteDelay = &metav1.Duration{Duration: 5 * time.Minute} }, nil},
		"delay 0":  {func(n *NodeScript) { n.Spec.Rollout.PostCompleteDelay = &metav1.Duration{} }, nil},
		"negative delay": {func(n *NodeScript) { n.Spec.Rollout.PostCompleteDelay = &metav1.Duration{Duration: -time.Second} },
			[]string{`spec.rollout.postCompleteDelay: Invalid value: "-1s": must be 0 or more`}},
		"labels ok": {func(n *NodeScript) {
			n.Spec.PostCompleteLabels = map[string]string{"example.com/kernel": "6.8.0", "upgraded": "true", "empty": ""}
		}, nil},
		"bad key": {func(n *NodeScript) { n.Spec.PostCompleteLabels = map[string]string{"bad key": "x"} },
			[]string{`spec.postCompleteLabels[bad key]: Invalid value: "bad key": not a label key`}},
		"bad prefix": {func(n *NodeScript) { n.Spec.PostCompleteLabels = map[string]string{"Not_A_Domain/k": "x"} },
			[]string{`spec.postCompleteLabels[Not_A_Domain/k]: Invalid value: "Not_A_Domain/k": not a label key`}},
		"bad value": {func(n *NodeScript) { n.Spec.PostCompleteLabels = map[string]string{"k": "a b"} },
			[]string{`spec.postCompleteLabels[k]: Invalid value: "a b": not a label value`}},
		"long value": {func(n *NodeScript) { n.Spec.PostCompleteLabels = map[string]string{"k": strings.Repeat("a", 64)} },
			[]string{`spec.postCompleteLabels[k]: Invalid value:`, "must be no more than 63"}},
		"prePull off": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, PrePull: ptr.To(false)}
		}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			c.mutate(ns)
			got := Validate(ns).ToAggregate()
			if len(c.want) == 0 {
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
	// The duration's syntax is checked before decoding, naming the field.
	errs := ValidateDurationSyntax([]byte("spec:\n  rollout:\n    postCompleteDelay: soon\n"))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.rollout.postCompleteDelay") {
		t.Errorf("ValidateDurationSyntax: %v", errs)
	}
}
