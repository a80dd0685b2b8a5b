package podexec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

const (
	testNS        = "ns"
	testNode      = "n1"
	testContainer = "debugger"
	testRunID     = "run1"
	testBackend   = "test"
	// waitLimit bounds every wait, so that a bug fails a test instead of hanging it.
	waitLimit = 5 * time.Second
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func notReadyErr() error {
	return &httpstream.UpgradeFailureError{Cause: errors.New(`unable to upgrade connection: container not found ("debugger")`)}
}

// deleteCall is one pod deletion seen by recordingClient.
type deleteCall struct {
	Name        string
	CtxErr      error
	GracePeriod *int64
}

// recordingClient passes everything to the fake clientset and records, for
// each pod deletion, whether its context was still live (the fake ignores
// contexts, so this is the only way to see a delete made with a cancelled one).
type recordingClient struct {
	kubernetes.Interface
	mu      *sync.Mutex
	deletes *[]deleteCall
}

// IsWatchListSemanticsUnSupported says, as the fake clientset does, that
// informers must not use WatchList (see main_test.go).
func (c recordingClient) IsWatchListSemanticsUnSupported() bool { return true }

func (c recordingClient) CoreV1() typedcorev1.CoreV1Interface {
	return recordingCoreV1{CoreV1Interface: c.Interface.CoreV1(), c: c}
}

type recordingCoreV1 struct {
	typedcorev1.CoreV1Interface
	c recordingClient
}

func (c recordingCoreV1) Pods(ns string) typedcorev1.PodInterface {
	return recordingPods{PodInterface: c.CoreV1Interface.Pods(ns), c: c.c}
}

type recordingPods struct {
	typedcorev1.PodInterface
	c recordingClient
}

func (p recordingPods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	p.c.mu.Lock()
	*p.c.deletes = append(*p.c.deletes, deleteCall{Name: name, CtxErr: ctx.Err(), GracePeriod: opts.GracePeriodSeconds})
	p.c.mu.Unlock()
	return p.PodInterface.Delete(ctx, name, opts)
}

// recordingClock is a fake clock that records the duration of every timer.
type recordingClock struct {
	*clocktesting.FakeClock
	mu     sync.Mutex
	timers []time.Duration
}

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	c.timers = append(c.timers, d)
	c.mu.Unlock()
	return c.FakeClock.NewTimer(d)
}

func (c *recordingClock) timerDurations() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.timers...)
}

// autoStep fires every timer of c as soon as one is waiting, until the test ends.
func (c *recordingClock) autoStep(t *testing.T, d time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c.HasWaiters() {
				c.Step(d)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
}

// execCall is one call of fakeStreamer.
type execCall struct {
	Namespace, Pod string
	Opts           corev1.PodExecOptions
	Streams        remotecommand.StreamOptions
}

// fakeStreamer calls fn for every exec and records the calls.
type fakeStreamer struct {
	fn func(ctx context.Context, call int, streams remotecommand.StreamOptions) error

	mu    sync.Mutex
	calls []execCall
}

func (s *fakeStreamer) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	s.mu.Lock()
	s.calls = append(s.calls, execCall{Namespace: namespace, Pod: pod, Opts: *opts, Streams: streams})
	n := len(s.calls)
	s.mu.Unlock()
	if s.fn == nil {
		return nil
	}
	return s.fn(ctx, n, streams)
}

func (s *fakeStreamer) numCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

type harness struct {
	cs       *fake.Clientset
	client   recordingClient
	clock    *recordingClock
	streamer *fakeStreamer
	tracker  *podexec.Tracker
	exec     *podexec.Executor

	mu      sync.Mutex
	deletes []deleteCall
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		cs:       fake.NewClientset(objs...),
		clock:    &recordingClock{FakeClock: clocktesting.NewFakeClock(t0)},
		streamer: &fakeStreamer{},
	}
	h.client = recordingClient{Interface: h.cs, mu: &h.mu, deletes: &h.deletes}
	h.tracker = podexec.NewTracker(h.client, testNS, nodeexec.LabelRunID+"="+testRunID)
	exec, err := podexec.New(podexec.Options{
		Client:           h.client,
		Streamer:         h.streamer,
		Tracker:          h.tracker,
		Backend:          testBackend,
		Clock:            h.clock,
		RetryInterval:    100 * time.Millisecond,
		MaxRetryInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("podexec.New: %v", err)
	}
	h.exec = exec
	return h
}

func testPod(name string, status corev1.PodStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS,
			Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: testRunID},
		},
		Spec: corev1.PodSpec{
			NodeName:   testNode,
			Containers: []corev1.Container{{Name: testContainer, Image: "busybox", Command: []string{"sleep", "600"}}},
		},
		Status: status,
	}
}

