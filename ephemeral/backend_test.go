package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// fakeAttacher plays the container: it checks the start signal, echoes
// stdin to stdout, and reports the container terminated with code.
type fakeAttacher struct {
	client kubernetes.Interface
	code   int32
	stdin  chan string
	cut    error // returned after the container ended: the stream broke
}

func (a *fakeAttacher) Attach(ctx context.Context, ns, pod string, opts *corev1.PodAttachOptions, s remotecommand.StreamOptions) error {
	in, err := io.ReadAll(s.Stdin)
	if err != nil {
		return err
	}
	a.stdin <- string(in)
	_, _ = io.WriteString(s.Stdout, "out\n")
	if err := setState(ctx, a.client, ns, pod, opts.Container, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: a.code, Reason: "Error"}}); err != nil {
		return err
	}
	return a.cut
}

type nopStreamer struct{}

func (nopStreamer) Exec(context.Context, string, string, *corev1.PodExecOptions, remotecommand.StreamOptions) error {
	return nil
}

func setState(ctx context.Context, c kubernetes.Interface, ns, name, container string, st corev1.ContainerState) error {
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: container, State: st}}
	_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

func newTestBackend(t *testing.T, client *fake.Clientset, mutate func(*Options)) *Backend {
	t.Helper()
	o := Options{Client: client, Namespace: "shop", Pod: "web-1", Attacher: &fakeAttacher{client: client, stdin: make(chan string, 1)}, Streamer: nopStreamer{}}
	if mutate != nil {
		mutate(&o)
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patches counts the ephemeralcontainers patches the fake client received.
func patches(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "ephemeralcontainers" {
			n++
		}
	}
	return n
}

func TestRunRefusals(t *testing.T) {
	withOurs := func(n int) *corev1.Pod {
		p := targetPod()
		for i := range n {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: NamePrefix + string(rune('a'+i))}})
		}
		return p
	}
	exited := targetPod()
	exited.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
	pending := targetPod()
	pending.Status.Phase = corev1.PodPending
	tests := map[string]struct {
		pod     *corev1.Pod
		mutate  func(*Options)
		node    string
		reactor k8stesting.ReactionFunc
		want    error
		text    string
	}{
		"pod not found":       {pod: nil, want: nodeexec.ErrPodNotFound, text: "pod shop/web-1 does not exist"},
		"container not found": {pod: targetPod(), mutate: func(o *Options) { o.Container = "db" }, want: nodeexec.ErrContainerNotFound, text: `no container "db" (its containers: app, sidecar)`},
		"target exited":       {pod: exited, want: nodeexec.ErrContainerNotRunning, text: `container "app" of pod shop/web-1 is terminated (Completed, exit code 0)`},
		"pod pending":         {pod: pending, want: nodeexec.ErrContainerNotRunning, text: "is Pending, not Running"},
		"too many":            {pod: withOurs(3), mutate: func(o *Options) { o.MaxEphemeralContainers = 3 }, want: ErrTooManyEphemeralContainers, text: "already holds 3 ephemeral containers added by nodeexec (limit 3)"},
		"wrong node":          {pod: targetPod(), node: "node-b", want: nodeexec.ErrWrongNode, text: `is on node "node-a", not "node-b"`},
		"disabled": {pod: targetPod(), want: ErrEphemeralContainersDisabled, reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods/ephemeralcontainers"}, "")
		}},
		"pod security": {pod: targetPod(), want: nodeexec.ErrForbidden, text: "Pod Security level rejects", reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-1", errors.New(`violates PodSecurity "baseline:latest": non-default capabilities`))
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			client := fake.NewClientset(objs...)
			if tc.reactor != nil {
				client.PrependReactor("patch", "pods", tc.reactor)
			}
			b := newTestBackend(t, client, tc.mutate)
			res, err := b.Run(context.Background(), nodeexec.Request{Node: tc.node, Command: []string{"true"}, Timeout: 10 * time.Second})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Run error = %v, want %v containing %q", err, tc.want, tc.text)
			}
			if res.ExitCode != -1 {
				t.Errorf("ExitCode = %d, want -1", res.ExitCode)
			}
			if tc.reactor == nil && patches(client) != 0 {
				t.Errorf("a refused run patched the pod: %v", client.Actions())
			}
		})
	}
}

