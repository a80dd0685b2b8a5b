//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// targetPod creates a pod (unique name, deleted at the end of the test) whose
// containers run the given commands, and waits until it is Running with
// the first container running.
func targetPod(ctx context.Context, t *testing.T, commands ...[]string) *corev1.Pod {
	t.Helper()
	return targetPodIn(ctx, t, "default", commands...)
}

// targetPodIn is targetPod in namespace ns.
func targetPodIn(ctx context.Context, t *testing.T, ns string, commands ...[]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "eph-target-",
			Namespace:    ns,
			Labels:       map[string]string{"nodeexec.io/e2e": "ephemeral-target"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To[int64](900), // gone even if the test dies
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
		},
	}
	for i, cmd := range commands {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("c%d", i), Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: cmd,
		})
	}
	created, err := env.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.client.CoreV1().Pods(ns).Delete(cctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Errorf("deleting target pod %s: %v", created.Name, err)
		}
	})
	var cur *corev1.Pod
	if !waitFor(60*time.Second, func() bool {
		cur, err = env.client.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && cur.Status.Phase == corev1.PodRunning && len(cur.Status.ContainerStatuses) == len(commands) &&
			cur.Status.ContainerStatuses[0].State.Running != nil
	}) {
		t.Fatalf("target pod %s did not run: %+v", created.Name, cur.Status)
	}
	return cur
}