func runningStatus() corev1.PodStatus {
	start := metav1.NewTime(t0)
	return corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, ContainerStatuses: []corev1.ContainerStatus{running(testContainer)}}
}

type outcome struct {
	res nodeexec.Result
	err error
}

// start runs the executor in the background.
func (h *harness) start(ctx context.Context, pod *corev1.Pod, req nodeexec.Request) <-chan outcome {
	if req.Node == "" {
		req.Node = testNode
	}
	ch := make(chan outcome, 1)
	go func() {
		res, err := h.exec.RunResumable(ctx, podexec.Launch{Pod: pod, Container: testContainer, Argv: []string{"echo", "hi"}}, req)
		ch <- outcome{res, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(waitLimit):
		t.Fatal("Executor.Run did not return")
		return outcome{}
	}
}

func (h *harness) run(t *testing.T, ctx context.Context, pod *corev1.Pod, req nodeexec.Request) (nodeexec.Result, error) {
	t.Helper()
	o := wait(t, h.start(ctx, pod, req))
	return o.res, o.err
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitForPod waits until the pod exists in the fake API server and returns it.
func (h *harness) waitForPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "pod "+name+" to be created", func() bool {
		p, err := h.cs.CoreV1().Pods(testNS).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		pod = p
		return true
	})
	return pod
}

// setStatus writes the pod's status as the kubelet would.
func (h *harness) setStatus(t *testing.T, name string, status corev1.PodStatus) {
	t.Helper()
	pod := h.waitForPod(t, name)
	pod.Status = status
	if _, err := h.cs.CoreV1().Pods(testNS).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
}

// podVerbs lists the create and delete calls on pods, in order, as "verb name".
func (h *harness) podVerbs() []string {
	var out []string
	for _, a := range h.cs.Actions() {
		if a.GetResource().Resource != "pods" || a.GetSubresource() != "" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.CreateAction:
			name := ""
			if p, ok := a.GetObject().(*corev1.Pod); ok {
				name = p.Name
			}
			out = append(out, "create "+name)
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		}
	}
	return out
}

// checkCleanedUp asserts the pod was created, then deleted once with a live
// context and a 1s grace period, and no longer exists.
func (h *harness) checkCleanedUp(t *testing.T, name string) {
	t.Helper()
	if diff := cmp.Diff([]string{"create " + name, "delete " + name}, h.podVerbs()); diff != "" {
		t.Errorf("pod API calls mismatch (-want +got):\n%s", diff)
	}
	h.mu.Lock()
	deletes := append([]deleteCall(nil), h.deletes...)
	h.mu.Unlock()
	want := []deleteCall{{Name: name, GracePeriod: ptr.To(podexec.DeleteGracePeriod)}}
	if diff := cmp.Diff(want, deletes, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Errorf("deletes mismatch (-want +got; CtxErr must be nil, a cancelled context would not reach a real API server):\n%s", diff)
	}
	if _, err := h.cs.CoreV1().Pods(testNS).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s still exists after the run (get error %v)", name, err)
	}
}

