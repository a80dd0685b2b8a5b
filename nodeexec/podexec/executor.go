package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Defaults for Options.
const (
	// DefaultFirstAttemptDelay is how long after the kubelet picks the pod up
	// (its first status report) an exec is attempted even though neither a
	// Started event nor a running status has been seen.
	DefaultFirstAttemptDelay = 700 * time.Millisecond
	// DefaultRetryInterval is the first pause between exec attempts made
	// before the container exists; it grows by half each time up to
	// DefaultMaxRetryInterval.
	DefaultRetryInterval    = 100 * time.Millisecond
	DefaultMaxRetryInterval = 1 * time.Second
	// DefaultCleanupTimeout bounds each pod deletion request after the run,
	// which is made even when the run's context is cancelled. A failed
	// deletion is retried with backoff (200ms doubling to 5s, 10% jitter)
	// until the pod's deadline (nodeexec.AnnotationDeadline) — or, after the
	// caller cancelled the run (Ctrl-C), for at most CancelCleanupBudget —
	// after which the run's Lease expires and the collector deletes the pod.
	DefaultCleanupTimeout = 30 * time.Second
	// CancelCleanupBudget bounds the retried pod deletion, and then the
	// Lease's deletion, of a run cancelled by its caller: cleanup after
	// Ctrl-C takes at most twice this.
	CancelCleanupBudget = 10 * time.Second
	// DeleteGracePeriod is the grace period of the pod deletion, in seconds.
	DeleteGracePeriod int64 = 1
)

// Streamer runs a command in a container over the exec subresource. It
// returns an error satisfying IsContainerNotReady when the attempt was
// refused because the container does not run yet (nothing was streamed), a
// k8s.io/client-go/util/exec.CodeExitError for a non-zero exit, nil for exit 0.
type Streamer interface {
	Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error
}

// executorOptions configure an executor.
type executorOptions struct {
	// Client creates, watches and deletes pods (RBAC: create, get, list,
	// watch, delete on pods). Required.
	Client kubernetes.Interface
	// Streamer runs the command. Required; see NewStreamer.
	Streamer Streamer
	// Tracker is the shared watch over the pods this executor creates; the
	// pods must match its namespace and selector. Required.
	Tracker *tracker
	// Backend is the name reported in Result.Backend. Required.
	Backend string
	// Lease, when set, is held by every Run (RBAC: create, get, update,
	// delete on leases.coordination.k8s.io), and every pod is labelled with
	// its name and owned by it (OwnedBy), so that the pods of a client that
	// died are collected (CollectExpired). The pod backends set it.
	Lease *runLease
	// Clock drives retry timers and timestamps. Defaults to the real clock.
	Clock clock.WithTicker
	// FirstAttemptDelay, RetryInterval, MaxRetryInterval: see the Default
	// constants, which are used when these are zero.
	FirstAttemptDelay, RetryInterval, MaxRetryInterval time.Duration
}

// executor runs commands in pods it creates.
type executor struct {
	o executorOptions
}

