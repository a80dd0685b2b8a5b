//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// testClusterSockets are the test nodes' containerd sockets (not at a
// well-known path), as the agent sees them under /host.
func testClusterSockets() []string {
	var out []string
	for _, n := range env.nodes {
		out = append(out, "/run/nodeexec-testcluster/containerd-"+n+".sock")
	}
	return out
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// rtTargetPod creates, in "default" on node, a pod whose container runs sh -c
// script, waits until it is Running (or, with wantRunning false, until its
// container has terminated), and deletes it at the end of the test.
func rtTargetPod(ctx context.Context, t *testing.T, node, script string, wantRunning bool) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rt-target-" + randomSuffix(), Namespace: "default", Labels: map[string]string{"nodeexec-e2e": "runtime-target"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "app", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
	pods := env.client.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	var cur *corev1.Pod
	ok := waitFor(60*time.Second, func() bool {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		cur = p
		s := p.Status.ContainerStatuses[0].State
		if wantRunning {
			return s.Running != nil && p.Status.PodIP != ""
		}
		return s.Terminated != nil
	})
	if !ok {
		t.Fatalf("target pod %s did not reach the wanted state: %+v", pod.Name, cur)
	}
	return cur
}

func runtimeBackend(t *testing.T, target *corev1.Pod, mutate func(*runtimeexec.Options)) *runtimeexec.Backend {
	t.Helper()
	o := runtimeexec.Options{
		PodOptions:   runtimeexec.PodOptions{Client: env.client, Config: env.config, Image: agentImage()},
		PodNamespace: target.Namespace, Pod: target.Name,
		RuntimeEndpoints: testClusterSockets(),
	}
	if mutate != nil {
		mutate(&o)
	}
	b, err := runtimeexec.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRuntimeEntersContainer: on every node, the runtime backend reads a
// file that exists only in the target container's root filesystem, and sees
// the container's network (its pod IP on eth0) and hostname, through the
// CRI socket; the agent pod is gone afterwards.
func TestRuntimeEntersContainer(t *testing.T) {
	ctx := t.Context()
	for _, node := range env.nodes {
		t.Run(node, func(t *testing.T) {
			mark := "marker-" + randomSuffix()
			target := rtTargetPod(ctx, t, node, "echo "+mark+" > /tmp/"+mark+"; exec sleep 3600", true)
			// No /proc fallback: the container is found over CRI, or the run fails.
			b := runtimeBackend(t, target, func(o *runtimeexec.Options) { o.NoProcFallback = true })
			var out, errOut syncBuffer
			res, err := b.Run(ctx, nodeexec.Request{
				Command: []string{"sh", "-c", "cat /tmp/" + mark + "; ip -4 -o addr show eth0; echo host=$(hostname); echo pid1=$(cat /proc/1/cmdline | tr '\\0' ' ')"},
				Env:     map[string]string{"E2E_VAR": "v1"},
				Stdout:  &out, Stderr: &errOut, Timeout: 2 * time.Minute,
			})
			if err != nil {
				t.Fatalf("Run: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
			}
			got := out.String()
			for _, want := range []string{mark + "\n", "inet " + target.Status.PodIP + "/", "host=" + target.Name, "pid1=sleep 3600"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if res.Node != node || res.Backend != runtimeexec.Name || res.Pod == "" || res.ExitCode != 0 {
				t.Errorf("result %+v", res)
			}
			assertRunPodsGone(ctx, t, "default", b.RunID())

			// Exit codes and the extra environment come through.
			out = syncBuffer{}
			_, err = b.Run(ctx, nodeexec.Request{Command: []string{"sh", "-c", "echo $E2E_VAR; exit 7"}, Env: map[string]string{"E2E_VAR": "v1"}, Stdout: &out})
			var ee *nodeexec.ExitError
			if !errors.As(err, &ee) || ee.Code != 7 || strings.TrimSpace(out.String()) != "v1" {
				t.Errorf("exit 7: err %v, output %q", err, out.String())
			}
			assertRunPodsGone(ctx, t, "default", b.RunID())
		})
	}
}

// TestRuntimeSocketAbsent: with only a missing socket (and the test nodes
// have none at the well-known paths), the agent finds the container by
// scanning /proc/*/cgroup; with that fallback off, the run fails with
// agent.ErrNotRun naming the sockets it tried. Nothing is left behind either way.
func TestRuntimeSocketAbsent(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	mark := "marker-" + randomSuffix()
	target := rtTargetPod(ctx, t, node, "echo "+mark+" > /tmp/"+mark+"; exec sleep 3600", true)
	missing := []string{"/run/nodeexec-e2e-missing-" + randomSuffix() + ".sock"}

	b := runtimeBackend(t, target, func(o *runtimeexec.Options) { o.RuntimeEndpoints = missing })
	var out, errOut syncBuffer
	_, err := b.Run(ctx, nodeexec.Request{Command: []string{"cat", "/tmp/" + mark}, Stdout: &out, Stderr: &errOut})
	if err != nil || strings.TrimSpace(out.String()) != mark {
		t.Errorf("fallback: err %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())

	b = runtimeBackend(t, target, func(o *runtimeexec.Options) { o.RuntimeEndpoints = missing; o.NoProcFallback = true })
	errOut = syncBuffer{}
	res, err := b.Run(ctx, nodeexec.Request{Command: []string{"cat", "/tmp/" + mark}, Stderr: &errOut})
	if !errors.Is(err, agent.ErrNotRun) || !strings.Contains(err.Error(), missing[0]+": absent") || !strings.Contains(err.Error(), "fallback is off") {
		t.Errorf("no fallback: err %v (result %+v), stderr %q", err, res, errOut.String())
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
}

// TestRuntimeBadInput: a missing pod, a container that is not running, an
// unknown container and an unknown Linux namespace are refused with clear
// errors, before any pod is created.
func TestRuntimeBadInput(t *testing.T) {
	ctx := t.Context()
	exited := rtTargetPod(ctx, t, env.nodes[0], "exit 3", false)

	cases := map[string]struct {
		mutate func(*runtimeexec.Options)
		want   error
		msg    string
	}{
		"pod not found":           {func(o *runtimeexec.Options) { o.Pod = "nodeexec-e2e-absent-" + randomSuffix() }, nodeexec.ErrPodNotFound, "does not exist"},
		"namespace of pod absent": {func(o *runtimeexec.Options) { o.PodNamespace = "nodeexec-e2e-nons" }, nodeexec.ErrPodNotFound, "nodeexec-e2e-nons/"},
		"container not running":   {func(o *runtimeexec.Options) { o.Pod = exited.Name }, nodeexec.ErrContainerNotRunning, "terminated (Error, exit code 3)"},
		"unknown container":       {func(o *runtimeexec.Options) { o.Pod = exited.Name; o.Container = "db" }, nodeexec.ErrContainerNotFound, `no container "db"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := runtimeBackend(t, exited, tc.mutate)
			res, err := b.Run(ctx, nodeexec.Request{Command: []string{"true"}})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || res.ExitCode != -1 {
				t.Errorf("Run: %v (result %+v); want %v saying %q", err, res, tc.want, tc.msg)
			}
			if pods := runPods(ctx, t, "default", b.RunID()); len(pods) != 0 {
				t.Errorf("pods created: %v", pods)
			}
		})
	}
	// An unknown Linux namespace is refused by New, before any API call.
	_, err := runtimeexec.New(runtimeexec.Options{PodOptions: runtimeexec.PodOptions{Client: env.client, Config: env.config}, Pod: exited.Name, Namespaces: []nsenter.Namespace{nsenter.Mount, "netz"}})
	if !errors.Is(err, nsenter.ErrUnknownNamespace) || !strings.Contains(err.Error(), "netz") {
		t.Errorf("unknown namespace: %v", err)
	}
}

// TestRuntimeCLI: `nodeexec run --backend runtime --pod NS/NAME --container C`
// runs in the container; bad input exits 2 with a clear message, before
// anything is created.
func TestRuntimeCLI(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	mark := "marker-" + randomSuffix()
	target := rtTargetPod(ctx, t, node, "echo "+mark+" > /tmp/"+mark+"; exec sleep 3600", true)
	base := []string{"run", "--backend", "runtime", "--agent-image", agentImage(), "--runtime-endpoint", "/run/nodeexec-testcluster/containerd-" + node + ".sock"}
	stdout, stderr, code := cli(ctx, "", append(base, "--pod", "default/"+target.Name, "--container", "app", "--", "cat", "/tmp/"+mark)...)
	if code != 0 || stdout != "["+node+"] "+mark+"\n" {
		t.Errorf("run: exit %d\nstdout: %q\nstderr: %s", code, stdout, stderr)
	}
	stdout, _, code = cli(ctx, "", append(base, "--pod", "default/"+target.Name, "--", "sh", "-c", "exit 9")...)
	if code != 9 {
		t.Errorf("exit 9: got %d (%q)", code, stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod", "default/nodeexec-e2e-absent", "--", "true"}, "pod not found: pod default/nodeexec-e2e-absent does not exist"},
		{[]string{"--pod", "nodeexec-e2e-nons/x", "--", "true"}, "pod not found: pod nodeexec-e2e-nons/x does not exist"},
		{[]string{"--pod", "default/" + target.Name, "--container", "db", "--", "true"}, `has no container "db"`},
		{[]string{"--pod", "default/" + target.Name, "--namespaces", "mnt,bogus", "--", "true"}, `unknown namespace "bogus"`},
		{[]string{"--node", node, "--", "true"}, "--backend runtime needs --pod"},
		{[]string{"--pod", "default/" + target.Name, "--node", node, "--", "true"}, "do not combine it with --node"},
	} {
		_, stderr, code := cli(ctx, "", append(base, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
