package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

func TestShellBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"shell"}, "give the node"},
		{[]string{"shell", "--timeout", "0s", "n1"}, "--timeout"},
		{[]string{"shell", "--backend", "nope", "n1"}, "unknown --backend"},
		{[]string{"shell", "--cpu-request", "lots", "n1"}, "--cpu-request"},
	} {
		got := run(t, "", tt.args...)
		if got.code != 2 || !strings.Contains(got.errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, got.code, got.errOut, tt.want)
		}
	}
}

func TestShellArgv(t *testing.T) {
	pick := "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"
	for _, tt := range []struct {
		profile string
		want    []string
	}{
		{"sysadmin", []string{"chroot", "/host", "/bin/sh", "-c", pick}},
		{"general", []string{"chroot", "/host", "/bin/sh", "-c", pick}},
		{"netadmin", []string{"sh", "-c", pick}},
		{"restricted", []string{"sh", "-c", pick}},
	} {
		b, err := debugpod.New(debugpod.Options{PodOptions: debugpod.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{}}, Profile: tt.profile})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, shellArgv(b)); diff != "" {
			t.Errorf("profile %s (-want +got):\n%s", tt.profile, diff)
		}
	}
}
