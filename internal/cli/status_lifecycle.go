package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// reapplySchedule is the reapply line's part for spec.reapply.schedule:
// the expression and its next activation after now.
func reapplySchedule(r *v1alpha1.ReapplyPolicy, now time.Time) string {
	if r.Schedule == "" {
		return ""
	}
	s := "on schedule " + r.Schedule
	if sched, err := v1alpha1.ParseReapplySchedule(r.Schedule); err == nil {
		s += " (next " + sched.Next(now).UTC().Format(time.RFC3339) + ")"
	}
	return s + " after a success older than its activation"
}

// printUninstall prints `nodeexec status`'s lines for spec.uninstallScript:
// that it is set, and while the NodeScript is deleted its progress
// (status.uninstall).
func printUninstall(w io.Writer, ns *v1alpha1.NodeScript) {
	if ns.Spec.UninstallScript == "" {
		return
	}
	u := ns.Status.Uninstall
	if ns.DeletionTimestamp == nil || u == nil {
		if ns.DeletionTimestamp != nil {
			fmt.Fprintln(w, "uninstall: starting (the NodeScript is being deleted)")
		} else {
			fmt.Fprintln(w, "uninstall: spec.uninstallScript runs on the nodes that succeeded when the NodeScript is deleted")
		}
		return
	}
	list := func(names []string, n int32) string {
		s := strings.Join(names, ", ")
		if more := int(n) - len(names); more > 0 {
			s += fmt.Sprintf(" and %d more", more)
		}
		return s
	}
	fmt.Fprintf(w, "uninstall: pending %d, succeeded %d, failed %d\n", u.PendingCount, u.SucceededCount, u.FailedCount)
	if u.PendingCount > 0 {
		fmt.Fprintf(w, "uninstall pending: %s\n", list(u.Pending, u.PendingCount))
	}
	if u.FailedCount > 0 {
		fmt.Fprintf(w, "uninstall failed: %s (their state annotations stay after the NodeScript is gone)\n", list(u.Failed, u.FailedCount))
	}
}

// uninstallReason is the REASON column's part for a node's uninstall
// record: "uninstall:PHASE", or "" without one.
func uninstallReason(s nodescripts.NodeState) string {
	if s.Uninstall == nil {
		return ""
	}
	return "uninstall:" + s.Uninstall.Phase
}

// printLeftStates, for `nodeexec status NAME` when NodeScript name is not
// found, prints the nodes that still carry its state annotation (left by
// a failed uninstall, or by a finalizer removed by hand) and how to remove
// it. It returns err unchanged when it is not a NotFound, or when no node
// carries the annotation (RBAC: list nodes).
func printLeftStates(ctx context.Context, w io.Writer, cs kubernetes.Interface, name string, err error) error {
	if !apierrors.IsNotFound(err) {
		return err
	}
	nodes, lerr := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if lerr != nil {
		return err
	}
	key := nodescripts.StateAnnotation(name)
	var lines []string
	for _, n := range nodes.Items {
		if _, ok := n.Annotations[key]; !ok {
			continue
		}
		s, derr := nodescripts.DecodeState(n.Annotations, name)
		line := n.Name + ": " + s.Phase
		switch {
		case derr != nil:
			line = n.Name + ": " + derr.Error()
		case s.Uninstall != nil:
			line += ", uninstall " + s.Uninstall.Phase
			if s.Uninstall.Reason != "" {
				line += ": " + s.Uninstall.Reason
			} else if s.Uninstall.ExitCode != nil {
				line += fmt.Sprintf(": exit code %d", *s.Uninstall.ExitCode)
			}
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return err
	}
	slices.Sort(lines)
	fmt.Fprintf(w, "NodeScript %s is gone; %d node(s) keep its state annotation %s:\n", name, len(lines), key)
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintf(w, "remove it once the node is dealt with: kubectl annotate node NODE %s-\n", key)
	return nil
}
