//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// TestBadInputRun: bad input to run and shell that used to crash, be
// accepted, be refused only after a Lease or pod was created, or be refused
// unclearly, through the real CLI binary against the real cluster. Each
// gives exit status 2, exactly one error line naming the flag (and what to
// give instead), nothing on stdout, quickly, and creates nothing: the
// objects TestBadInput lists (clusterObjects) are the same before and after,
// and no managed pod or Lease is added meanwhile, even for a moment.
func TestBadInputRun(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t) // the NodeScript CRD, so that NodeScripts can be listed
	dir := t.TempDir()
	node, other := env.nodes[0], env.nodes[1]
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	binary := write("binary.sh", []byte("\x7fELF\x02\x01\x01\x00\x00"))
	nul := write("nul.sh", []byte("echo hi\x00there\n"))
	big := write("big.sh", []byte(strings.Repeat("#", 128<<10)))

	// A running pod on the other node, for the ephemeral shell's --pod.
	pod := sleepingPod(uniqueName("nodeexec-e2e-badrun-"), other, nil)
	if _, err := env.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Pods("default").Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	if !waitFor(2*time.Minute, func() bool {
		p, err := env.client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}) {
		t.Fatalf("pod %s not running after 2m", pod.Name)
	}

	tests := []struct {
		name string
		args []string
		want []string
	}{
		// Crashed: the ephemeral shell read --node, which shell does not have.
		{"shell ephemeral without a resident agent", []string{"shell", node, "--backend", "ephemeral", "--resident-namespace", "nodeexec-e2e-no-agents"},
			[]string{`no ready resident agent on node "` + node + `"`, "give --pod"}},
		{"shell ephemeral pod on another node", []string{"shell", node, "--backend", "ephemeral", "--pod", "default/" + pod.Name},
			[]string{`--pod "default/` + pod.Name + `" runs on node "` + other + `", not "` + node + `"`, "shell " + other}},
		// Accepted silently or mangled.
		{"env name starting with a digit", []string{"run", "--node", node, "-e", "1BAD=x", "--", "true"}, []string{`--env "1BAD=x"`, "not a valid variable name", "letters, digits and _"}},
		{"env name with a space", []string{"run", "--node", node, "-e", "A B=x", "--", "true"}, []string{`--env "A B=x"`, "not a valid variable name"}},
		{"env given twice", []string{"run", "--node", node, "-e", "A=x", "-e", "A=y", "--", "true"}, []string{`--env "A=y"`, `already set by -e "A=x"`}},
		{"retries above the maximum", []string{"run", "--node", node, "--retries", "1000", "--", "true"}, []string{"--retries 1000", "too large, at most 10"}},
		{"tail-bytes above the maximum", []string{"run", "--node", node, "--tail-bytes", "99999999999", "--", "true"}, []string{"--tail-bytes 99999999999", "too large, at most 1048576"}},
		// The zone limit and the summary's mode (issue 28).
		{"max-per-zone zero", []string{"run", "--all", "--max-per-zone", "0", "--", "true"}, []string{"--max-per-zone 0", "give a positive number of nodes per zone"}},
		{"max-per-zone negative", []string{"run", "--all", "--max-per-zone", "-2", "--", "true"}, []string{"--max-per-zone -2", "leave the flag out for no zone limit"}},
		{"summary-only with ndjson", []string{"run", "--all", "--summary-only", "-o", "ndjson", "--", "true"}, []string{"--summary-only is for -o text"}},
		{"no-proc-fallback with nsenter", []string{"run", "--node", node, "--backend", "nsenter", "--no-proc-fallback", "--", "true"}, []string{"--no-proc-fallback is for --backend runtime", "--backend nsenter does not use it"}},
		{"shell pod with debugpod", []string{"shell", node, "--pod", "default/" + pod.Name}, []string{"--pod is for --backend ephemeral or runtime", "--backend debugpod"}},
		{"shell use-resident with debugpod", []string{"shell", node, "--use-resident"}, []string{"--use-resident is for --backend nsenter or runtime", "--backend debugpod"}},
		{"shell two nodes", []string{"shell", node, other}, []string{"shell takes one node", other, "the command goes after --"}},
		{"negative verbosity", []string{"-v", "-1", "run", "--node", node, "--", "true"}, []string{"-v -1", "0 or more"}},
		// Refused only after a Lease or pod was created.
		{"timeout above the pod deadline limit", []string{"run", "--node", node, "--timeout", "1000000h", "--", "true"}, []string{"--timeout 1000000h0m0s", "too large, at most 596523h13m7s"}},
		{"cpu request above allocatable", []string{"run", "--node", node, "--cpu-request", "1000000", "--", "true"}, []string{"--cpu-request 1000000", `node "` + node + `"`, "allocatable cpu: "}},
		{"upper-case agent image", []string{"run", "--node", node, "--agent-image", "UPPER/x", "--", "true"}, []string{`--agent-image "UPPER/x"`, "not a valid image reference", "lowercase"}},
		{"binary script", []string{"run", "--node", node, "--script", binary}, []string{"--script", "binary.sh", "binary file"}},
		{"script with NUL", []string{"run", "--node", node, "--script", nul}, []string{"--script", "nul.sh", "NUL byte"}},
		{"script of 128 KiB", []string{"run", "--node", node, "--script", big}, []string{"--script", "big.sh", "too large, at most 131071", "E2BIG"}},
		// Refused, but unclearly.
		{"timeout overflow", []string{"run", "--node", node, "--timeout", "9999999999h", "--", "true"}, []string{"--timeout 9999999999h", "too large, at most 596523h13m7s"}},
		{"missing priority class", []string{"run", "--node", node, "--priority-class", "nodeexec-e2e-missing", "--", "true"},
			[]string{`--priority-class "nodeexec-e2e-missing": the PriorityClass does not exist`, "system-node-critical"}},
		{"missing namespace", []string{"-n", "nodeexec-e2e-missing", "run", "--node", node, "--", "true"}, []string{`-n/--namespace "nodeexec-e2e-missing": namespace not found`, "create it"}},
		{"runtime with env-from-secret", []string{"run", "--backend", "runtime", "--pod", "default/" + pod.Name, "--env-from-secret", "creds", "--", "true"}, []string{"--env-from-secret", "--backend runtime", "-e KEY=VALUE"}},
		{"shell runtime without pod", []string{"shell", node, "--backend", "runtime"}, []string{"--backend runtime needs --pod [NAMESPACE/]NAME"}},
	}
	before := clusterObjects(ctx, t, dyn)
	// A pod or Lease created and deleted again within one case would not
	// show in the lists: watch for any being added.
	// (From the lists' resourceVersion: a watch without one starts with an
	// Added event for every object that exists.)
	managed := metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue}
	podList, err := env.client.CoreV1().Pods("").List(ctx, managed)
	if err != nil {
		t.Fatal(err)
	}
	leaseList, err := env.client.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managed.ResourceVersion = podList.ResourceVersion
	pods, err := env.client.CoreV1().Pods("").Watch(ctx, managed)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Stop()
	leases, err := env.client.CoordinationV1().Leases("").Watch(ctx, metav1.ListOptions{ResourceVersion: leaseList.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer leases.Stop()
	var created []string
	var mu sync.Mutex
	collect := func(w watch.Interface) {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			if o, ok := ev.Object.(metav1.Object); ok && o.GetNamespace() != corev1.NamespaceNodeLease {
				mu.Lock()
				created = append(created, fmt.Sprintf("%T %s/%s", ev.Object, o.GetNamespace(), o.GetName()))
				mu.Unlock()
			}
		}
	}
	go collect(pods)
	go collect(leases)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := refused(ctx, t, tc.args, tc.want...)
			if strings.Contains(strings.TrimSpace(stderr), "\n") {
				t.Errorf("stderr has more than one line:\n%s", stderr)
			}
		})
	}
	time.Sleep(time.Second) // the watches' last events
	mu.Lock()
	if len(created) > 0 {
		t.Errorf("bad input created %v", created)
	}
	mu.Unlock()
	after := clusterObjects(ctx, t, dyn)
	if d := cmp.Diff(before, after); d != "" || !slices.Equal(before, after) {
		t.Errorf("objects changed by bad input (-before +after):\n%s", d)
	}
}
