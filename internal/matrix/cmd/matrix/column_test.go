package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/internal/matrix"
)

// fakeTestcluster knows no --containerd-version, as the testcluster command
// of a tree without it: such a column must fail at up with its error.
const fakeTestcluster = `#!/bin/sh
echo "testcluster $*" >> "$FAKE_CALLS"
for a in "$@"; do
  if [ "$a" = --containerd-version ]; then
    echo "flag provided but not defined: -containerd-version" >&2
    echo "testcluster: flag provided but not defined: -containerd-version" >&2
    exit 2
  fi
done
if [ "$1" = up ]; then echo "[testcluster 19:00:00.000] building kube-apiserver v$5" >&2; echo "export KUBECONFIG=/nonexistent/admin.kubeconfig"; fi
`

// fakeE2E prints what a test binary run with -test.v=test2json prints.
const fakeE2E = `#!/bin/sh
echo "e2e: cluster ready" >&2
printf '\026=== RUN   TestA\n'
printf '\026--- PASS: TestA (1.50s)\n'
printf '\026=== RUN   TestB\n'
printf '    b_test.go:9: boom\n'
printf '\026--- FAIL: TestB (2.00s)\n'
printf '\026FAIL\n'
exit 1
`

// TestColumn runs two columns with fake testcluster, agentimage and e2e
// commands: one whose version flag the testcluster command does not know
// (recorded as failing at up, with the error) and one whose tests run.
func TestColumn(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	calls := filepath.Join(dir, "calls")
	t.Setenv("FAKE_CALLS", calls)
	r := &runner{
		cfg:         config{run: "^(TestA|TestB)$", nodes: 2, timeout: time.Minute},
		logs:        dir,
		testcluster: write("testcluster", fakeTestcluster),
		agentimage:  write("agentimage", "#!/bin/sh\necho \"agentimage\" >> \"$FAKE_CALLS\"\n"),
		e2e:         write("e2e.test", fakeE2E),
	}
	if err := os.Mkdir(filepath.Join(dir, "e2e"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir) // the test binary runs in e2e/
	ctx := context.Background()

	bad := r.column(ctx, matrix.Column{Kubernetes: "1.34.4", Containerd: "2.3.7"})
	if bad.Phase != matrix.PhaseUp || !strings.Contains(bad.Error, "flag provided but not defined: -containerd-version") || bad.Run != nil || !bad.Failed() {
		t.Errorf("unknown flag: phase %q error %q run %v", bad.Phase, bad.Error, bad.Run)
	}

	good := r.column(ctx, matrix.Column{Kubernetes: "1.37.1", Containerd: matrix.DebianContainerd})
	if good.Error != "" || good.Run == nil || good.Seconds <= 0 || bad.Seconds <= 0 {
		t.Fatalf("default column: phase %q error %q seconds %v (failed column %v)", good.Phase, good.Error, good.Seconds, bad.Seconds)
	}
	if !good.Up.Cold || len(good.Up.Built) != 1 || good.Up.Built[0] != "kube-apiserver v1.37.1" {
		t.Errorf("up %+v: want cold, from its building line", good.Up)
	}
	tr := good.Run
	if tr.Result != matrix.Fail || len(tr.Tests) != 2 || tr.Tests[0].Result != matrix.Pass || tr.Tests[0].Seconds != 1.5 ||
		tr.Tests[1].Result != matrix.Fail || !strings.Contains(strings.Join(tr.Tests[1].Output, "\n"), "boom") {
		t.Errorf("tests %+v", tr)
	}
	b, _ := os.ReadFile(calls)
	want := "testcluster down\ntestcluster up --nodes 2 --kubernetes-version 1.34.4 --containerd-version 2.3.7\n" +
		"testcluster down\ntestcluster up --nodes 2 --kubernetes-version 1.37.1\nagentimage\n"
	if string(b) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", b, want)
	}
	for _, f := range []string{"1.37.1+debian-up.log", "1.37.1+debian-tests.jsonl", "1.37.1+debian-tests.stderr.log", "1.34.4+2.3.7-up.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("log: %v", err)
		}
	}
}

// TestColumnInterrupted: ctx ends during the tests: the test binary is
// interrupted, the test that was running is a fail that never ended, and
// the column says it was interrupted, within seconds.
func TestColumnInterrupted(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("FAKE_CALLS", filepath.Join(dir, "calls"))
	r := &runner{
		cfg:         config{run: "^TestA$", nodes: 2, timeout: time.Minute},
		logs:        dir,
		testcluster: write("testcluster", fakeTestcluster),
		agentimage:  write("agentimage", "#!/bin/sh\n"),
		e2e:         write("e2e.test", "#!/bin/sh\nprintf '\\026=== RUN   TestA\\n'\nexec sleep 60\n"),
	}
	if err := os.Mkdir(filepath.Join(dir, "e2e"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(2*time.Second, cancel)
	start := time.Now()
	res := r.column(ctx, matrix.Column{Kubernetes: "1.37.1", Containerd: matrix.DebianContainerd})
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %s after the interrupt", took)
	}
	if res.Phase != matrix.PhaseTests || !strings.HasPrefix(res.Error, "interrupted") || res.Run == nil ||
		len(res.Run.Tests) != 1 || res.Run.Tests[0].Result != matrix.Fail {
		t.Errorf("phase %q error %q run %+v", res.Phase, res.Error, res.Run)
	}
}