// TestRunExitCode: the container is added, attached once it runs, fed the
// start signal then stdin, and its terminated exit code is the result.
func TestRunExitCode(t *testing.T) {
	client := fake.NewClientset(targetPod())
	att := &fakeAttacher{client: client, code: 3, stdin: make(chan string, 1)}
	b := runningBackend(t, client, att)
	var out strings.Builder
	res, err := b.Run(context.Background(), nodeexec.Request{Command: []string{"cat"}, Stdin: strings.NewReader("data"), Stdout: &out, Timeout: 10 * time.Second})
	var ee *nodeexec.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Node != "node-a" {
		t.Fatalf("Run error = %v, want exit code 3 on node-a", err)
	}
	if res.ExitCode != 3 || res.Node != "node-a" || res.Backend != Name || res.Pod != "web-1" || res.FirstOutput.IsZero() {
		t.Errorf("result = %+v", res)
	}
	if got := <-att.stdin; got != "\ndata" {
		t.Errorf("stdin = %q, want the start signal then the data", got)
	}
	if out.String() != "out\n" {
		t.Errorf("stdout = %q", out.String())
	}
	pod, err := client.CoreV1().Pods("shop").Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pod.Spec.EphemeralContainers {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"debugger-abcde", "nodeexec-abc"}, names); diff != "" {
		t.Errorf("ephemeral containers (-want +got):\n%s", diff)
	}
}

func TestNewValidation(t *testing.T) {
	client := fake.NewClientset()
	ok := Options{Client: client, Pod: "web-1", Attacher: &fakeAttacher{}, Streamer: nopStreamer{}}
	tests := map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no client":     {func(o *Options) { o.Client = nil }, "Options.Client is nil"},
		"no config":     {func(o *Options) { o.Attacher = nil }, "Options.Config is nil"},
		"no pod":        {func(o *Options) { o.Pod = "" }, "Options.Pod is empty"},
		"bad pod":       {func(o *Options) { o.Pod = "Web_1" }, `invalid pod name "Web_1"`},
		"bad container": {func(o *Options) { o.Container = "A B" }, `invalid container name "A B"`},
		"bad profile":   {func(o *Options) { o.Profile = "root" }, `unknown profile "root"`},
		"bad policy":    {func(o *Options) { o.ImagePullPolicy = "Sometimes" }, `invalid image pull policy "Sometimes"`},
		"bad namespace": {func(o *Options) { o.Namespace = "Not_OK" }, `invalid namespace "Not_OK"`},
		"bad limit":     {func(o *Options) { o.MaxEphemeralContainers = -1 }, "MaxEphemeralContainers -1 is negative"},
		"defaults":      {func(*Options) {}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := ok
			tc.mutate(&o)
			b, err := New(o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if b.o.Profile != DefaultProfile || b.o.Image != DefaultImage || b.o.Namespace != DefaultNamespace ||
					b.o.ImagePullPolicy != corev1.PullIfNotPresent || b.o.MaxEphemeralContainers != DefaultMaxEphemeralContainers || len(b.RunID()) != 10 {
					t.Errorf("defaults not applied: %+v", b.o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// killStreamer records the exec'd kill and reports the container terminated
// (SIGKILL), as the kubelet would.
type killStreamer struct {
	client kubernetes.Interface
	cmds   chan []string
}

func (k *killStreamer) Exec(ctx context.Context, ns, pod string, opts *corev1.PodExecOptions, _ remotecommand.StreamOptions) error {
	k.cmds <- opts.Command
	return setState(ctx, k.client, ns, pod, opts.Container, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}})
}

type attachFunc func(ctx context.Context, ns, pod string, opts *corev1.PodAttachOptions, s remotecommand.StreamOptions) error

func (f attachFunc) Attach(ctx context.Context, ns, pod string, opts *corev1.PodAttachOptions, s remotecommand.StreamOptions) error {
	return f(ctx, ns, pod, opts, s)
}

// TestRunKills: after a timeout, and after a refused attach, the command's
// process is killed (exec kill of the recorded PID) and Run returns once the
// container is terminated.
func TestRunKills(t *testing.T) {
	tests := map[string]struct {
		attach attachFunc
		want   error
	}{
		"timeout": {func(ctx context.Context, _, _ string, _ *corev1.PodAttachOptions, _ remotecommand.StreamOptions) error {
			<-ctx.Done() // the command runs on
			return ctx.Err()
		}, nodeexec.ErrTimeout},
		"attach forbidden": {func(context.Context, string, string, *corev1.PodAttachOptions, remotecommand.StreamOptions) error {
			return &httpstream.UpgradeFailureError{Cause: errors.New(`pods "web-1" is forbidden: User "u" cannot create resource "pods/attach"`)}
		}, nodeexec.ErrForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(targetPod())
			client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "ephemeralcontainers" {
					go func() {
						time.Sleep(50 * time.Millisecond)
						_ = setState(context.Background(), client, "shop", "web-1", "nodeexec-abc", corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
					}()
				}
				return false, nil, nil
			})
			ks := &killStreamer{client: client, cmds: make(chan []string, 1)}
			b := newTestBackend(t, client, func(o *Options) {
				o.Attacher = tc.attach
				o.Streamer = ks
				o.NameSuffix = func() string { return "abc" }
			})
			start := time.Now()
			_, err := b.Run(context.Background(), nodeexec.Request{Command: []string{"sleep", "100"}, Timeout: time.Second})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run error = %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Run took %s", d)
			}
			select {
			case cmd := <-ks.cmds:
				if diff := cmp.Diff([]string{"sh", "-c", `kill -KILL "$(cat /tmp/nodeexec.pid)"`}, cmd); diff != "" {
					t.Errorf("kill command (-want +got):\n%s", diff)
				}
			default:
				t.Error("the command was not killed")
			}
		})
	}
}