func ephemeralBackend(t *testing.T, pod *corev1.Pod, mutate func(*ephemeral.Options)) *ephemeral.Backend {
	t.Helper()
	o := ephemeral.Options{Client: env.client, Config: env.config, Namespace: pod.Namespace, Pod: pod.Name, Image: env.image}
	if mutate != nil {
		mutate(&o)
	}
	b, err := ephemeral.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runContainers returns the statuses of the ephemeral containers of one
// backend's run (found by their NODEEXEC_RUN_ID) and how many ephemeral
// containers the pod has in all.
func runContainers(ctx context.Context, t *testing.T, pod *corev1.Pod, runID string) (statuses []corev1.ContainerStatus, total int) {
	t.Helper()
	cur, err := env.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range cur.Spec.EphemeralContainers {
		for _, e := range c.Env {
			if e.Name == ephemeral.EnvRunID && e.Value == runID {
				ours[c.Name] = true
			}
		}
	}
	for _, s := range cur.Status.EphemeralContainerStatuses {
		if ours[s.Name] {
			statuses = append(statuses, s)
		}
	}
	if len(statuses) != len(ours) {
		t.Errorf("run %s: %d containers in the spec, %d in the status", runID, len(ours), len(statuses))
	}
	return statuses, len(cur.Spec.EphemeralContainers)
}

func TestEphemeral(t *testing.T) {
	ctx := context.Background()
	pod := targetPod(ctx, t, []string{"sleep", "3600"})
	node := pod.Spec.NodeName

	t.Run("sees the target's processes", func(t *testing.T) {
		var out syncBuffer
		res, err := ephemeralBackend(t, pod, nil).Run(ctx, nodeexec.Request{Node: node, Command: []string{"ps"}, Stdout: &out, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "sleep 3600") {
			t.Errorf("ps in the ephemeral container does not list the target's sleep:\n%s", out.String())
		}
		if res.Node != node || res.Pod != pod.Name || res.Backend != ephemeral.Name {
			t.Errorf("result = %+v", res)
		}
	})

	t.Run("stdin and argv as given", func(t *testing.T) {
		var out syncBuffer
		_, err := ephemeralBackend(t, pod, nil).Run(ctx, nodeexec.Request{
			Command: []string{"sh", "-c", `cat; echo "$1"`, "sh", "$(HOME) $$"},
			Stdin:   strings.NewReader("line one\nline two\n"), Stdout: &out, Timeout: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := "line one\nline two\n$(HOME) $$\n"; out.String() != want {
			t.Errorf("stdout = %q, want %q", out.String(), want)
		}
	})

	t.Run("timeout leaves no running process", func(t *testing.T) {
		b := ephemeralBackend(t, pod, nil)
		start := time.Now()
		_, err := b.Run(ctx, nodeexec.Request{Command: []string{"sh", "-c", "echo started; sleep 300 & wait"}, Timeout: 5 * time.Second})
		if !errors.Is(err, nodeexec.ErrTimeout) || nodeexec.ExitCode(err) != 124 {
			t.Fatalf("Run error = %v, want a timeout", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("Run took %s after a 5 s timeout", d)
		}
		// Run waited for the terminated status: no wait needed here.
		statuses, _ := runContainers(ctx, t, pod, b.RunID())
		if len(statuses) != 1 || statuses[0].State.Terminated == nil {
			t.Fatalf("ephemeral container of the timed-out run: %+v, want terminated", statuses)
		}
		var ps syncBuffer
		if _, err := ephemeralBackend(t, pod, nil).Run(ctx, nodeexec.Request{Command: []string{"ps", "-o", "pid,stat,args"}, Stdout: &ps, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(ps.String(), "\n") {
			if strings.Contains(line, "sleep 300") {
				t.Errorf("a process of the timed-out run still runs: %q\n%s", line, ps.String())
			}
		}
	})

	t.Run("concurrent runs on one pod", func(t *testing.T) {
		// Each add is a patch with the pod's resourceVersion: concurrent
		// ones conflict and are retried, and every run gets its container.
		b := ephemeralBackend(t, pod, nil)
		const n = 3
		outs := make([]syncBuffer, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = b.Run(ctx, nodeexec.Request{Command: []string{"echo", fmt.Sprint("run-", i)}, Stdout: &outs[i], Timeout: time.Minute})
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || outs[i].String() != fmt.Sprintf("run-%d\n", i) {
				t.Errorf("run %d: %v, stdout %q", i, errs[i], outs[i].String())
			}
		}
		if statuses, _ := runContainers(ctx, t, pod, b.RunID()); len(statuses) != n {
			t.Errorf("%d containers for %d runs", len(statuses), n)
		}
	})

	t.Run("cli", func(t *testing.T) {
		stdout, stderr, code := cli(ctx, "", "run", "--backend", "ephemeral", "--pod", pod.Namespace+"/"+pod.Name, "--no-prefix", "--", "sh", "-c", "echo via-cli; exit 3")
		if code != 3 || stdout != "via-cli\n" {
			t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
		}
	})
}

// TestEphemeralBadInput: each refusal is a clear, typed error (exit 2 on the
// command line) and adds nothing to the pod.
func TestEphemeralBadInput(t *testing.T) {
	ctx := context.Background()
	pod := targetPod(ctx, t, []string{"sleep", "3600"}, []string{"true"})
	// The second container exits at once; wait until the status says so.
	if !waitFor(60*time.Second, func() bool {
		cur, err := env.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && cur.Status.ContainerStatuses[1].State.Terminated != nil
	}) {
		t.Fatal("container c1 did not exit")
	}
	// One run of ours, so that a limit of 1 is reached.
	if _, err := ephemeralBackend(t, pod, nil).Run(ctx, nodeexec.Request{Command: []string{"true"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, before := runContainers(ctx, t, pod, "-")

	tests := map[string]struct {
		mutate  func(*ephemeral.Options)
		want    error
		text    string
		cliArgs []string
	}{
		"pod not found": {func(o *ephemeral.Options) { o.Pod = "no-such-pod-x7q" }, nodeexec.ErrPodNotFound, "pod default/no-such-pod-x7q does not exist",
			[]string{"--pod", "default/no-such-pod-x7q"}},
		"container not found": {func(o *ephemeral.Options) { o.Container = "nope" }, nodeexec.ErrContainerNotFound, `has no container "nope" (its containers: c0, c1)`,
			[]string{"--pod", pod.Namespace + "/" + pod.Name, "--container", "nope"}},
		"target not running": {func(o *ephemeral.Options) { o.Container = "c1" }, nodeexec.ErrContainerNotRunning, `container "c1" of pod default/` + pod.Name + ` is terminated (Completed, exit code 0)`,
			[]string{"--pod", pod.Namespace + "/" + pod.Name, "--container", "c1"}},
		"too many ephemeral containers": {func(o *ephemeral.Options) { o.MaxEphemeralContainers = 1 }, ephemeral.ErrTooManyEphemeralContainers, "already holds 1 ephemeral containers added by nodeexec (limit 1)", nil},
		"wrong node":                    {nil, nodeexec.ErrWrongNode, "not \"not-this-node\"", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := nodeexec.Request{Command: []string{"true"}, Timeout: time.Minute}
			if tc.want == nodeexec.ErrWrongNode {
				req.Node = "not-this-node"
			}
			_, err := ephemeralBackend(t, pod, tc.mutate).Run(ctx, req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("Run error = %v, want %v containing %q", err, tc.want, tc.text)
			}
			if _, after := runContainers(ctx, t, pod, "-"); after != before {
				t.Errorf("the refused run added an ephemeral container: %d before, %d after", before, after)
			}
			if tc.cliArgs != nil {
				_, stderr, code := cli(ctx, "", append(append([]string{"run", "--backend", "ephemeral"}, tc.cliArgs...), "--", "true")...)
				if code != 2 || !strings.Contains(stderr, tc.text) {
					t.Errorf("CLI: exit %d, want 2 with %q in stderr:\n%s", code, tc.text, stderr)
				}
				if _, after := runContainers(ctx, t, pod, "-"); after != before {
					t.Errorf("the refused CLI run added an ephemeral container: %d before, %d after", before, after)
				}
			}
		})
	}

	t.Run("cli usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"run", "--backend", "ephemeral", "--", "true"},
			{"run", "--backend", "ephemeral", "--pod", pod.Name, "--all", "--", "true"},
			{"run", "--pod", pod.Name, "--", "true"},
			{"run", "--backend", "ephemeral", "--pod", "a/b/c", "--", "true"},
		} {
			_, stderr, code := cli(ctx, "", args...)
			if code != 2 || !strings.Contains(stderr, "--pod") && !strings.Contains(stderr, "--backend") {
				t.Errorf("%v: exit %d, stderr:\n%s", args, code, stderr)
			}
		}
	})
}

// TestEphemeralPodSecurity: in a namespace enforcing baseline, the general
// profile (SYS_PTRACE) is refused before anything is added (Preflight's dry
// run; exit 2 on the command line), and the baseline profile runs.
func TestEphemeralPodSecurity(t *testing.T) {
	ctx := context.Background()
	pod := targetPodIn(ctx, t, "nodeexec-baseline", []string{"sleep", "3600"})
	_, before := runContainers(ctx, t, pod, "-")

	err := ephemeralBackend(t, pod, nil).Preflight(ctx, "")
	if !errors.Is(err, nodeexec.ErrForbidden) || !strings.Contains(err.Error(), `Pod Security level rejects an ephemeral container with profile "general"`) {
		t.Errorf("Preflight error = %v, want ErrForbidden naming the profile", err)
	}
	_, err = ephemeralBackend(t, pod, nil).Run(ctx, nodeexec.Request{Command: []string{"true"}, Timeout: time.Minute})
	if !errors.Is(err, nodeexec.ErrForbidden) {
		t.Errorf("Run error = %v, want ErrForbidden", err)
	}
	_, stderr, code := cli(ctx, "", "run", "--backend", "ephemeral", "--pod", pod.Namespace+"/"+pod.Name, "--", "true")
	if code != 2 || !strings.Contains(stderr, "SYS_PTRACE") {
		t.Errorf("CLI: exit %d, want 2 naming SYS_PTRACE:\n%s", code, stderr)
	}
	if _, after := runContainers(ctx, t, pod, "-"); after != before {
		t.Errorf("refused runs added ephemeral containers: %d before, %d after", before, after)
	}

	stdout, stderr, code := cli(ctx, "", "run", "--backend", "ephemeral", "--profile", "baseline", "--pod", pod.Namespace+"/"+pod.Name, "--no-prefix", "--", "sh", "-c", "ps | grep -c '[s]leep 3600'")
	if code != 0 || stdout != "1\n" {
		t.Errorf("baseline profile: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}