// newExecutor validates o and returns an executor.
func newExecutor(o executorOptions) (*executor, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("podexec: Options.Client is nil")
	case o.Streamer == nil:
		return nil, errors.New("podexec: Options.Streamer is nil")
	case o.Tracker == nil:
		return nil, errors.New("podexec: Options.Tracker is nil")
	case o.Backend == "":
		return nil, errors.New("podexec: Options.Backend is empty")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.FirstAttemptDelay == 0 {
		o.FirstAttemptDelay = DefaultFirstAttemptDelay
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.MaxRetryInterval == 0 {
		o.MaxRetryInterval = DefaultMaxRetryInterval
	}
	return &executor{o: o}, nil
}

// RunResumable creates l.Pod, runs l.Argv in its container l.Container
// over exec once it runs, and deletes the pod. A command line that keeps
// its outcome in the container (l.Resume says how to read it) has a
// stream cut after the command started reconnected (ExecResuming) instead
// of ending the run with nodeexec.ErrOutcomeUnknown. See Launch.Stager for
// a program put in place by another container.
func (e *executor) RunResumable(ctx context.Context, l Launch, req nodeexec.Request) (res nodeexec.Result, err error) {
	pod, container, argv, resume := l.Pod, l.Container, l.Argv, l.Resume
	log := logr.FromContextOrDiscard(ctx)
	res = nodeexec.Result{Node: req.Node, ExitCode: -1, Started: e.o.Clock.Now(), Backend: e.o.Backend, Namespace: pod.Namespace, Pod: pod.Name}
	req, firstOutput := nodeexec.RecordFirstOutput(req, e.o.Clock.Now)
	defer func() {
		res.Finished = e.o.Clock.Now()
		res.FirstOutput = firstOutput()
	}()

	timeout := req.EffectiveTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("node %q: %w after %s", req.Node, nodeexec.ErrTimeout, timeout))
	defer cancel()

	release := e.o.Tracker.Acquire(ctx)
	defer release()
	changed, unsubscribe := e.o.Tracker.Subscribe(pod.Name)
	defer unsubscribe()

	if e.o.Lease != nil {
		lease, releaseLease, err := e.o.Lease.Acquire(ctx)
		if err != nil {
			return res, err
		}
		defer releaseLease()
		pod = OwnedBy(pod, lease)
	}

	pods := e.o.Client.CoreV1().Pods(pod.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	createErr := err
	defer func() {
		if apierrors.IsAlreadyExists(createErr) {
			return // the name belongs to another pod: not ours to delete
		}
		// Delete even when ctx is done: a cancelled or timed-out run must not
		// leave its pod behind. After a failed create the pod may still exist
		// (the request reached the server before ctx ended), so try anyway.
		derr := e.deletePod(ctx, pod)
		switch {
		case derr == nil:
			log.V(1).Info("deleted pod", "pod", pod.Name)
		case createErr != nil:
			// The create failed; nothing known to delete, and the create's error says why.
		default:
			err = errors.Join(err, fmt.Errorf("deleting pod %s/%s (its run's Lease expires and the pod is collected by the next nodeexec invocation or the watcher): %w", pod.Namespace, pod.Name, derr))
		}
	}()
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			return res, cerr
		}
		return res, CreateError(pod, err)
	}
	log.V(1).Info("created pod", "pod", pod.Name, "node", req.Node)

	streams := remotecommand.StreamOptions{
		Stdin:             req.Stdin,
		Stdout:            orDiscard(req.Stdout),
		Tty:               req.TTY,
		TerminalSizeQueue: req.TerminalSizeQueue,
	}
	if !req.TTY {
		streams.Stderr = orDiscard(req.Stderr)
	}
	execOpts := &corev1.PodExecOptions{
		Container: container,
		Command:   argv,
		Stdin:     req.Stdin != nil,
		Stdout:    true,
		Stderr:    !req.TTY,
		TTY:       req.TTY,
	}

	var (
		due      <-chan time.Time // next exec attempt, once the kubelet has the pod
		timer    clock.Timer
		interval = e.o.RetryInterval
		attempts int
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	schedule := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = e.o.Clock.NewTimer(d)
		due = timer.C()
	}
	attemptNow, retrying := false, false
	// backoff waits for the next attempt after a refused one.
	backoff := func() {
		retrying = true
		schedule(interval)
		interval = min(interval*3/2, e.o.MaxRetryInterval)
	}
	// probe: run l.StagedProbe before the command (see Launch.StagedProbe)
	probe := l.Stager != "" && req.Stdin != nil && len(l.StagedProbe) > 0 && l.StagedProbe[0] == argv[0]
	for {
		cur := e.o.Tracker.Get(pod.Name)
		if cur != nil && cur.UID == created.UID {
			if perr := PodFailure(cur, container, req.Node); perr != nil {
				return res, WithPullReason(ctx, e.o.Client, perr)
			}
			if perr := stagerFailure(cur, l.Stager, req.Node); perr != nil {
				return res, WithPullReason(ctx, e.o.Client, perr)
			}
			switch {
			case retrying:
				// After a refused attempt only the backoff timer triggers the next.
			case containerRunning(cur, container) || e.o.Tracker.Started(pod.Name, container):
				attemptNow = true
			case due == nil && cur.Status.StartTime != nil:
				schedule(e.o.FirstAttemptDelay)
			}
		}
		if attemptNow && probe {
			// Argv[0] first, with nothing to lose: stdin waits for it.
			attemptNow = false
			attempts++
			perr := e.o.Streamer.Exec(ctx, pod.Namespace, pod.Name, &corev1.PodExecOptions{Container: container, Command: l.StagedProbe, Stdout: true, Stderr: true},
				remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			if (IsContainerNotReady(perr) || notStaged(perr, l)) && ctxErr(ctx) == nil {
				log.V(2).Info("command not in place yet", "attempt", attempts, "err", perr)
				backoff()
			} else {
				// In place (or failing otherwise, which the command's
				// own exec reports): the command now.
				probe, attemptNow = false, true
				continue
			}
		}
		if attemptNow {
			attemptNow = false
			attempts++
			log.V(2).Info("exec attempt", "attempt", attempts, "sinceCreate", e.o.Clock.Since(res.Started).String(), "startedEvent", e.o.Tracker.Started(pod.Name, container))
			xerr := ExecResuming(ctx, e.o.Streamer, e.o.Clock, pod.Namespace, pod.Name, execOpts, streams, resume)
			if (!IsContainerNotReady(xerr) && !notStaged(xerr, l)) || ctxErr(ctx) != nil {
				log.V(1).Info("exec finished", "attempts", attempts, "err", xerr)
				return e.finish(ctx, res, created, container, req.Node, strings.Join(argv[:min(len(argv), 1)], ""), xerr)
			}
			log.V(2).Info("container not ready for exec yet", "attempt", attempts, "err", xerr)
			backoff()
		}
		select {
		case <-changed:
		case <-due:
			due, timer = nil, nil
			attemptNow = true
		case <-ctx.Done():
			return res, ctxErr(ctx)
		}
	}
}

