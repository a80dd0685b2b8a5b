package cli

import (
	"bytes"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintCheck(t *testing.T) {
	for _, c := range []struct {
		spec v1alpha1.NodeScriptSpec
		want string
	}{
		{v1alpha1.NodeScriptSpec{}, ""},
		{v1alpha1.NodeScriptSpec{CheckScript: "exit 1"}, "check: privileged, in the debugpod backend's pod (spec.check.privileged)\n"},
		{v1alpha1.NodeScriptSpec{CheckScript: "exit 1", Check: &v1alpha1.CheckSpec{Privileged: ptr.To(false)}},
			"check: unprivileged (user 65534, no capabilities, no host namespaces), reads no node directory\n"},
		{v1alpha1.NodeScriptSpec{CheckScript: "exit 1", Check: &v1alpha1.CheckSpec{Privileged: ptr.To(false), HostPaths: []v1alpha1.HostPathMount{
			{Path: "/var/run", MountPath: "/host/var/run"}, {Path: "/etc/os-release.d"},
		}}}, "check: unprivileged (user 65534, no capabilities, no host namespaces), reads the node's /var/run at /host/var/run, /etc/os-release.d at /etc/os-release.d read-only\n"},
	} {
		var b bytes.Buffer
		printCheck(&b, &v1alpha1.NodeScript{Spec: c.spec})
		if b.String() != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.spec, b.String(), c.want)
		}
	}
}
