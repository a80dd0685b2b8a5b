package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfilingFlags: --cpuprofile and --memprofile write pprof files (gzip)
// around the command, given before or after it; a path that cannot be
// created is an error naming the flag.
func TestProfilingFlags(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	for _, args := range [][]string{
		{"--cpuprofile", cpu, "--memprofile", mem, "version", "--client"},
		{"version", "--client", "--cpuprofile", cpu, "--memprofile", mem},
	} {
		_ = os.Remove(cpu)
		_ = os.Remove(mem)
		if got := run(t, "", args...); got.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, got.code, got.errOut)
		}
		for _, f := range []string{cpu, mem} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
				t.Errorf("%v: %s is not a gzipped pprof profile (%d bytes)", args, f, len(b))
			}
		}
	}
	for _, flag := range []string{"--cpuprofile", "--memprofile"} {
		got := run(t, "", flag, filepath.Join(dir, "missing", "x.prof"), "version", "--client")
		if got.code != 2 || !strings.Contains(got.errOut, flag+":") {
			t.Errorf("%s in a missing directory: exit %d, stderr %q; want 2 naming the flag", flag, got.code, got.errOut)
		}
	}
}