// notStaged reports an exec that failed because l.Argv[0], which l.Stager
// puts in place, is not there yet: the runtime could not find it, so the
// command never ran.
func notStaged(err error, l Launch) bool {
	if l.Stager == "" || len(l.Argv) == 0 {
		return false
	}
	se := StartFailure(err, "", l.Argv[0])
	return se != nil && se.Code == ExitNotFound && se.Command == l.Argv[0]
}

// stagerFailure reports why pod's container stager (Launch.Stager) will
// not put the command in place: PodFailure's reasons for it (it cannot
// start, or it exited), but for an exit 0, which is its job done. Nil when
// stager is empty, or still may.
func stagerFailure(pod *corev1.Pod, stager, node string) *nodeexec.PodError {
	if stager == "" {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == stager && t != nil && t.ExitCode == 0 {
			return nil
		}
	}
	pe := PodFailure(pod, stager, node)
	if pe != nil {
		pe.Message = fmt.Sprintf("container %q, which puts the command in place, cannot: %s", stager, pe.Message)
	}
	return pe
}

// deletePod deletes pod, retrying with backoff until it is gone or the
// cleanup deadline passes (see DefaultCleanupTimeout). Not found is success.
func (e *executor) deletePod(ctx context.Context, pod *corev1.Pod) error {
	now := e.o.Clock.Now()
	deadline, perr := time.Parse(time.RFC3339, pod.Annotations[nodeexec.AnnotationDeadline])
	if perr != nil || deadline.Before(now.Add(DefaultCleanupTimeout)) {
		deadline = now.Add(DefaultCleanupTimeout)
	}
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), nodeexec.ErrTimeout) {
		deadline = now.Add(CancelCleanupBudget) // cancelled by the caller: bounded
	}
	pods := e.o.Client.CoreV1().Pods(pod.Namespace)
	return retryUntil(context.WithoutCancel(ctx), e.o.Clock, deadline, func(ctx context.Context) error {
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(DeleteGracePeriod)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// finish turns the exec outcome into a Result and error.
func (e *executor) finish(ctx context.Context, res nodeexec.Result, pod *corev1.Pod, container, node, argv0 string, xerr error) (nodeexec.Result, error) {
	if xerr == nil {
		res.ExitCode = 0
		return res, nil
	}
	var ce utilexec.CodeExitError
	if errors.As(xerr, &ce) {
		res.ExitCode = ce.Code
		return res, &nodeexec.ExitError{Node: node, Code: ce.Code}
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return res, cerr
	}
	// The runtime could not start the command: not found (127) or not
	// executable (126), as a shell says; the outcome is known.
	if se := StartFailure(xerr, node, argv0); se != nil {
		res.ExitCode = se.Code
		return res, se
	}
	// The stream broke: say why if the pod knows.
	if cur := e.o.Tracker.Get(pod.Name); cur != nil && cur.UID == pod.UID {
		if perr := PodFailure(cur, container, node); perr != nil {
			return res, errors.Join(perr, xerr)
		}
	}
	if errors.Is(xerr, nodeexec.ErrOutcomeUnknown) {
		return res, fmt.Errorf("exec in pod %s/%s on node %q: %w", pod.Namespace, pod.Name, node, xerr)
	}
	if StreamBroke(xerr) {
		return res, fmt.Errorf("exec in pod %s/%s on node %q: %w: %w", pod.Namespace, pod.Name, node, nodeexec.ErrOutcomeUnknown, xerr)
	}
	return res, fmt.Errorf("exec in pod %s/%s on node %q: %w", pod.Namespace, pod.Name, node, xerr)
}

// ErrNotStarted is wrapped by a Streamer's error when the command was
// certainly not started (the connection was never made, or the other end
// refused the request): StreamBroke is false for it, and there is nothing
// to resume.
var ErrNotStarted = errors.New("the command was not started")

// StreamBroke reports whether an exec error, met after the container was
// running, means the stream was cut with the command started: not a refusal
// by the API server (a Status: RBAC, not found, a bad request), not a
// connection that was never made (refused, or ErrNotStarted), and not the
// container runtime's word that it could not start the command
// (StartFailure).
func StreamBroke(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrNotStarted) || StartFailure(err, "", "") != nil {
		return false
	}
	return true
}

// ctxErr is the cause of ctx's end (an error wrapping nodeexec.ErrTimeout
// when the request's timeout expired), or nil while ctx is live.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// PodFailure reports why pod cannot (or can no longer) run a command in
// container, or nil if it still may.
func PodFailure(pod *corev1.Pod, container, node string) *nodeexec.PodError {
	fail := func(reason, msg string) *nodeexec.PodError {
		return &nodeexec.PodError{Node: node, Namespace: pod.Namespace, Pod: pod.Name, Reason: reason, Message: msg}
	}
	if pod.DeletionTimestamp != nil {
		return fail("Deleted", "the pod is being deleted")
	}
	switch pod.Status.Phase {
	case corev1.PodFailed:
		reason := pod.Status.Reason
		if reason == "" {
			reason = "Failed"
		}
		return fail(reason, pod.Status.Message)
	case corev1.PodSucceeded:
		return fail("Completed", "the pod's container exited before the command ran")
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		if w := cs.State.Waiting; fatalWaiting(w) {
			pe := fail(w.Reason, w.Message)
			if nodeexec.IsImagePullReason(w.Reason) {
				pe.Image = ContainerImage(pod, container)
				// An image volume's pull fails the container that mounts
				// it: name that image, and the volume.
				for _, v := range pod.Spec.Volumes {
					if v.Image != nil && v.Image.Reference != pe.Image && strings.Contains(w.Message, `"`+v.Image.Reference+`"`) {
						pe.Image = v.Image.Reference
						pe.Message = fmt.Sprintf("image volume %q: %s", v.Name, w.Message)
						break
					}
				}
			}
			return pe
		}
		if t := cs.State.Terminated; t != nil {
			return fail(t.Reason, fmt.Sprintf("container %q exited with code %d: %s", container, t.ExitCode, t.Message))
		}
	}
	return nil
}

// ContainerImage returns the image of pod's container (or ephemeral
// container) named container: the spec's reference, as the user gave it, or,
// for a pod without its spec (an informer's trimmed copy), the image its
// container status reports (the same reference until the image is pulled).
func ContainerImage(pod *corev1.Pod, container string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == container {
			return c.Image
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == container {
			return c.Image
		}
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.Name == container {
				return cs.Image
			}
		}
	}
	return ""
}