func TestNew(t *testing.T) {
	cs := fake.NewClientset()
	tr := podexec.NewTracker(cs, testNS, "a=b")
	s := &fakeStreamer{}
	tests := []struct {
		name string
		o    podexec.Options
		want string
	}{
		{name: "ok", o: podexec.Options{Client: cs, Streamer: s, Tracker: tr, Backend: "b"}},
		{name: "no client", o: podexec.Options{Streamer: s, Tracker: tr, Backend: "b"}, want: "Client"},
		{name: "no streamer", o: podexec.Options{Client: cs, Tracker: tr, Backend: "b"}, want: "Streamer"},
		{name: "no tracker", o: podexec.Options{Client: cs, Streamer: s, Backend: "b"}, want: "Tracker"},
		{name: "no backend", o: podexec.Options{Client: cs, Streamer: s, Tracker: tr}, want: "Backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := podexec.New(tt.o)
			if tt.want == "" {
				if err != nil || e == nil {
					t.Fatalf("New = %v, %v", e, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestRunSuccess(t *testing.T) {
	h := newHarness(t)
	h.streamer.fn = func(_ context.Context, _ int, s remotecommand.StreamOptions) error {
		h.clock.Step(2 * time.Second)
		fmt.Fprint(s.Stdout, "hello\n")
		h.clock.Step(time.Second)
		fmt.Fprint(s.Stderr, "warn\n")
		return nil
	}
	var stdout, stderr bytes.Buffer
	res, err := h.run(t, t.Context(), testPod("p1", runningStatus()), nodeexec.Request{Command: []string{"ignored"}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := nodeexec.Result{
		Node: testNode, ExitCode: 0, Backend: testBackend, Namespace: testNS, Pod: "p1",
		Started: t0, FirstOutput: t0.Add(2 * time.Second), Finished: t0.Add(3 * time.Second),
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	if stdout.String() != "hello\n" || stderr.String() != "warn\n" {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if n := h.streamer.numCalls(); n != 1 {
		t.Errorf("%d exec calls, want 1", n)
	}
	if got := h.clock.timerDurations(); len(got) != 0 {
		t.Errorf("timers %v were set though the container was already running", got)
	}
	h.checkCleanedUp(t, "p1")
}

func TestRunExecOptions(t *testing.T) {
	stdin := strings.NewReader("input")
	tests := []struct {
		name        string
		req         nodeexec.Request
		want        corev1.PodExecOptions
		wantStdin   io.Reader
		wantStderr  bool
		wantTTY     bool
		wantSizeSet bool
	}{
		{
			name:       "plain",
			req:        nodeexec.Request{Command: []string{"x"}},
			want:       corev1.PodExecOptions{Container: testContainer, Command: []string{"echo", "hi"}, Stdout: true, Stderr: true},
			wantStderr: true,
		},
		{
			name:       "stdin",
			req:        nodeexec.Request{Command: []string{"x"}, Stdin: stdin},
			want:       corev1.PodExecOptions{Container: testContainer, Command: []string{"echo", "hi"}, Stdin: true, Stdout: true, Stderr: true},
			wantStdin:  stdin,
			wantStderr: true,
		},
		{
			name:        "tty merges stderr",
			req:         nodeexec.Request{Command: []string{"x"}, TTY: true, TerminalSizeQueue: sizeQueue{}},
			want:        corev1.PodExecOptions{Container: testContainer, Command: []string{"echo", "hi"}, Stdout: true, TTY: true},
			wantTTY:     true,
			wantSizeSet: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if _, err := h.run(t, t.Context(), testPod("p", runningStatus()), tt.req); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if h.streamer.numCalls() != 1 {
				t.Fatalf("%d exec calls, want 1", h.streamer.numCalls())
			}
			c := h.streamer.calls[0]
			if c.Namespace != testNS || c.Pod != "p" {
				t.Errorf("exec in %s/%s, want %s/p", c.Namespace, c.Pod, testNS)
			}
			if diff := cmp.Diff(tt.want, c.Opts); diff != "" {
				t.Errorf("exec options mismatch (-want +got):\n%s", diff)
			}
			if c.Streams.Stdin != tt.wantStdin {
				t.Errorf("streams.Stdin = %v, want %v", c.Streams.Stdin, tt.wantStdin)
			}
			if c.Streams.Stdout == nil {
				t.Error("streams.Stdout is nil; exec with Stdout=true needs a writer")
			}
			if (c.Streams.Stderr != nil) != tt.wantStderr {
				t.Errorf("streams.Stderr set = %v, want %v", c.Streams.Stderr != nil, tt.wantStderr)
			}
			if c.Streams.Tty != tt.wantTTY || (c.Streams.TerminalSizeQueue != nil) != tt.wantSizeSet {
				t.Errorf("streams Tty %v, size queue set %v", c.Streams.Tty, c.Streams.TerminalSizeQueue != nil)
			}
		})
	}
}

type sizeQueue struct{}

func (sizeQueue) Next() *remotecommand.TerminalSize { return nil }

// TestRunStartTriggers checks each signal that the container can take an exec.
func TestRunStartTriggers(t *testing.T) {
	t.Run("started event", func(t *testing.T) {
		h := newHarness(t)
		ch := h.start(t.Context(), testPod("p", corev1.PodStatus{}), nodeexec.Request{Command: []string{"x"}})
		h.waitForPod(t, "p")
		// An event for another pod must not count.
		for i, name := range []string{"other", "p"} {
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("ev%d", i), Namespace: testNS},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: name, Namespace: testNS},
				Reason:         "Started",
			}
			if _, err := h.cs.CoreV1().Events(testNS).Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		o := wait(t, ch)
		if o.err != nil {
			t.Fatalf("Run: %v", o.err)
		}
		if n := h.streamer.numCalls(); n != 1 {
			t.Errorf("%d exec calls, want 1", n)
		}
		if got := h.clock.timerDurations(); len(got) != 0 {
			t.Errorf("timers %v were set; the Started event alone should trigger the exec", got)
		}
		h.checkCleanedUp(t, "p")
	})

	t.Run("running status", func(t *testing.T) {
		h := newHarness(t)
		ch := h.start(t.Context(), testPod("p", corev1.PodStatus{}), nodeexec.Request{Command: []string{"x"}})
		h.setStatus(t, "p", runningStatus())
		o := wait(t, ch)
		if o.err != nil {
			t.Fatalf("Run: %v", o.err)
		}
		if n := h.streamer.numCalls(); n != 1 {
			t.Errorf("%d exec calls, want 1", n)
		}
		h.checkCleanedUp(t, "p")
	})

	t.Run("first attempt delay after the kubelet picks the pod up", func(t *testing.T) {
		h := newHarness(t)
		ch := h.start(t.Context(), testPod("p", corev1.PodStatus{}), nodeexec.Request{Command: []string{"x"}})
		start := metav1.NewTime(t0)
		h.setStatus(t, "p", corev1.PodStatus{
			Phase: corev1.PodPending, StartTime: &start,
			ContainerStatuses: []corev1.ContainerStatus{waiting(testContainer, "ContainerCreating", "")},
		})
		waitFor(t, "the first-attempt timer", h.clock.HasWaiters)
		if n := h.streamer.numCalls(); n != 0 {
			t.Fatalf("%d exec calls before the first-attempt delay passed", n)
		}
		if diff := cmp.Diff([]time.Duration{podexec.DefaultFirstAttemptDelay}, h.clock.timerDurations()); diff != "" {
			t.Errorf("timers mismatch (-want +got):\n%s", diff)
		}
		h.clock.Step(podexec.DefaultFirstAttemptDelay)
		o := wait(t, ch)
		if o.err != nil {
			t.Fatalf("Run: %v", o.err)
		}
		if n := h.streamer.numCalls(); n != 1 {
			t.Errorf("%d exec calls, want 1", n)
		}
		h.checkCleanedUp(t, "p")
	})
}

func TestRunRetriesUntilContainerReady(t *testing.T) {
	h := newHarness(t)
	h.streamer.fn = func(_ context.Context, call int, s remotecommand.StreamOptions) error {
		if call <= 4 {
			return fmt.Errorf("attempt %d: %w", call, notReadyErr())
		}
		fmt.Fprint(s.Stdout, "done")
		return nil
	}
	h.clock.autoStep(t, time.Second)
	var stdout bytes.Buffer
	res, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}, Stdout: &stdout})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitCode != 0 || stdout.String() != "done" {
		t.Errorf("exit code %d, stdout %q", res.ExitCode, stdout.String())
	}
	if n := h.streamer.numCalls(); n != 5 {
		t.Errorf("%d exec calls, want 5 (4 refused, 1 good)", n)
	}
	// Backoff: 100ms growing by half, capped at MaxRetryInterval (200ms).
	want := []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}
	if diff := cmp.Diff(want, h.clock.timerDurations()); diff != "" {
		t.Errorf("retry timers mismatch (-want +got):\n%s", diff)
	}
	h.checkCleanedUp(t, "p")
}

func TestRunExecErrors(t *testing.T) {
	streamBroke := errors.New("stream reset by peer")
	tests := []struct {
		name     string
		fn       func(ctx context.Context, call int, s remotecommand.StreamOptions) error
		wantCode int
		check    func(t *testing.T, err error)
	}{
		{
			name: "non-zero exit",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return utilexec.CodeExitError{Err: errors.New("command terminated with non-zero exit code"), Code: 3}
			},
			wantCode: 3,
			check: func(t *testing.T, err error) {
				var ee *nodeexec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("error %v (%T) is not an *ExitError", err, err)
				}
				if diff := cmp.Diff(&nodeexec.ExitError{Node: testNode, Code: 3}, ee); diff != "" {
					t.Errorf("ExitError mismatch (-want +got):\n%s", diff)
				}
				if got := nodeexec.ExitCode(err); got != 3 {
					t.Errorf("ExitCode(err) = %d, want 3", got)
				}
			},
		},
		{
			name: "wrapped non-zero exit",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return fmt.Errorf("stream: %w", utilexec.CodeExitError{Err: errors.New("exit"), Code: 255})
			},
			wantCode: 255,
			check: func(t *testing.T, err error) {
				if got := nodeexec.ExitCode(err); got != 255 {
					t.Errorf("ExitCode(%v) = %d, want 255", err, got)
				}
			},
		},
		{
			name: "broken stream",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return streamBroke
			},
			wantCode: -1,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, streamBroke) {
					t.Errorf("error %v does not wrap the stream error", err)
				}
				if !strings.Contains(err.Error(), `exec in pod ns/p on node "n1"`) {
					t.Errorf("error %q does not say where the exec ran", err)
				}
				var pe *nodeexec.PodError
				if errors.As(err, &pe) {
					t.Errorf("error %v claims a pod failure for a healthy pod", err)
				}
				if !errors.Is(err, nodeexec.ErrOutcomeUnknown) || nodeexec.ExitCode(err) != nodeexec.ExitOutcomeUnknown {
					t.Errorf("error %v: want ErrOutcomeUnknown, exit status %d (got %d)", err, nodeexec.ExitOutcomeUnknown, nodeexec.ExitCode(err))
				}
			},
		},
		{
			name: "command not found",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "0f3a": OCI runtime exec failed: exec failed: unable to start container process: exec: "x": executable file not found in $PATH: unknown`)
			},
			wantCode: 127,
			check: func(t *testing.T, err error) {
				var se *podexec.StartError
				if !errors.As(err, &se) || se.Command != "x" || nodeexec.ExitCode(err) != 127 || errors.Is(err, nodeexec.ErrOutcomeUnknown) {
					t.Errorf("error %v (exit %d): want a StartError, exit status 127", err, nodeexec.ExitCode(err))
				}
				if want := `command "x" was not found on node "n1"`; !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			},
		},
		{
			name: "command not executable",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "0f3a": OCI runtime exec failed: exec failed: unable to start container process: exec: "/etc/hostname": permission denied: unknown`)
			},
			wantCode: 126,
			check: func(t *testing.T, err error) {
				if nodeexec.ExitCode(err) != 126 || errors.Is(err, nodeexec.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "is not executable") {
					t.Errorf("error %v (exit %d): want exit status 126", err, nodeexec.ExitCode(err))
				}
			},
		},
		{
			name: "exec refused by the API server",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "p", errors.New("no"))
			},
			wantCode: -1,
			check: func(t *testing.T, err error) {
				if !apierrors.IsForbidden(err) || errors.Is(err, nodeexec.ErrOutcomeUnknown) || nodeexec.ExitCode(err) != 1 {
					t.Errorf("error %v (exit %d): want the refusal, not an unknown outcome", err, nodeexec.ExitCode(err))
				}
			},
		},
		{
			name: "connection refused before the exec",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			},
			wantCode: -1,
			check: func(t *testing.T, err error) {
				if errors.Is(err, nodeexec.ErrOutcomeUnknown) {
					t.Errorf("error %v: a connection never made is not an unknown outcome", err)
				}
			},
		},
		{
			name: "container-not-found text without an upgrade failure is not retried",
			fn: func(context.Context, int, remotecommand.StreamOptions) error {
				return errors.New(`container not found ("debugger")`)
			},
			wantCode: -1,
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "container not found") {
					t.Errorf("error = %v", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.streamer.fn = tt.fn
			res, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
			if err == nil {
				t.Fatal("Run succeeded")
			}
			tt.check(t, err)
			if res.ExitCode != tt.wantCode {
				t.Errorf("Result.ExitCode = %d, want %d", res.ExitCode, tt.wantCode)
			}
			if n := h.streamer.numCalls(); n != 1 {
				t.Errorf("%d exec calls, want 1", n)
			}
			h.checkCleanedUp(t, "p")
		})
	}
}

