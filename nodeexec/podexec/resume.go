package podexec

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
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// Resume is how a run whose exec stream was cut gets the rest of its output
// and its exit status: its command line ran under a spool in the container
// (package nodeexec/spool; agent.SpoolFor builds both), which these command
// lines read over new execs.
type Resume struct {
	// Check is the command line that exits 0 when the spool exists and
	// CheckMissing when it does not.
	Check        []string
	CheckMissing int
	// Attach returns the command line that streams the spool from the
	// offsets (bytes of stdout and stderr received so far) and exits with the
	// command's status.
	Attach func(stdoutOffset, stderrOffset int64) []string
	// Stop is the command line that ends the spooled command and exits 0
	// once it ended: for a client that gives up on the run (cancelled, or
	// past its timeout) where nothing else ends the command (a resident
	// agent; a pod backend deletes its pod instead). ExecResuming does not
	// run it.
	Stop []string
}

// Backoff between reconnection attempts after a cut stream: it starts at
// ResumeInitialBackoff and doubles up to ResumeMaxBackoff, until the run's
// context ends.
const (
	ResumeInitialBackoff = 250 * time.Millisecond
	ResumeMaxBackoff     = 4 * time.Second
)

// ExecResuming runs opts in pod over s, as s.Exec does; when r is set and
// the run has no TTY, a stream cut after the command started (StreamBroke:
// the API server restarted, the connection to the kubelet dropped) is not
// the end: it reconnects with backoff until ctx ends, checks that the spool
// is still there (r.Check) and streams the rest of the output from the
// bytes already written to streams.Stdout and streams.Stderr (r.Attach):
// nothing lost, nothing doubled, and the command's real exit status (nil or
// a utilexec.CodeExitError). The command's stdin is not resumed: it sees the
// end of its input when the first stream is cut. When the outcome cannot be
// had any more — the pod is gone, or its container restarted and lost the
// spool — the error wraps nodeexec.ErrOutcomeUnknown. When ctx ends, the
// error is its cause.
func ExecResuming(ctx context.Context, s Streamer, clk clock.WithTicker, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions, r *Resume) error {
	if r == nil || opts.TTY {
		return s.Exec(ctx, namespace, pod, opts, streams)
	}
	stdout := &countingWriter{w: orDiscard(streams.Stdout)}
	stderr := &countingWriter{w: orDiscard(streams.Stderr)}
	trailer := &spool.TrailerWriter{W: stderr}
	streams.Stdout, streams.Stderr = stdout, trailer
	err := s.Exec(ctx, namespace, pod, opts, streams)
	if xerr, ok := whole(err, trailer, stdout, stderr); ok {
		return xerr
	}
	_, exited := exitCode(err)
	if (err != nil && !exited && (IsContainerNotReady(err) || !StreamBroke(err))) || ctx.Err() != nil {
		return err
	}
	if err == nil || exited {
		err = fmt.Errorf("the stream ended (%v) before the agent's end mark: it was cut", err)
	}
	log := logr.FromContextOrDiscard(ctx)
	trailer = &spool.TrailerWriter{W: stderr}
	attachStreams := remotecommand.StreamOptions{Stdout: stdout, Stderr: trailer}
	backoff := ResumeInitialBackoff
	for attempt := 1; ; attempt++ {
		log.V(1).Info("exec stream cut: reconnecting", "pod", pod, "attempt", attempt, "stdoutBytes", stdout.n, "stderrBytes", stderr.n, "err", err)
		t := clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C():
		}
		backoff = min(backoff*2, ResumeMaxBackoff)

		log.V(2).Info("checking the spool", "pod", pod, "attempt", attempt)
		cerr := s.Exec(ctx, namespace, pod, resumeOpts(opts, r.Check), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
		checkCode, checkExited := exitCode(cerr)
		switch {
		case cerr == nil:
		case checkExited:
			return fmt.Errorf("%w: pod %s/%s no longer holds the command's output and exit status (exit status %d of %q: its container restarted, or the command never started)",
				nodeexec.ErrOutcomeUnknown, namespace, pod, checkCode, strings.Join(r.Check, " "))
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case gone(cerr):
			return fmt.Errorf("%w: pod %s/%s is gone with the command's output and exit status: %w", nodeexec.ErrOutcomeUnknown, namespace, pod, cerr)
		default:
			err = cerr // the API server or the kubelet is not back yet
			continue
		}

		log.V(2).Info("attaching to the spool", "pod", pod, "attempt", attempt, "stdoutOffset", stdout.n, "stderrOffset", stderr.n)
		aerr := s.Exec(ctx, namespace, pod, resumeOpts(opts, r.Attach(stdout.n, stderr.n)), attachStreams)
		if xerr, ok := whole(aerr, trailer, stdout, stderr); ok {
			log.V(1).Info("reattached: the run's outcome is in", "pod", pod, "attempts", attempt, "err", xerr)
			return xerr
		}
		attachCode, attachExited := exitCode(aerr)
		switch {
		case attachExited && attachCode == AttachFailedExitCode:
			return fmt.Errorf("%w: pod %s/%s: the agent could not stream the command's spool: %w", nodeexec.ErrOutcomeUnknown, namespace, pod, aerr)
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case aerr == nil || attachExited:
			err = fmt.Errorf("the stream ended (%v) before the agent's end mark: it was cut", aerr)
		case gone(aerr):
			return fmt.Errorf("%w: pod %s/%s is gone with the command's output and exit status: %w", nodeexec.ErrOutcomeUnknown, namespace, pod, aerr)
		default:
			err = aerr
		}
	}
}

// AttachFailedExitCode is the exit status of the agent's attach when it
// cannot stream the spool (the reason on stderr).
const AttachFailedExitCode = 125

// whole reports whether the exec that ended with err delivered the whole
// output: the agent's end mark (spool.Trailer) was read last and the byte
// counts match. Then xerr is the command's outcome: nil for exit 0, else a
// utilexec.CodeExitError.
func whole(err error, trailer *spool.TrailerWriter, stdout, stderr *countingWriter) (xerr error, ok bool) {
	end, ok := trailer.End()
	if !ok || end.Stdout != stdout.n || end.Stderr != stderr.n {
		return nil, false
	}
	if end.Code == 0 {
		return nil, true
	}
	if code, ok := exitCode(err); ok && code == end.Code {
		return err, true
	}
	return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", end.Code), Code: end.Code}, true
}

// resumeOpts is opts with argv in place of its command, and no stdin.
func resumeOpts(opts *corev1.PodExecOptions, argv []string) *corev1.PodExecOptions {
	o := opts.DeepCopy()
	o.Command = argv
	o.Stdin = false
	return o
}

// exitCode is the status of an exec whose command exited non-zero (a
// utilexec.CodeExitError), and whether err is one.
func exitCode(err error) (int, bool) {
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, true
	}
	return 0, false
}

// gone reports an exec refused because the pod or its container no longer
// exists: not worth another attempt. Other refusals are retried until the
// run's context ends: right after a restart the API server may answer 403
// or 5xx while its caches fill.
func gone(err error) bool {
	if apierrors.IsNotFound(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err) || IsContainerNotReady(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	return strings.Contains(err.Error(), "not found")
}

// countingWriter counts the bytes its writer took.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