// FatalWaiting reports whether a container waiting in w will not start
// before a short run's deadline, or needs the user to act: image pull
// failures and container creation errors. Nil is not fatal. Shared by the
// backends and the watcher, which classify a pod's waiting container with it.
//
// A CreateContainerConfigError whose message is the kubelet's own cache
// catching up (TransientConfigError) is not fatal: the kubelet retries, and
// then starts the container or names the missing Secret or ConfigMap.
func FatalWaiting(w *corev1.ContainerStateWaiting) bool {
	if w == nil {
		return false
	}
	switch w.Reason {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
		"CreateContainerError", "RunContainerError":
		return true
	case "CreateContainerConfigError":
		return !TransientConfigError(w.Message)
	}
	return false
}

// TransientConfigError reports a CreateContainerConfigError message that
// says the kubelet has not yet read the pod's Secrets or ConfigMaps, rather
// than that one is missing: its watch-based cache did not sync within its
// one-second wait ("failed to sync secret cache: timed out waiting for the
// condition"), or the pod was not yet registered with it ("object "ns"/"name"
// not registered"). Seen on loaded nodes and after kubelet restarts; the
// kubelet retries the container on its next pod sync.
func TransientConfigError(message string) bool {
	return strings.HasPrefix(message, "failed to sync ") && strings.Contains(message, " cache") ||
		strings.HasPrefix(message, "object ") && strings.HasSuffix(message, " not registered")
}

