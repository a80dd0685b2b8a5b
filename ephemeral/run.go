package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/retry"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// Run adds an ephemeral container running req to the pod, streams its
// output, and returns its exit code. req.Node, when set, must be the pod's
// node (else nodeexec.ErrWrongNode); req.TTY is not supported. The container stays in
// the pod (see the package documentation) but its process has ended when Run
// returns, also on timeout and cancellation (unless it never started, or the
// kill failed: then the error says so, and the on-node `timeout` ends it at
// the deadline). Errors: those of Target, ErrEphemeralContainersDisabled,
// nodeexec.ErrForbidden (RBAC or Pod Security on the
// pods/ephemeralcontainers patch), *nodeexec.ExitError, an error wrapping
// nodeexec.ErrTimeout, *nodeexec.PodError (the container could not start:
// image pull, runAsNonRoot with a root image, ...), or a stream error. When
// the attach broke after the command started, the exit code still comes from
// the container's status, and the error wraps nodeexec.ErrOutcomeUnknown
// (output after the break is lost) and, for a non-zero code, a
// *nodeexec.ExitError with it: nodeexec.ExitCode gives the command's code,
// or ExitOutcomeUnknown for 0.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (res nodeexec.Result, err error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pod", b.o.Namespace+"/"+b.o.Pod)
	res = nodeexec.Result{Node: req.Node, ExitCode: -1, Started: b.o.Clock.Now(), Backend: Name, Namespace: b.o.Namespace, Pod: b.o.Pod}
	if err := req.Validate(); err != nil {
		return res, err
	}
	if req.TTY {
		return res, errors.New("ephemeral: TTY is not supported: the command's start signal is a line on standard input")
	}
	req, firstOutput := nodeexec.RecordFirstOutput(req, b.o.Clock.Now)
	defer func() {
		res.Finished = b.o.Clock.Now()
		res.FirstOutput = firstOutput()
	}()
	timeout := req.EffectiveTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("pod %s/%s: %w after %s", b.o.Namespace, b.o.Pod, nodeexec.ErrTimeout, timeout))
	defer cancel()

	// The watch outlives ctx so that a timed-out run can see its container end.
	w := watchPod(ctx, b.o.Client, b.o.Namespace, b.o.Pod)
	defer w.stop()

	name, node, err := b.add(ctx, req, false)
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			return res, errors.Join(cerr, err)
		}
		return res, err
	}
	res.Node = node
	log = log.WithValues("container", name)
	log.V(1).Info("added ephemeral container", "node", node)

	code, err := b.attachAndWait(ctx, w, name, node, req)
	if cerr := ctxErr(ctx); cerr != nil {
		return res, errors.Join(cerr, b.stop(ctx, w, name))
	}
	if errors.Is(err, nodeexec.ErrOutcomeUnknown) && code >= 0 {
		// The exit code is known (the container's status), the output
		// after the break is not: the command's own failure when it failed,
		// else outcome unknown — never a success.
		res.ExitCode = code
		if code != 0 {
			err = errors.Join(&nodeexec.ExitError{Node: node, Code: code}, err)
		}
		return res, err
	}
	if err != nil {
		// The attach was refused or the container failed: make sure the
		// gate does not wait for a start signal until its deadline.
		return res, errors.Join(err, b.stop(ctx, w, name))
	}
	res.ExitCode = code
	if code != 0 {
		return res, &nodeexec.ExitError{Node: node, Code: code}
	}
	return res, nil
}

