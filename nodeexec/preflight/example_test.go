package preflight_test

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// Allows answers "does a namespace enforcing this Pod Security level admit
// a pod that needs that one?": the check a preflight makes before creating
// the backend's pod. A namespace without the label admits everything.
func ExampleAllows() {
	for _, ns := range append(preflight.Levels(), "") {
		fmt.Printf("namespace %-12q admits a privileged pod: %-5v a baseline pod: %v\n",
			ns, preflight.Allows(ns, preflight.LevelPrivileged), preflight.Allows(ns, preflight.LevelBaseline))
	}
	// Output:
	// namespace "privileged" admits a privileged pod: true  a baseline pod: true
	// namespace "baseline"   admits a privileged pod: false a baseline pod: true
	// namespace "restricted" admits a privileged pod: false a baseline pod: false
	// namespace ""           admits a privileged pod: true  a baseline pod: true
}