func TestRunStreamBrokenByPodFailure(t *testing.T) {
	h := newHarness(t)
	streamBroke := errors.New("stream reset")
	h.streamer.fn = func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
		// The node evicts the pod while the command runs.
		st := runningStatus()
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		h.setStatus(t, "p", st)
		waitFor(t, "the tracker to see the eviction", func() bool {
			p := h.tracker.Get("p")
			return p != nil && p.Status.Phase == corev1.PodFailed
		})
		return streamBroke
	}
	_, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
	var pe *nodeexec.PodError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *PodError", err)
	}
	want := &nodeexec.PodError{Node: testNode, Namespace: testNS, Pod: "p", Reason: "Evicted", Message: "The node was low on resource: memory."}
	if diff := cmp.Diff(want, pe); diff != "" {
		t.Errorf("PodError mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(err, streamBroke) {
		t.Errorf("error %v lost the stream error", err)
	}
	h.checkCleanedUp(t, "p")
}

func TestRunPodFailure(t *testing.T) {
	tests := []struct {
		name   string
		status corev1.PodStatus
		want   *nodeexec.PodError
	}{
		{
			name: "image pull error",
			status: corev1.PodStatus{Phase: corev1.PodPending, StartTime: ptr.To(metav1.NewTime(t0)), ContainerStatuses: []corev1.ContainerStatus{
				waiting(testContainer, "ErrImagePull", `pull access denied for nosuch, repository does not exist`),
			}},
			want: &nodeexec.PodError{Node: testNode, Namespace: testNS, Pod: "p", Reason: "ErrImagePull", Message: `pull access denied for nosuch, repository does not exist`, Image: "busybox"},
		},
		{
			name:   "rejected by the kubelet",
			status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "insufficient cpu"},
			want:   &nodeexec.PodError{Node: testNode, Namespace: testNS, Pod: "p", Reason: "OutOfcpu", Message: "insufficient cpu"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ch := h.start(t.Context(), testPod("p", corev1.PodStatus{}), nodeexec.Request{Command: []string{"x"}})
			h.setStatus(t, "p", tt.status)
			o := wait(t, ch)
			var pe *nodeexec.PodError
			if !errors.As(o.err, &pe) {
				t.Fatalf("error %v is not a *PodError", o.err)
			}
			if diff := cmp.Diff(tt.want, pe); diff != "" {
				t.Errorf("PodError mismatch (-want +got):\n%s", diff)
			}
			if o.res.ExitCode != -1 {
				t.Errorf("ExitCode = %d, want -1", o.res.ExitCode)
			}
			if n := h.streamer.numCalls(); n != 0 {
				t.Errorf("%d exec calls into a pod that cannot run", n)
			}
			h.checkCleanedUp(t, "p")
		})
	}
}

