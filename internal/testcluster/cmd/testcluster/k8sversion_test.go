package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestKubernetesVersionRefused: an unknown, malformed or unsupported
// --kubernetes-version is refused, naming the flag and the supported range,
// before anything is built or started (the options are resolved first; an
// accepted version would need root and start a cluster).
func TestKubernetesVersionRefused(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range []string{"up", "build", "down", "kubeconfig"} {
		for _, v := range []string{"1.33.5", "1.38.0", "latest", "1.34", "v1.34.x"} {
			var out, errb bytes.Buffer
			err := run([]string{cmd, "--kubernetes-version", v, "--cache-dir", dir + "/cache", "--state-dir", dir + "/state", "--run-dir", dir + "/run"}, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), "--kubernetes-version") || !strings.Contains(err.Error(), "1.34 to 1.37") {
				t.Errorf("%s --kubernetes-version %s: %v, want a refusal naming the flag and the range", cmd, v, err)
			}
			if out.Len() > 0 {
				t.Errorf("%s --kubernetes-version %s printed %q", cmd, v, out.String())
			}
		}
	}
}
