package cli

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printCheck prints the checkScript line of `nodeexec status`: whether the
// check runs privileged (the backend's pod) or unprivileged (the watcher's
// own pod, spec.check.privileged: false) and the node directories it reads
// (spec.check.hostPaths). Nothing without spec.checkScript.
func printCheck(w io.Writer, ns *v1alpha1.NodeScript) {
	if ns.Spec.CheckScript == "" {
		return
	}
	if ns.Spec.CheckPrivileged() {
		fmt.Fprintf(w, "check: privileged, in the %s backend's pod (spec.check.privileged)\n", cmp.Or(ns.Spec.Backend.Name, backends.DefaultName))
		return
	}
	var mounts []string
	for _, m := range ns.Spec.Check.HostPaths {
		mounts = append(mounts, m.Path+" at "+m.MountPathOrDefault())
	}
	reads := "no node directory"
	if len(mounts) > 0 {
		reads = "the node's " + strings.Join(mounts, ", ") + " read-only"
	}
	fmt.Fprintf(w, "check: unprivileged (user 65534, no capabilities, no host namespaces), reads %s\n", reads)
}