func TestRunTimeout(t *testing.T) {
	tests := []struct {
		name      string
		status    corev1.PodStatus
		fn        func(ctx context.Context, call int, s remotecommand.StreamOptions) error
		wantExecs int
	}{
		{
			name:   "command runs too long",
			status: runningStatus(),
			fn: func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
				<-ctx.Done()
				return fmt.Errorf("stream: %w", ctx.Err())
			},
			wantExecs: 1,
		},
		{
			name:   "pod never starts",
			status: corev1.PodStatus{Phase: corev1.PodPending},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.streamer.fn = tt.fn
			res, err := h.run(t, t.Context(), testPod("p", tt.status), nodeexec.Request{Command: []string{"x"}, Timeout: 50 * time.Millisecond})
			if !errors.Is(err, nodeexec.ErrTimeout) {
				t.Fatalf("error %v does not wrap ErrTimeout", err)
			}
			if errors.Is(err, context.Canceled) {
				t.Errorf("timeout error %v also claims cancellation", err)
			}
			if !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), "50ms") {
				t.Errorf("error %q does not name the node and the timeout", err)
			}
			if got := nodeexec.ExitCode(err); got != 124 {
				t.Errorf("ExitCode(err) = %d, want 124", got)
			}
			if res.ExitCode != -1 {
				t.Errorf("Result.ExitCode = %d, want -1", res.ExitCode)
			}
			if n := h.streamer.numCalls(); n != tt.wantExecs {
				t.Errorf("%d exec calls, want %d", n, tt.wantExecs)
			}
			h.checkCleanedUp(t, "p")
		})
	}
}

