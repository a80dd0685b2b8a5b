package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestContainerdVersionFlagRefused: `testcluster up --containerd-version X`
// with a malformed X or a 1.x other than Debian's fails naming the flag and
// the versions that work, before anything is checked, built or started (it
// needs neither root nor the network).
func TestContainerdVersionFlagRefused(t *testing.T) {
	for _, v := range []string{"1.7.24", "2.3", "latest", "3.0.0"} {
		var stdout, stderr bytes.Buffer
		err := run([]string{"up", "--containerd-version", v, "--state-dir", t.TempDir(), "--run-dir", t.TempDir(), "--cache-dir", t.TempDir()}, &stdout, &stderr)
		if err == nil {
			t.Fatalf("up --containerd-version %s accepted", v)
		}
		for _, want := range []string{"--containerd-version", v, "1.6", "2.3.7"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("up --containerd-version %s: error lacks %q: %v", v, want, err)
			}
		}
		if stdout.Len() > 0 || strings.Contains(stderr.String(), "[testcluster") {
			t.Errorf("up --containerd-version %s did something: stdout %q stderr %q", v, stdout.String(), stderr.String())
		}
	}
}
