//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
)

// collectBound is what the issue promises after kill -9 of a client: no pod
// object left later than the Lease's duration + 30 s after its last renewal.
const collectBound = podexec.DefaultLeaseDuration + 30*time.Second

// killedRun starts `nodeexec run` of a long command in ns, waits until the
// command runs on the node, kills the client with SIGKILL, and returns the
// run's Lease as last renewed (the clock the collection is measured from).
func killedRun(ctx context.Context, t *testing.T, ns string) *coordinationv1.Lease {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "-n", ns, "run", "--node", env.nodes[0],
		"--image", env.image, "--timeout", "10m", "--", "sh", "-c", "echo started; sleep 600")
	var out syncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("command did not start: %q", out.String())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	pods := managedPods(ctx, t, ns)
	if len(pods) != 1 {
		t.Fatalf("after SIGKILL: %d pods, want the run's one left behind", len(pods))
	}
	p := pods[0]
	leaseName := p.Labels[podexec.LabelLease]
	if leaseName == "" || len(p.OwnerReferences) == 0 || p.OwnerReferences[0].Kind != "Lease" || p.OwnerReferences[0].Name != leaseName {
		t.Fatalf("pod %s: label %s=%q, owners %+v; want it owned by its run's Lease", p.Name, podexec.LabelLease, leaseName, p.OwnerReferences)
	}
	lease, err := env.client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the run's Lease: %v", err)
	}
	if lease.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue || lease.Labels[nodeexec.LabelRunID] != p.Labels[nodeexec.LabelRunID] ||
		lease.Annotations[nodeexec.AnnotationDeadline] == "" {
		t.Errorf("Lease %s labels %v annotations %v: want managed-by, the run ID and a deadline", lease.Name, lease.Labels, lease.Annotations)
	}
	return lease
}

// waitCollected waits until ns has neither managed pods nor the Lease, and
// returns how long after the Lease's last renewal that was.
func waitCollected(ctx context.Context, t *testing.T, ns string, lease *coordinationv1.Lease, within time.Duration) time.Duration {
	t.Helper()
	renewed := lease.Spec.RenewTime.Time
	gone := func() bool {
		_, err := env.client.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(managedPods(ctx, t, ns)) == 0
	}
	if !waitFor(time.Until(renewed.Add(within)), gone) {
		t.Fatalf("%s after the Lease's last renewal: pods %d, Lease still there; want both collected within %s",
			time.Since(renewed).Round(time.Second), len(managedPods(ctx, t, ns)), within)
	}
	took := time.Since(renewed).Round(100 * time.Millisecond)
	// What is left of the run: an Event on its pod saying that its outcome
	// is unknown, where and why.
	evs, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + podexec.ReasonOutcomeUnknown})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range evs.Items {
		msgs = append(msgs, e.Message)
	}
	if len(evs.Items) != 1 || evs.Items[0].InvolvedObject.Kind != "Pod" || evs.Items[0].Type != corev1.EventTypeWarning ||
		!strings.Contains(msgs[0], "outcome unknown") || !strings.Contains(msgs[0], env.nodes[0]) || !strings.Contains(msgs[0], lease.Name) {
		t.Errorf("%s Events in %s: %q; want one Warning on the pod naming the node and the Lease", podexec.ReasonOutcomeUnknown, ns, msgs)
	} else {
		t.Logf("the collected run's record: %s %s: %s", evs.Items[0].Type, evs.Items[0].Reason, msgs[0])
	}
	return took
}

// TestKilledClientCollectedByNextRun: kill -9 of `nodeexec run` leaves its
// privileged pod; the next nodeexec invocation in the namespace, once the run's
// Lease expired, deletes it and the Lease — no `nodeexec gc` by hand.
func TestKilledClientCollectedByNextRun(t *testing.T) {
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-collect-", nil)
	lease := killedRun(ctx, t, ns)
	// Before the Lease expired, another run leaves the killed one's pod alone.
	if _, stderr, code := cli(ctx, "", "-n", ns, "run", "--node", env.nodes[1%len(env.nodes)], "--", "true"); code != 0 {
		t.Fatalf("a run before the Lease expired: exit %d: %s", code, stderr)
	}
	if !slices.ContainsFunc(managedPods(ctx, t, ns), func(p corev1.Pod) bool {
		return p.Labels[podexec.LabelLease] == lease.Name && p.DeletionTimestamp == nil
	}) {
		t.Fatal("the killed run's pod was collected before its Lease expired")
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	time.Sleep(time.Until(expiry) + time.Second)
	if _, stderr, code := cli(ctx, "", "-n", ns, "run", "--node", env.nodes[0], "--", "true"); code != 0 {
		t.Fatalf("the next run: exit %d: %s", code, stderr)
	}
	t.Logf("the killed client's pod and Lease collected %s after its last renewal (bound %s)",
		waitCollected(ctx, t, ns, lease, collectBound), collectBound)
}

// TestKilledClientCollectedByWatcher: with a watcher running (its default
// collector interval), a killed client's pod and Lease go with no nodeexec
// invocation at all.
func TestKilledClientCollectedByWatcher(t *testing.T) {
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-collectw-", nil)
	startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: watcherSetup(t)})
	lease := killedRun(ctx, t, ns)
	t.Logf("the killed client's pod and Lease collected by the watcher %s after its last renewal (bound %s)",
		waitCollected(ctx, t, ns, lease, collectBound), collectBound)
}

// TestAPIServerRestartPodDeleted: the API server killed and restarted
// mid-run of the debugpod backend without its agent (--no-agent, as
// kubectl debug runs: nothing on the node keeps the outcome). The run ends
// with "outcome unknown" (exit 125: never a success,
// never the command's own status), and its pod's delete, which
// fails while the API server is down, is retried until it succeeds: no pod
// is left once the client has exited.
func TestAPIServerRestartPodDeleted(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's fault injection (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-apirestart-", nil)
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "-n", ns, "run", "--node", env.nodes[0],
		"--image", env.image, "--no-agent", "--timeout", "2m", "--", "sh", "-c", "echo started; sleep 600")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("command did not start: %q", out.String())
	}
	t.Cleanup(func() {
		restoreCluster(context.WithoutCancel(ctx), t)
	})
	if err := env.cluster.RestartAPIServer(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if err == nil || code == 0 {
		t.Fatalf("the run survived nothing and exited 0: a silent success; stderr:\n%s", errOut.String())
	}
	if code != nodeexec.ExitOutcomeUnknown || !strings.Contains(errOut.String(), "outcome unknown") {
		t.Errorf("exit %d, want %d with \"outcome unknown\" on stderr (not the command's own failure)", code, nodeexec.ExitOutcomeUnknown)
	}
	t.Logf("client exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	// The delete was made (retried until the API server answered) before the
	// client exited; the kubelet then stops the container (1 s grace).
	for _, p := range managedPods(ctx, t, ns) {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s not deleted when the client exited", p.Name)
		}
	}
	if !waitFor(30*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 }) {
		t.Errorf("%d pods left 30 s after the client exited", len(managedPods(ctx, t, ns)))
	}
}