// TestPreflight: the patch is sent as a dry run (nothing added) and a
// wrong node is refused.
func TestPreflight(t *testing.T) {
	client := fake.NewClientset(targetPod())
	var opts []metav1.PatchOptions
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts = append(opts, a.(k8stesting.PatchActionImpl).PatchOptions)
		return true, targetPod(), nil // the fake would apply a dry run
	})
	b := newTestBackend(t, client, nil)
	if err := b.Preflight(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]metav1.PatchOptions{{DryRun: []string{metav1.DryRunAll}}}, opts); diff != "" {
		t.Errorf("patch options (-want +got):\n%s", diff)
	}
	if err := b.Preflight(context.Background(), "node-b"); !errors.Is(err, nodeexec.ErrWrongNode) {
		t.Errorf("Preflight on another node = %v, want nodeexec.ErrWrongNode", err)
	}
}

// TestTargetPodReadOnce: TargetNode then Preflight read the target pod once;
// a conflicting patch (the pod changed since) reads it again.
func TestTargetPodReadOnce(t *testing.T) {
	client := fake.NewClientset(targetPod())
	conflicts := 1
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "web-0", errors.New("the object has been modified"))
		}
		return true, targetPod(), nil
	})
	gets := func() (n int) {
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	b := newTestBackend(t, client, nil)
	if _, err := b.TargetNode(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Preflight(t.Context(), "node-a"); err != nil {
		t.Fatal(err)
	}
	// One GET by TargetNode, one more after the conflict; none for the
	// Preflight's first attempt.
	if n := gets(); n != 2 {
		t.Errorf("%d GETs of the target pod, want 2: %v", n, client.Actions())
	}
	if err := b.Preflight(t.Context(), "node-a"); err != nil {
		t.Fatal(err)
	}
	if n := gets(); n != 2 {
		t.Errorf("a second Preflight read the pod again (%d GETs): a dry run changes nothing", n)
	}
}

// TestRunAttachBroke: the attach breaks after the command started; the exit
// code comes from the container's status, and the error says the output
// after the break is lost: the command's own code when it failed, outcome
// unknown (never a success) when it exited 0.
func TestRunAttachBroke(t *testing.T) {
	for _, tc := range []struct {
		code     int32
		wantExit int
	}{{3, 3}, {0, nodeexec.ExitOutcomeUnknown}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			client := fake.NewClientset(targetPod())
			att := &fakeAttacher{client: client, code: tc.code, stdin: make(chan string, 1), cut: errors.New("websocket: close 1006 (abnormal closure): unexpected EOF")}
			b := runningBackend(t, client, att)
			res, err := b.Run(context.Background(), nodeexec.Request{Command: []string{"true"}, Timeout: 10 * time.Second})
			if !errors.Is(err, nodeexec.ErrOutcomeUnknown) || nodeexec.ExitCode(err) != tc.wantExit || res.ExitCode != int(tc.code) {
				t.Fatalf("Run = %+v, %v (exit %d); want ErrOutcomeUnknown, exit %d", res, err, nodeexec.ExitCode(err), tc.wantExit)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("exited with code %d", tc.code)) {
				t.Errorf("error %q does not give the code", err)
			}
		})
	}
}

// runningBackend is a backend whose ephemeral container is named
// nodeexec-abc and attached through att, on a client where the "kubelet"
// reports the container running 50 ms after it is added.
func runningBackend(t *testing.T, client *fake.Clientset, att *fakeAttacher) *Backend {
	t.Helper()
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "ephemeralcontainers" {
			go func() {
				time.Sleep(50 * time.Millisecond)
				_ = setState(context.Background(), client, "shop", "web-1", "nodeexec-abc", corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
			}()
		}
		return false, nil, nil
	})
	return newTestBackend(t, client, func(o *Options) {
		o.Attacher = att
		o.NameSuffix = func() string { return "abc" }
	})
}
