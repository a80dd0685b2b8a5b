//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// TestTimeout: sleep 600 with a 5 s timeout ends within seconds, reports a
// timeout, and leaves no pod.
func TestTimeout(t *testing.T) {
	ctx := t.Context()
	b := backend(t, nil)
	start := time.Now()
	res, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[0], Command: []string{"sleep", "600"}, Timeout: 5 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, nodeexec.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if took > 15*time.Second {
		t.Errorf("took %s to time out after 5s", took)
	}
	if nodeexec.ExitCode(err) != 124 || res.Pod == "" {
		t.Errorf("ExitCode = %d, want 124; result %+v", nodeexec.ExitCode(err), res)
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())

	// The CLI says so too.
	_, stderr, code := cli(ctx, "", "run", "--node", env.nodes[0], "--timeout", "3s", "--", "sleep", "600")
	if code != 124 || !strings.Contains(stderr, "timed out") {
		t.Errorf("CLI: exit %d, want 124 and 'timed out'; stderr:\n%s", code, stderr)
	}
}

// TestCLIInterrupt: Ctrl-C (SIGINT) on `nodeexec run` deletes the pod and exits.
func TestCLIInterrupt(t *testing.T) {
	ctx := t.Context()
	// The pods of the test before may still be terminating: let them go
	// first, so that "before" counts only pods that stay.
	waitFor(30*time.Second, func() bool { return managedPodCount(ctx, t) == 0 })
	before := managedPodCount(ctx, t)
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "run", "--node", env.nodes[0], "--image", env.image, "--", "sh", "-c", "echo started; sleep 600")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		_ = cmd.Process.Kill()
		t.Fatalf("command did not start; stdout %q stderr %q", out.String(), errOut.String())
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if time.Since(start) > 10*time.Second {
		t.Errorf("exit took %s after SIGINT", time.Since(start))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("exit = %v, want a non-zero exit; stderr:\n%s", err, errOut.String())
	}
	if !waitFor(15*time.Second, func() bool { return managedPodCount(ctx, t) == before }) {
		t.Errorf("managed pods: %d after interrupt, %d before", managedPodCount(ctx, t), before)
	}
}

// TestGarbageCollection: a client killed outright (SIGKILL) cannot delete its
// pod; activeDeadlineSeconds stops it, and `nodeexec gc` deletes pods whose
// deadline has passed, leaving running ones (and pods without a deadline) alone.
func TestGarbageCollection(t *testing.T) {
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-gc-", nil)
	// What a killed run leaves: a nodeexec pod past its deadline; and a live one.
	leftover := func(name string, deadline time.Time) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels:      map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: "gc-test"},
				Annotations: map[string]string{nodeexec.AnnotationDeadline: deadline.UTC().Format(time.RFC3339)}},
			Spec: corev1.PodSpec{NodeName: env.nodes[0], TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
				Name: "holder", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", "600"}}}},
		}
		if _, err := env.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leftover("expired", time.Now().Add(-time.Minute))
	leftover("live", time.Now().Add(time.Hour))
	stdout, stderr, code := cli(ctx, "", "-n", ns, "gc")
	if code != 0 || stdout != "pod/"+ns+"/expired deleted\n" {
		t.Errorf("gc: exit %d stdout %q stderr %q; want the expired pod deleted", code, stdout, stderr)
	}
	if !waitFor(20*time.Second, func() bool {
		_, err := env.client.CoreV1().Pods(ns).Get(ctx, "expired", metav1.GetOptions{})
		return err != nil
	}) {
		t.Error("the expired pod is still there")
	}
	if _, err := env.client.CoreV1().Pods(ns).Get(ctx, "live", metav1.GetOptions{}); err != nil {
		t.Errorf("the live pod was touched: %v", err)
	}
	if err := env.client.CoreV1().Pods(ns).Delete(ctx, "live", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Error(err)
	}
	waitFor(20*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 })

	// The real thing: SIGKILL the CLI mid-command. Its pod outlives it; once
	// the deadline (timeout + 30 s) has passed, gc deletes it.
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "-n", ns, "run", "--node", env.nodes[0],
		"--image", env.image, "--timeout", "3s", "--", "sh", "-c", "echo started; sleep 600")
	var out syncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		_ = cmd.Process.Kill()
		t.Fatalf("command did not start: %q", out.String())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if pods := managedPods(ctx, t, ns); len(pods) != 1 {
		t.Fatalf("after SIGKILL: %d pods, want the run's one left behind", len(pods))
	}
	if stdout, _, _ := cli(ctx, "", "-n", ns, "gc"); stdout != "" {
		t.Errorf("gc before the deadline deleted %q", stdout)
	}
	time.Sleep(34 * time.Second) // 3 s timeout + 30 s slack, rounded up
	stdout, stderr, code = cli(ctx, "", "-n", ns, "gc")
	if code != 0 || !strings.HasSuffix(stdout, " deleted\n") {
		t.Errorf("gc after the deadline: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if !waitFor(20*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 }) {
		t.Error("the killed run's pod is still there after gc")
	}
}

