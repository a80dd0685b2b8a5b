package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintUninstall(t *testing.T) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	var b bytes.Buffer
	printUninstall(&b, ns)
	if b.Len() != 0 {
		t.Errorf("without uninstallScript: %q", b.String())
	}
	ns.Spec.UninstallScript = "rm -f /etc/fix"
	printUninstall(&b, ns)
	if !strings.Contains(b.String(), "runs on the nodes that succeeded when the NodeScript is deleted") {
		t.Errorf("before deletion: %q", b.String())
	}
	b.Reset()
	ns.DeletionTimestamp = ptr.To(metav1.Now())
	ns.Status.Uninstall = &v1alpha1.UninstallStatus{Pending: []string{"n3"}, PendingCount: 1, Succeeded: []string{"n1"}, SucceededCount: 1,
		Failed: []string{"n2: exit code 3"}, FailedCount: 25}
	printUninstall(&b, ns)
	for _, want := range []string{"uninstall: pending 1, succeeded 1, failed 25", "uninstall pending: n3", "uninstall failed: n2: exit code 3 and 24 more"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}

func TestReapplyScheduleLine(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	got := reapplySchedule(&v1alpha1.ReapplyPolicy{Schedule: "0 3 * * *"}, now)
	if want := "on schedule 0 3 * * * (next 2026-11-28T03:00:00Z)"; !strings.Contains(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// After the NodeScript is gone, status lists the nodes keeping its state.
func TestPrintLeftStates(t *testing.T) {
	s := nodescripts.NodeState{Hash: "h", Phase: v1alpha1.PhaseSucceeded, Uninstall: &nodescripts.UninstallRecord{Phase: v1alpha1.UninstallFailed, ExitCode: ptr.To(3)}}
	cs := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{nodescripts.StateAnnotation("fix"): s.Encode()}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "nodeexec.io", Resource: "nodescripts"}, "fix")
	var b bytes.Buffer
	if err := printLeftStates(context.Background(), &b, cs, "fix", notFound); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NodeScript fix is gone; 1 node(s)", "n2: Succeeded, uninstall Failed: exit code 3", "kubectl annotate node NODE fix.nodescript.nodeexec.io/state-"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	other := errors.New("boom")
	if err := printLeftStates(context.Background(), &b, cs, "fix", other); err != other {
		t.Errorf("another error: %v", err)
	}
	if err := printLeftStates(context.Background(), &b, cs, "gone", notFound); err != notFound {
		t.Errorf("no node keeps a state: %v", err)
	}
}