func TestRunCancel(t *testing.T) {
	t.Run("during exec", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		h.streamer.fn = func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		}
		_, err := h.run(t, ctx, testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if errors.Is(err, nodeexec.ErrTimeout) {
			t.Errorf("cancellation %v reported as a timeout", err)
		}
		h.checkCleanedUp(t, "p")
	})

	t.Run("while waiting for the container", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ch := h.start(ctx, testPod("p", corev1.PodStatus{}), nodeexec.Request{Command: []string{"x"}})
		h.waitForPod(t, "p")
		cancel()
		o := wait(t, ch)
		if !errors.Is(o.err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", o.err)
		}
		if n := h.streamer.numCalls(); n != 0 {
			t.Errorf("%d exec calls", n)
		}
		h.checkCleanedUp(t, "p")
	})

	t.Run("with a cause", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithCancelCause(t.Context())
		interrupted := errors.New("interrupted")
		h.streamer.fn = func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
			cancel(interrupted)
			<-ctx.Done()
			return ctx.Err()
		}
		_, err := h.run(t, ctx, testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
		if !errors.Is(err, interrupted) {
			t.Fatalf("error %v, want the cancel cause", err)
		}
		h.checkCleanedUp(t, "p")
	})
}

func TestRunCreateFails(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		name          string
		err           error
		wantForbidden bool
	}{
		{
			name:          "pod security",
			err:           apierrors.NewForbidden(pods, "p", errors.New(`violates PodSecurity "baseline:latest": privileged`)),
			wantForbidden: true,
		},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd unavailable"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			res, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if errors.Is(err, nodeexec.ErrForbidden) != tt.wantForbidden {
				t.Errorf("errors.Is(%v, ErrForbidden) = %v, want %v", err, !tt.wantForbidden, tt.wantForbidden)
			}
			if !strings.Contains(err.Error(), "ns") {
				t.Errorf("error %q does not name the namespace", err)
			}
			if strings.Contains(err.Error(), "deleting pod") {
				t.Errorf("error %q reports a failed clean-up of a pod that was never created", err)
			}
			if n := h.streamer.numCalls(); n != 0 {
				t.Errorf("%d exec calls after a failed create", n)
			}
			want := nodeexec.Result{Node: testNode, ExitCode: -1, Backend: testBackend, Namespace: testNS, Pod: "p", Started: t0, Finished: t0}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunDeleteErrors(t *testing.T) {
	t.Run("reported", func(t *testing.T) {
		h := newHarness(t)
		var deletes atomic.Int32
		h.cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			deletes.Add(1)
			return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
		})
		h.clock.autoStep(t, time.Second)
		res, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
		if err == nil || !strings.Contains(err.Error(), "deleting pod ns/p") || !strings.Contains(err.Error(), "etcd unavailable") {
			t.Errorf("error = %v, want one reporting the failed deletion", err)
		}
		if res.ExitCode != 0 {
			t.Errorf("ExitCode = %d, want 0 (the command itself succeeded)", res.ExitCode)
		}
		// Retried with a backoff capped at 5s for DefaultCleanupTimeout (30s).
		if n := deletes.Load(); n < 5 || n > 15 {
			t.Errorf("%d delete attempts, want 5..15 (retried with capped backoff within %s)", n, podexec.DefaultCleanupTimeout)
		}
	})

	t.Run("retried until it succeeds", func(t *testing.T) {
		h := newHarness(t)
		var deletes atomic.Int32
		h.cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if deletes.Add(1) <= 3 {
				return true, nil, errors.New("EOF")
			}
			return false, nil, nil
		})
		h.clock.autoStep(t, time.Second)
		if _, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}}); err != nil {
			t.Errorf("Run: %v", err)
		}
		if n := deletes.Load(); n != 4 {
			t.Errorf("%d delete attempts, want 4", n)
		}
		if _, err := h.cs.CoreV1().Pods(testNS).Get(t.Context(), "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod still there after the retried delete: %v", err)
		}
	})

	t.Run("already gone is fine", func(t *testing.T) {
		h := newHarness(t)
		h.streamer.fn = func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
			// Someone else deletes the pod as the command ends.
			return h.cs.CoreV1().Pods(testNS).Delete(ctx, "p", metav1.DeleteOptions{})
		}
		if _, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}}); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestRunNameCollisionLeavesOtherPod(t *testing.T) {
	// A pod of the same name already exists (another run's): the create
	// fails, and the other pod must not be deleted.
	other := testPod("p", runningStatus())
	other.Labels[nodeexec.LabelRunID] = "other-run"
	h := newHarness(t, other)
	_, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
	if !apierrors.IsAlreadyExists(errors.Unwrap(err)) && !strings.Contains(fmt.Sprint(err), "already exists") {
		t.Fatalf("error %v, want the create's AlreadyExists", err)
	}
	if n := h.streamer.numCalls(); n != 0 {
		t.Errorf("%d exec calls into another run's pod", n)
	}
	got, gerr := h.cs.CoreV1().Pods(testNS).Get(t.Context(), "p", metav1.GetOptions{})
	if gerr != nil {
		t.Fatalf("another run's pod was deleted after a name collision: %v", gerr)
	}
	if got.Labels[nodeexec.LabelRunID] != "other-run" {
		t.Errorf("pod labels %v", got.Labels)
	}
}

