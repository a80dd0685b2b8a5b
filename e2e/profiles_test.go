//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// TestProfiles runs a probe under each kubectl debug profile and checks what
// kubectl documents for it: host namespaces, /host, privilege, capabilities.
func TestProfiles(t *testing.T) {
	// Prints: hostpid (PID 1 is not our holder), hostroot (/host/etc/os-release
	// readable), chroot (chroot /host works), netadmin (CAP_NET_ADMIN, bit 12, in CapEff).
	probe := `pid1=$(tr '\0' ' ' </proc/1/cmdline)
case "$pid1" in sleep*) echo hostpid=no;; *) echo hostpid=yes;; esac
[ -r /host/etc/os-release ] && echo hostroot=yes || echo hostroot=no
chroot /host true 2>/dev/null && echo chroot=yes || echo chroot=no
eff=$(awk '/^CapEff/{print $2}' /proc/self/status)
[ $(( 0x$eff >> 12 & 1 )) = 1 ] && echo netadmin=yes || echo netadmin=no
[ $(( 0x$eff >> 21 & 1 )) = 1 ] && echo sysadmin=yes || echo sysadmin=no`
	tests := map[string]string{
		"legacy":   "hostpid=yes hostroot=yes chroot=yes netadmin=no sysadmin=no",
		"general":  "hostpid=yes hostroot=yes chroot=yes netadmin=no sysadmin=no",
		"baseline": "hostpid=no hostroot=no chroot=no netadmin=no sysadmin=no",
		"netadmin": "hostpid=yes hostroot=no chroot=no netadmin=yes sysadmin=no",
		"sysadmin": "hostpid=yes hostroot=yes chroot=yes netadmin=yes sysadmin=yes",
	}
	ctx := t.Context()
	for profile, want := range tests {
		t.Run(profile, func(t *testing.T) {
			b := backend(t, func(o *debugpod.Options) { o.Profile = profile })
			var out, errOut bytes.Buffer
			_, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[0], Command: []string{"sh", "-c", probe}, Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatalf("%v; stderr:\n%s", err, errOut.String())
			}
			if got := strings.Join(strings.Fields(out.String()), " "); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			assertRunPodsGone(ctx, t, "default", b.RunID())
		})
	}
	// restricted: runAsNonRoot with an image that runs as root is refused by
	// the kubelet, as it is for kubectl debug; nodeexec says so, and cleans up.
	t.Run("restricted", func(t *testing.T) {
		b := backend(t, func(o *debugpod.Options) { o.Profile = "restricted" })
		_, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[0], Command: []string{"id"}})
		var pe *nodeexec.PodError
		if !errors.As(err, &pe) || pe.Reason != "CreateContainerConfigError" || !strings.Contains(pe.Message, "runAsNonRoot") {
			t.Fatalf("err = %v, want a *PodError CreateContainerConfigError about runAsNonRoot", err)
		}
		assertRunPodsGone(ctx, t, "default", b.RunID())
	})
}