// fatalWaiting is FatalWaiting, plus a container the kubelet keeps restarting.
func fatalWaiting(w *corev1.ContainerStateWaiting) bool {
	return FatalWaiting(w) || w != nil && w.Reason == "CrashLoopBackOff"
}

func containerRunning(pod *corev1.Pod, container string) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
}

// CreateError explains a failed pod create: a Pod Security rejection names
// the namespace's level and the fix; an RBAC refusal names the permission.
// Both wrap nodeexec.ErrForbidden.
func CreateError(pod *corev1.Pod, err error) error {
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	text := err.Error()
	if i := strings.Index(text, "violates PodSecurity"); i >= 0 {
		level := "restricted or baseline"
		if j := strings.Index(text[i:], "\""); j >= 0 {
			rest := text[i+j+1:]
			if k := strings.IndexAny(rest, ":\""); k >= 0 {
				level = rest[:k]
			}
		}
		return fmt.Errorf("%w: namespace %q enforces Pod Security level %q, which rejects this pod (%s); "+
			"run in a namespace that allows it (-n/--namespace), or relabel this one: "+
			"kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite",
			nodeexec.ErrForbidden, pod.Namespace, level, text[i:], pod.Namespace)
	}
	return fmt.Errorf("%w: creating pod %s/%s: %s (RBAC: this backend needs create, get, list, watch and delete on pods, and create on pods/exec, in namespace %q)",
		nodeexec.ErrForbidden, pod.Namespace, pod.Name, text, pod.Namespace)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// IsContainerNotReady reports whether an exec attempt was refused because the
// container is not (yet) running, before anything was streamed: the kubelet
// answers the upgrade with an error naming the missing container. The API
// server returns it as an upgrade failure (Kubernetes 1.35 and later), or,
// on older servers whose WebSocket stream translator upgrades the client
// before it asks the kubelet, as a plain error on the stream's error
// channel whose text is the server's "unable to upgrade connection: ..."
// (seen on 1.34: the kubelet's runtime cache not yet holding a container the
// pod's status already shows running). Either way the command never started,
// so another attempt is safe.
func IsContainerNotReady(err error) bool {
	if err == nil || !httpstream.IsUpgradeFailure(err) && !strings.Contains(err.Error(), "unable to upgrade connection: ") {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"container not found", "not running", "No such container", "container is not created or running"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// restStreamer is the Streamer that talks to the API server: WebSocket
// (v5.channel.k8s.io) first, SPDY when the server cannot upgrade to WebSocket.
type restStreamer struct {
	config *rest.Config
	client rest.Interface
}

// NewStreamer returns the Streamer for a real cluster. client is
// kubernetes.Interface.CoreV1().RESTClient() (or any REST client for the
// core/v1 API); config supplies the transport. RBAC: create on pods/exec
// (WebSocket exec is authorised as create since Kubernetes 1.35).
func NewStreamer(config *rest.Config, client rest.Interface) Streamer {
	return &restStreamer{config: config, client: client}
}

func (s *restStreamer) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	u := s.client.Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(s.config, "GET", u.String())
	if err != nil {
		return fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(s.config, "POST", u)
	if err != nil {
		return fmt.Errorf("spdy executor: %w", err)
	}
	// Fall back to SPDY only when the server cannot speak WebSocket, not when
	// the container is merely not running yet (that attempt is retried).
	fallback := func(err error) bool {
		return (httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)) && !IsContainerNotReady(err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, fallback)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, streams)
}