func TestRunCreateAndDeleteForbidden(t *testing.T) {
	// Without RBAC for pods both the create and the clean-up delete are
	// refused; only the create's refusal is news to the user.
	pods := schema.GroupResource{Resource: "pods"}
	h := newHarness(t)
	h.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(pods, "p", errors.New(`User "alice" cannot create resource "pods"`))
	})
	h.cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(pods, "p", errors.New(`User "alice" cannot delete resource "pods"`))
	})
	_, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}})
	if !errors.Is(err, nodeexec.ErrForbidden) {
		t.Fatalf("error %v, want ErrForbidden", err)
	}
	if strings.Contains(err.Error(), "deleting pod") {
		t.Errorf("error reports a failed clean-up of a pod that was never created:\n%v", err)
	}
}

// TestRunStaged: a command line whose program another container of the pod
// puts in place (Launch.Stager): the runtime's "not found" for that
// program is "not yet", retried with the container-not-ready backoff; a
// "not found" for any other program is the command's own (exit 127); the
// stager failing ends the run with a PodError naming it.
func TestRunStaged(t *testing.T) {
	const prog = "/nodeexec-agent/nodeexec"
	notFound := func(p string) error {
		return fmt.Errorf(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "0f3a": OCI runtime exec failed: exec failed: unable to start container process: exec: %q: stat %s: no such file or directory: unknown`, p, p)
	}
	launch := func(pod *corev1.Pod) podexec.Launch {
		return podexec.Launch{Pod: pod, Container: testContainer, Argv: []string{prog, "agent", "run", "--", "x"}, Stager: "stager"}
	}
	withStager := func(st corev1.ContainerState) corev1.PodStatus {
		s := runningStatus()
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: "stager", State: st})
		return s
	}
	run := func(t *testing.T, h *harness, pod *corev1.Pod) (nodeexec.Result, error) {
		t.Helper()
		ch := make(chan outcome, 1)
		go func() {
			res, err := h.exec.RunResumable(t.Context(), launch(pod), nodeexec.Request{Node: testNode, Command: []string{"x"}})
			ch <- outcome{res, err}
		}()
		o := wait(t, ch)
		return o.res, o.err
	}

	t.Run("retried until in place", func(t *testing.T) {
		h := newHarness(t)
		h.streamer.fn = func(_ context.Context, call int, s remotecommand.StreamOptions) error {
			if call <= 2 {
				return notFound(prog)
			}
			return nil
		}
		h.clock.autoStep(t, time.Second)
		res, err := run(t, h, testPod("p", withStager(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}})))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Run: exit %d, %v; want 0 after the program appeared", res.ExitCode, err)
		}
		if n := h.streamer.numCalls(); n != 3 {
			t.Errorf("%d exec calls, want 3 (2 not yet in place, 1 good)", n)
		}
		h.checkCleanedUp(t, "p")
	})
	t.Run("stdin waits for the probe", func(t *testing.T) {
		// An exec refused after its stream was set up may have read stdin:
		// with stdin, only the probe is retried, and the command's exec,
		// made once, gets all of it.
		h := newHarness(t)
		var got string
		probes := 0
		h.streamer.fn = func(_ context.Context, call int, s remotecommand.StreamOptions) error {
			if s.Stdin == nil { // a probe
				if probes++; probes <= 2 {
					return notFound(prog)
				}
				return nil
			}
			b, _ := io.ReadAll(s.Stdin)
			got = string(b)
			return nil
		}
		h.clock.autoStep(t, time.Second)
		l := launch(testPod("p", withStager(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})))
		l.StagedProbe = []string{prog, "version", "--client"}
		ch := make(chan outcome, 1)
		go func() {
			res, err := h.exec.RunResumable(t.Context(), l, nodeexec.Request{Node: testNode, Command: []string{"x"}, Stdin: strings.NewReader("input\n")})
			ch <- outcome{res, err}
		}()
		if o := wait(t, ch); o.err != nil {
			t.Fatalf("Run: %v", o.err)
		}
		if n := h.streamer.numCalls(); n != 4 || probes != 3 || got != "input\n" {
			t.Errorf("%d exec calls (%d probes), stdin %q; want 2 refused probes, 1 good, then the command with all of stdin", n, probes, got)
		}
		h.streamer.mu.Lock()
		defer h.streamer.mu.Unlock()
		if c := h.streamer.calls[0].Opts.Command; len(c) != 3 || c[1] != "version" || h.streamer.calls[0].Opts.Stdin {
			t.Errorf("first exec %q (stdin %v): want the probe, without stdin", c, h.streamer.calls[0].Opts.Stdin)
		}
	})
	t.Run("the command's own not found", func(t *testing.T) {
		h := newHarness(t)
		h.streamer.fn = func(context.Context, int, remotecommand.StreamOptions) error { return notFound("/bin/nosuch") }
		h.clock.autoStep(t, time.Second)
		res, err := run(t, h, testPod("p", withStager(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})))
		if res.ExitCode != 127 || nodeexec.ExitCode(err) != 127 {
			t.Errorf("exit %d, %v: want 127, the command not found", res.ExitCode, err)
		}
		if n := h.streamer.numCalls(); n != 1 {
			t.Errorf("%d exec calls, want 1", n)
		}
	})
	for name, st := range map[string]corev1.ContainerState{
		"stager exited non-zero":  {Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "agent copy: no space left on device"}},
		"stager image not pulled": {Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.streamer.fn = func(context.Context, int, remotecommand.StreamOptions) error { return notFound(prog) }
			h.clock.autoStep(t, time.Second)
			_, err := run(t, h, testPod("p", withStager(st)))
			var pe *nodeexec.PodError
			if !errors.As(err, &pe) || !strings.Contains(pe.Message, `container "stager", which puts the command in place`) {
				t.Fatalf("error %v: want a PodError naming the stager", err)
			}
			if errors.Is(err, nodeexec.ErrOutcomeUnknown) {
				t.Errorf("error %v: the command never ran, its outcome is not unknown", err)
			}
			h.checkCleanedUp(t, "p")
		})
	}
}