// add checks the pod and adds the ephemeral container for req (with dryRun,
// only asks the API server to admit it), retrying on a conflicting
// concurrent update. It returns the container's name and the node.
func (b *Backend) add(ctx context.Context, req nodeexec.Request, dryRun bool) (name, node string, err error) {
	name = NamePrefix + b.o.NameSuffix()
	attempt := 0
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// The first attempt patches from the pod as last read (by Target or
		// Preflight); a pod changed since fails with a conflict, read again.
		attempt++
		pod, target, err := b.check(ctx, attempt == 1)
		if err != nil {
			return err
		}
		if req.Node != "" && req.Node != pod.Spec.NodeName {
			return fmt.Errorf("%w: pod %s/%s is on node %q, not %q", nodeexec.ErrWrongNode, pod.Namespace, pod.Name, pod.Spec.NodeName, req.Node)
		}
		node = pod.Spec.NodeName
		now := b.o.Clock.Now()
		updated, _, err := BuildContainer(ContainerSpec{
			Pod:             pod,
			Target:          target,
			Name:            name,
			Profile:         b.o.Profile,
			Image:           b.o.Image,
			ImagePullPolicy: b.o.ImagePullPolicy,
			RunID:           b.o.RunID,
			Env:             req.Env,
			SecretEnv:       req.SecretEnv,
			Now:             now,
			Deadline:        now.Add(req.EffectiveTimeout() + KillSlack),
			Command:         req.Argv(),
		})
		if err != nil {
			return err
		}
		patch, err := Patch(pod, updated)
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = b.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, opts, "ephemeralcontainers")
		if err == nil && !dryRun {
			b.last.set(nil) // changed by the patch
		}
		return err
	})
	if err == nil {
		return name, node, nil
	}
	ref := b.o.Namespace + "/" + b.o.Pod
	var serr *apierrors.StatusError
	switch {
	case errors.As(err, &serr) && serr.Status().Reason == metav1.StatusReasonNotFound && (serr.Status().Details == nil || serr.Status().Details.Name == ""):
		return "", "", fmt.Errorf("%w (the pods/ephemeralcontainers subresource of %s is missing: %s)", ErrEphemeralContainersDisabled, ref, err.Error())
	case apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("%w: pod %s was deleted", nodeexec.ErrPodNotFound, ref)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity"):
		return "", "", fmt.Errorf("%w: namespace %q's Pod Security level rejects an ephemeral container with profile %q: %s; use --profile baseline or restricted, or a namespace that allows it",
			nodeexec.ErrForbidden, b.o.Namespace, b.o.Profile, err.Error())
	case apierrors.IsForbidden(err):
		return "", "", fmt.Errorf("%w: adding an ephemeral container to %s: %s (RBAC: this backend needs patch on pods/ephemeralcontainers)", nodeexec.ErrForbidden, ref, err.Error())
	case errors.Is(err, nodeexec.ErrPodNotFound), errors.Is(err, nodeexec.ErrContainerNotFound), errors.Is(err, nodeexec.ErrContainerNotRunning),
		errors.Is(err, ErrTooManyEphemeralContainers), errors.Is(err, nodeexec.ErrWrongNode), errors.Is(err, nodeexec.ErrForbidden):
		return "", "", err
	}
	return "", "", fmt.Errorf("adding ephemeral container to pod %s: %w", ref, err)
}

// attachAndWait attaches to the container once it runs, sends the start
// signal and req.Stdin, and waits for its terminated status.
func (b *Backend) attachAndWait(ctx context.Context, w *podWatch, name, node string, req nodeexec.Request) (int, error) {
	log := logr.FromContextOrDiscard(ctx)
	var (
		interval   = DefaultRetryInterval
		due        <-chan time.Time // next attach attempt after a refused one
		timer      clock.Timer
		attempts   int
		attemptNow bool
		attached   bool
		aerr       error
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		pod := w.get()
		st := ephemeralStatus(pod, name)
		if pod != nil {
			if perr := podexec.PodFailure(pod, name, node); perr != nil && (st == nil || st.State.Terminated == nil) {
				return -1, perr
			}
		}
		if st != nil {
			switch s := st.State; {
			case s.Terminated != nil && attached:
				if aerr != nil {
					return int(s.Terminated.ExitCode), fmt.Errorf("%w: the attach to ephemeral container %q of pod %s/%s broke, so output after the break is lost; the command exited with code %d (from the container's status): %w",
						nodeexec.ErrOutcomeUnknown, name, b.o.Namespace, b.o.Pod, s.Terminated.ExitCode, aerr)
				}
				return int(s.Terminated.ExitCode), nil
			case s.Terminated != nil:
				return -1, &nodeexec.PodError{Node: node, Namespace: b.o.Namespace, Pod: b.o.Pod, Reason: s.Terminated.Reason,
					Message: fmt.Sprintf("ephemeral container %q ended (exit code %d) before the attach connected, so the command did not run: %s", name, s.Terminated.ExitCode, s.Terminated.Message)}
			case podexec.FatalWaiting(s.Waiting):
				pe := &nodeexec.PodError{Node: node, Namespace: b.o.Namespace, Pod: b.o.Pod, Reason: s.Waiting.Reason,
					Message: fmt.Sprintf("ephemeral container %q: %s", name, s.Waiting.Message)}
				if nodeexec.IsImagePullReason(s.Waiting.Reason) && pod != nil {
					pe.Image = podexec.ContainerImage(pod, name)
				}
				return -1, podexec.WithPullReason(ctx, b.o.Client, pe)
			case s.Running != nil && !attached && attempts == 0:
				attemptNow = true
			}
		}
		if attemptNow {
			attemptNow = false
			attempts++
			log.V(2).Info("attach attempt", "attempt", attempts)
			err := b.attach(ctx, name, req)
			if podexec.IsContainerNotReady(err) && ctxErr(ctx) == nil {
				log.V(2).Info("container not ready for attach yet", "attempt", attempts, "err", err)
				timer = b.o.Clock.NewTimer(interval)
				due = timer.C()
				interval = min(interval*3/2, time.Second)
			} else if err != nil && httpstream.IsUpgradeFailure(err) && ctxErr(ctx) == nil {
				// Refused before anything was streamed: the command never started.
				if strings.Contains(strings.ToLower(err.Error()), "forbidden") {
					return -1, fmt.Errorf("%w: attaching to ephemeral container %q of pod %s/%s: %s (RBAC: this backend needs create on pods/attach)",
						nodeexec.ErrForbidden, name, b.o.Namespace, b.o.Pod, err.Error())
				}
				return -1, fmt.Errorf("attaching to ephemeral container %q of pod %s/%s: %w", name, b.o.Namespace, b.o.Pod, err)
			} else {
				attached, aerr = true, err
				log.V(1).Info("attach finished", "attempts", attempts, "err", err)
				continue // read the status again
			}
		}
		select {
		case <-w.changed:
		case <-due:
			due, attemptNow = nil, true
		case <-ctx.Done():
			return -1, ctxErr(ctx)
		}
	}
}

