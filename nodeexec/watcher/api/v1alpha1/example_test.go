package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Validate checks a NodeScript as `nodeexec apply` and the watcher do,
// naming each bad field; an empty list means valid.
func ExampleValidate() {
	ns := &v1alpha1.NodeScript{
		ObjectMeta: metav1.ObjectMeta{Name: "fix-sysctl"},
		Spec: v1alpha1.NodeScriptSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "gpu"}},
			Script:       "sysctl -w net.core.somaxconn=4096",
		},
	}
	fmt.Println(len(v1alpha1.Validate(ns)), "errors")

	ns.Spec.Backend.Name = "ssh"
	ns.Spec.Script = ""
	for _, err := range v1alpha1.Validate(ns) {
		fmt.Println(err.Field)
	}
	// Output:
	// 0 errors
	// spec.script
	// spec.backend.name
}
