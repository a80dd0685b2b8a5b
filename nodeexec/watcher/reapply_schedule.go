package watcher

import (
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// scheduleDue is when spec.reapply.schedule expr makes a success at since
// due again: its first activation after since (zero when expr is empty or
// does not parse; Validate refuses such a schedule before the watcher
// acts on it). Pure.
func scheduleDue(expr string, since time.Time) time.Time {
	if expr == "" {
		return time.Time{}
	}
	sched, err := v1alpha1.ParseReapplySchedule(expr)
	if err != nil {
		return time.Time{}
	}
	return sched.Next(since)
}

// scheduleWhy is the Event message's reason for a rerun under
// spec.reapply.schedule expr of a success at since.
func scheduleWhy(expr string, since time.Time) string {
	return "its last success (" + since.UTC().Format(time.RFC3339) + ") is older than the activation of spec.reapply.schedule (" +
		expr + ") at " + scheduleDue(expr, since).UTC().Format(time.RFC3339)
}