// TestCLIInterruptTwice: a second Ctrl-C while the first one's cleanup waits
// for an API server that does not answer (frozen: SIGSTOP) exits at once
// (130), saying how the rest is collected; once the API server is back and the
// run's Lease expired, `nodeexec gc` collects what was left. (Two SIGINTs sent
// back to back may reach the process as one; the frozen API server keeps the
// first one's cleanup waiting, so the second always lands in it.)
func TestCLIInterruptTwice(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's fault injection (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-int2-", nil)
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "-n", ns, "run", "--all", "--image", env.image, "--", "sh", "-c", "echo started; sleep 600")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Count(out.String(), "started") == len(env.nodes) }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("command did not start everywhere; stdout %q stderr %q", out.String(), errOut.String())
	}
	t.Cleanup(func() {
		restoreCluster(context.WithoutCancel(ctx), t)
	})
	if err := env.cluster.FreezeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := cmd.Wait()
	took := time.Since(start)
	if err := env.cluster.ThawAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit = %v, want 130; stderr:\n%s", err, errOut.String())
	}
	if took > 5*time.Second {
		t.Errorf("exit took %s after the second SIGINT, want at once", took)
	}
	if !strings.Contains(errOut.String(), "interrupted again") || !strings.Contains(errOut.String(), "Lease") {
		t.Errorf("stderr does not say how what is left is collected:\n%s", errOut.String())
	}
	left := managedPods(ctx, t, ns)
	t.Logf("%d pods left after the second SIGINT", len(left))
	if len(left) == 0 {
		return
	}
	// The run's Lease (30 s) expires: wait until its last renewal is that old,
	// as TestKilledClientCollectedByNextRun does (a fixed 35 s waited up to
	// 15 s more: renewals are 10 s apart).
	time.Sleep(time.Until(leasesExpiry(ctx, t, ns, left)) + time.Second)
	if stdout, stderr, code := cli(ctx, "", "-n", ns, "gc"); code != 0 {
		t.Fatalf("gc: exit %d: %s %s", code, stdout, stderr)
	}
	if !waitFor(20*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 }) {
		t.Errorf("%d pods left after gc", len(managedPods(ctx, t, ns)))
	}
}

// leasesExpiry is when the last of the run Leases of pods (in ns) expires:
// its renewTime plus its duration; 35 s from now if one cannot be read.
func leasesExpiry(ctx context.Context, t *testing.T, ns string, pods []corev1.Pod) time.Time {
	t.Helper()
	fallback := time.Now().Add(35 * time.Second)
	var last time.Time
	for _, p := range pods {
		l, err := env.client.CoordinationV1().Leases(ns).Get(ctx, p.Labels[podexec.LabelLease], metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			t.Logf("the Lease of pod %s: %v; waiting 35 s", p.Name, err)
			return fallback
		}
		if e := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second); e.After(last) {
			last = e
		}
	}
	return last
}
