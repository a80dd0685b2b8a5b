package watcher

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestRecordedTailOfCutMessage: the kubelet keeps the last
// MaxTerminationLogTail bytes of a failed run's log, cut anywhere; cut
// inside "PASSWORD=hunter2", the rest ("WORD=hunter2") names no secret, so
// the cut line is dropped before the output is recorded, and a message
// that was not cut is recorded whole.
func TestRecordedTailOfCutMessage(t *testing.T) {
	failed := func(msg string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "nodeexec", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}},
		}}}}
	}
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	log := strings.Repeat("padding line of the script's output\n", 100) + "PASSWORD=hunter2\n" + strings.Repeat("after the secret\n", 200)
	i := strings.Index(log, "PASSWORD=hunter2")
	for _, cut := range []int{i + 1, i + 4, i + len("PASSWORD"), i + len("PASSWORD="), i + len("PASSWORD=hun")} {
		tailLog := log[:cut+v1alpha1.MaxTerminationLogTail] // the log ends MaxTerminationLogTail bytes after the cut
		msg := tailLog[cut:]
		out := podOutcome(failed(msg), true, time.Time{}, now, time.Minute)
		if !out.Done || out.ExitCode != 1 {
			t.Fatalf("cut at %d: outcome %+v", cut, out)
		}
		rec := outputRecord(ns, "n1", "h", map[string]string{v1alpha1.ActionRun: out.Tail}, now).Data[v1alpha1.ActionRun]
		if strings.Contains(rec, "hun") || !strings.HasPrefix(rec, "after the secret\n") {
			t.Errorf("cut at %d (message %q...): recorded %q...", cut, msg[:20], rec[:min(len(rec), 40)])
		}
	}
	whole := "line 1\nPASSWORD=hunter2\nline 3\n"
	out := podOutcome(failed(whole), true, time.Time{}, now, time.Minute)
	if rec := outputRecord(ns, "n1", "h", map[string]string{v1alpha1.ActionRun: out.Tail}, now).Data[v1alpha1.ActionRun]; rec != "line 1\nPASSWORD=[REDACTED]\nline 3\n" {
		t.Errorf("whole message recorded as %q", rec)
	}
}