// attach runs one attach session: the start signal, then req.Stdin.
func (b *Backend) attach(ctx context.Context, name string, req nodeexec.Request) error {
	stdin := io.MultiReader(strings.NewReader("\n"))
	if req.Stdin != nil {
		stdin = io.MultiReader(strings.NewReader("\n"), req.Stdin)
	}
	return b.o.Attacher.Attach(ctx, b.o.Namespace, b.o.Pod,
		&corev1.PodAttachOptions{Container: name, Stdin: true, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdin: stdin, Stdout: orDiscard(req.Stdout), Stderr: orDiscard(req.Stderr)})
}

// stop ends the container's process after a timeout, a cancellation or a
// failed attach: it execs `kill -KILL` of the PID the gate recorded
// (retried while the container is not yet running or has not written the
// PID file) and waits for the terminated status, with a context detached
// from the ended ctx, for at most DefaultCleanupTimeout. A container that
// cannot start (image pull, config error) is left to the on-node timeout.
func (b *Backend) stop(ctx context.Context, w *podWatch, name string) error {
	log := logr.FromContextOrDiscard(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCleanupTimeout)
	defer cancel()
	var (
		kerr   error
		killed bool
		due    <-chan time.Time
		timer  clock.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	attemptNow := true
	for {
		pod := w.get()
		st := ephemeralStatus(pod, name)
		switch {
		case pod == nil || pod.DeletionTimestamp != nil:
			return nil // the pod's deletion ends every process
		case st != nil && st.State.Terminated != nil:
			return nil
		case st != nil && podexec.FatalWaiting(st.State.Waiting):
			return nil // it never ran
		}
		if attemptNow && !killed {
			attemptNow = false
			kerr = b.o.Streamer.Exec(cctx, b.o.Namespace, b.o.Pod, &corev1.PodExecOptions{
				Container: name,
				Command:   []string{"sh", "-c", `kill -KILL "$(cat ` + PIDFile + `)"`},
				Stdout:    true,
				Stderr:    true,
			}, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			log.V(1).Info("kill ephemeral container's command", "container", name, "err", kerr)
			switch {
			case kerr == nil:
				killed = true
			case strings.Contains(strings.ToLower(kerr.Error()), "forbidden"):
				killed = true // retrying cannot help; the error is reported below
			default: // not running yet, or no PID file yet
				timer = b.o.Clock.NewTimer(500 * time.Millisecond)
				due = timer.C()
			}
		}
		select {
		case <-w.changed:
		case <-due:
			due, attemptNow = nil, true
		case <-cctx.Done():
			msg := fmt.Errorf("ephemeral container %q of pod %s/%s may still run until its on-node deadline (Request.Timeout + %s)", name, b.o.Namespace, b.o.Pod, KillSlack)
			if kerr != nil {
				return errors.Join(msg, fmt.Errorf("killing it (RBAC: create on pods/exec): %w", kerr))
			}
			return msg
		}
	}
}

// ephemeralStatus is the status of the named ephemeral container, or nil.
func ephemeralStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.EphemeralContainerStatuses {
		if pod.Status.EphemeralContainerStatuses[i].Name == name {
			return &pod.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

func ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
