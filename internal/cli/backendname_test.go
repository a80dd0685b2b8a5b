package cli

import (
	"io"
	"testing"

	ucli "github.com/urfave/cli/v2"
)

// run's default backend: nsenter, unless a flag only a debug container has
// (--image, --profile) asks for debugpod; shell's stays debugpod; --backend
// always wins.
func TestBackendName(t *testing.T) {
	t.Setenv("NODEEXEC_IMAGE", "registry.example/tools:1") // a default, not a choice
	for _, tc := range []struct {
		defaultBackend string
		args           []string
		want           string
	}{
		{"", nil, "nsenter"},
		{"", []string{"--image", "busybox"}, "debugpod"},
		{"", []string{"--profile", "general"}, "debugpod"},
		{"", []string{"--backend", "runtime"}, "runtime"},
		{"", []string{"--backend", "nsenter", "--image", "busybox"}, "nsenter"},
		{"", []string{"--agent-image", "registry.example/agent:1", "--namespaces", "mnt"}, "nsenter"},
		{"debugpod", nil, "debugpod"},
		{"debugpod", []string{"--backend", "nsenter"}, "nsenter"},
	} {
		var got string
		app := &ucli.App{Name: "t", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*ucli.Command{{
			Name: "cmd", Flags: backendFlags(tc.defaultBackend),
			Action: func(c *ucli.Context) error { got = backendName(c); return nil },
		}}}
		if err := app.Run(append([]string{"t", "cmd"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("default %q, flags %q: backend %q, want %q", tc.defaultBackend, tc.args, got, tc.want)
		}
	}
}
