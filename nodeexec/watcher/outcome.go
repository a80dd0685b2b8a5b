package watcher

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// runOutcome is what a run pod says about its run.
type runOutcome struct {
	// Done is set once the run is over (or can never start).
	Done bool
	// ExitCode of the script; -1 when it did not run to an exit.
	ExitCode int
	// Infrastructure is set when the run failed for a reason other than the
	// script's own exit (image pull, pod rejected by the kubelet, eviction,
	// preemption, node NotReady): such failures are retried.
	Infrastructure bool
	// Reason is a CamelCase reason when the run did not end by the script's
	// exit (Timeout, ErrImagePull, Evicted, NodeNotReady, ...).
	Reason string
	// Message is the pod's or container's message; Tail is the container's
	// termination message: the end of its output when it failed, without
	// its first line when the kubelet may have cut that line
	// (TerminationTail).
	Message, Tail string
}

// DefaultNotReadyGrace is the default of Options.NotReadyGrace: how long a
// run pod may sit on a node that is not Ready before its run counts as an
// infrastructure failure.
const DefaultNotReadyGrace = time.Minute

// podOutcome classifies a run pod: nodeReady and notReadySince describe
// its node's Ready condition (notReadySince is when it last changed); a run
// on a node not Ready for grace is an infrastructure failure (NodeNotReady).
// It is a pure function.
func podOutcome(pod *corev1.Pod, nodeReady bool, notReadySince, now time.Time, grace time.Duration) runOutcome {
	var cs *corev1.ContainerStatus
	if len(pod.Status.ContainerStatuses) > 0 {
		cs = &pod.Status.ContainerStatuses[0]
	}
	infra := func(reason, msg string) runOutcome {
		return runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: reason, Message: msg}
	}
	terminated := func() *corev1.ContainerStateTerminated {
		if cs == nil {
			return nil
		}
		return cs.State.Terminated
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		o := runOutcome{Done: true}
		if t := terminated(); t != nil {
			o.ExitCode, o.Tail = int(t.ExitCode), terminationTail(t.Message)
		}
		return o
	case corev1.PodFailed:
		reason := pod.Status.Reason
		if reason == "DeadlineExceeded" {
			o := runOutcome{Done: true, ExitCode: -1, Reason: "Timeout", Message: pod.Status.Message}
			if t := terminated(); t != nil {
				o.Tail = terminationTail(t.Message)
			}
			return o
		}
		if disrupted(pod) || reason != "" {
			// Evicted, Preempting, Shutdown, NodeShutdown, OutOfcpu, ...:
			// the kubelet ended or refused the pod, not the script.
			if reason == "" {
				reason = "Disrupted"
			}
			return infra(reason, pod.Status.Message)
		}
		t := terminated()
		if t == nil || t.Reason == "ContainerStatusUnknown" {
			return infra("ContainerNotRun", pod.Status.Message)
		}
		o := runOutcome{Done: true, ExitCode: int(t.ExitCode), Tail: terminationTail(t.Message)}
		if t.Reason == "OOMKilled" {
			o.Reason = "OOMKilled"
		}
		return o
	}
	if pod.DeletionTimestamp != nil {
		return infra("PodDeleted", "the run's pod was deleted before the run ended")
	}
	if cs != nil && podexec.FatalWaiting(cs.State.Waiting) {
		w := cs.State.Waiting
		if nodeexec.IsImagePullReason(w.Reason) {
			return infra(w.Reason, pullMessage(podexec.ContainerImage(pod, cs.Name), w.Message))
		}
		return infra(w.Reason, w.Message)
	}
	if !nodeReady && !notReadySince.IsZero() && now.Sub(notReadySince) >= grace {
		return infra("NodeNotReady", "the node has not been Ready for "+now.Sub(notReadySince).Round(time.Second).String())
	}
	return runOutcome{ExitCode: -1}
}

// rebooted turns the failure of a run that started on boot startBootID of its
// node into an infrastructure failure (reason NodeRebooted) when the node now
// reports another boot ID (status.nodeInfo.bootID): the reboot killed the
// script (exit code 137 or 255, a timeout, or an unknown container status,
// ContainerNotRun), not its own exit. Success, other infrastructure failures
// (image pulls, evictions, NodeNotReady) and unknown boot IDs ("") pass
// unchanged. The original outcome is kept in the message.
func rebooted(out runOutcome, startBootID, nodeBootID string) runOutcome {
	if !rebootCandidate(out) || startBootID == "" || nodeBootID == "" || startBootID == nodeBootID {
		return out
	}
	msg := "the node rebooted during the run (boot ID " + startBootID + " -> " + nodeBootID + ")"
	switch {
	case out.Infrastructure:
		msg += "; the run's pod said " + out.Reason
		if out.Message != "" {
			msg += ": " + out.Message
		}
	case out.ExitCode >= 0:
		msg += "; the script's container ended with exit code " + strconv.Itoa(out.ExitCode)
	case out.Reason != "":
		msg += "; the run's pod said " + out.Reason
	}
	return runOutcome{Done: true, ExitCode: -1, Infrastructure: true, Reason: "NodeRebooted", Message: msg, Tail: out.Tail}
}

// rebootCandidate reports whether a reboot of the node may explain out: a
// finished run that failed by its exit, its timeout, or a container the
// kubelet could not find (ContainerNotRun).
func rebootCandidate(out runOutcome) bool {
	if !out.Done {
		return false
	}
	if out.Infrastructure {
		return out.Reason == "ContainerNotRun"
	}
	return out.ExitCode != 0 || out.Reason != ""
}

func disrupted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// terminationTail is a termination message without its first line when
// the kubelet may have cut it (the message is MaxTerminationLogTail bytes
// or more; it is "" when it has a single line): a cut line may be the
// value of a secret whose key the cut removed ("WORD=hunter2" of
// "PASSWORD=hunter2"), which no redaction can recognise. A shorter message
// is whole and returned unchanged. It is a pure function.
func terminationTail(msg string) string {
	if len(msg) < v1alpha1.MaxTerminationLogTail {
		return msg
	}
	_, rest, _ := strings.Cut(msg, "\n")
	return rest
}

// tail returns the last n bytes of s, starting at a line when it can.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return s
}

// pullMessage is a run's message for an image its pod cannot pull: the
// image, the kubelet's reason and the NodeScript fields that fix it.
func pullMessage(image, reason string) string {
	msg := fmt.Sprintf("image %q cannot be pulled", image)
	if reason != "" {
		msg += ": " + reason
	}
	return msg + " (fix spec.backend.image, or give the registry's credentials in spec.backend.imagePullSecrets)"
}
