package watcher

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// setCalendars puts cals in the controller's MaintenanceCalendar cache.
func (e *env) setCalendars(cals ...*v1alpha1.MaintenanceCalendar) {
	e.t.Helper()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, c := range cals {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := store.Add(&unstructured.Unstructured{Object: m}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.c.calendars = store
}

// TestReconcileWindowRefs: a missing calendar holds (closed, with why), an
// open one starts runs, a blackout holds again naming itself and its
// reason, and a calendar closed until later has the watcher look again
// when it opens.
func TestReconcileWindowRefs(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.WindowRefs = []string{"patch"} })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	progressing := func() string {
		for _, c := range e.nodeScript().Status.Conditions {
			if c.Type == v1alpha1.ConditionProgressing {
				return c.Reason + ": " + c.Message
			}
		}
		return ""
	}

	// Missing: closed.
	e.setCalendars()
	e.reconcile()
	if got := progressing(); !strings.HasPrefix(got, v1alpha1.HoldOutsideWindow) || !strings.Contains(got, "maintenancecalendar patch does not exist") || len(e.pods()) != 0 {
		t.Fatalf("missing calendar: %q, pods %v", got, e.pods())
	}
	if st := e.nodeScript().Status.Calendars; len(st) != 1 || st[0].Open {
		t.Errorf("status.calendars %+v", st)
	}

	// Open: runs start, status says until when.
	cal := calendar("patch", "UTC", []v1alpha1.CalendarWindow{{Name: "now", Once: &v1alpha1.OnceWindow{Start: mt(t0.Add(-time.Hour)), End: mt(t0.Add(time.Hour))}}})
	e.setCalendars(cal)
	e.reconcile()
	if len(e.pods()) == 0 {
		t.Fatalf("open calendar: no run started; %q", progressing())
	}
	if st := e.nodeScript().Status.Calendars; len(st) != 1 || !st[0].Open || st[0].Message != "window now open until 2026-11-21T13:00:00Z" {
		t.Errorf("status.calendars %+v", st)
	}
	if got := testutil.ToFloat64(e.c.w.metrics.calendarOpen.WithLabelValues("fix", "patch")); got != 1 {
		t.Errorf("nodeexec_watcher_calendar_open = %v", got)
	}
	e.checkEvents("opened", v1alpha1.ReasonCalendarOpened)
}

// TestCalendarWindowStep: the step alone: a blackout holds (reason and
// name), the run-now override still lets runs start, a closed calendar
// sets NextWindow, a paused NodeScript stays Paused.
func TestCalendarWindowStep(t *testing.T) {
	e := newEnv(t, nil)
	now := t0
	open := []v1alpha1.CalendarWindow{{Name: "w", Weekly: &v1alpha1.WeeklyWindow{Start: "00:00", End: "23:59"}}}
	freeze := v1alpha1.Blackout{Name: "freeze", Start: mt(now.Add(-time.Minute)), End: mt(now.Add(time.Hour)), Reason: "change freeze"}
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.WindowRefs = []string{"a"} })
	start := decision{Stage: v1alpha1.StageRolling, Start: []string{"n1"}}

	e.setCalendars(calendar("a", "", open, freeze))
	d := e.c.calendarWindow(e.ctx, ns, start, now)
	if d.Hold != v1alpha1.HoldOutsideWindow || len(d.Start) != 0 || !strings.Contains(d.WindowReason, "blackout freeze until 2026-11-21T13:00:00Z: change freeze") {
		t.Errorf("blackout: %+v", d)
	}
	if !d.NextWindow.Equal(now.Add(time.Hour)) {
		t.Errorf("blackout: next window %v, want the blackout's end", d.NextWindow)
	}

	withRunNow := ns.DeepCopy()
	withRunNow.Annotations = map[string]string{v1alpha1.AnnotationRunNow: now.Add(time.Hour).Format(time.RFC3339)}
	d = e.c.calendarWindow(e.ctx, withRunNow, start, now)
	if d.Hold != "" || len(d.Start) != 1 || d.RunNow.IsZero() {
		t.Errorf("run-now: %+v", d)
	}

	e.setCalendars(calendar("a", "", open))
	d = e.c.calendarWindow(e.ctx, ns, start, now)
	if d.Hold != "" || len(d.Start) != 1 || !d.WindowCloses.Equal(time.Date(2026, 11, 21, 23, 59, 0, 0, time.UTC)) {
		t.Errorf("open: %+v", d)
	}

	paused := decision{Stage: v1alpha1.StageRolling, Hold: v1alpha1.HoldPaused}
	e.setCalendars(calendar("a", "", nil))
	if d = e.c.calendarWindow(e.ctx, ns, paused, now); d.Hold != v1alpha1.HoldPaused || len(d.Calendars) != 1 || d.Calendars[0].Open {
		t.Errorf("paused: %+v", d)
	}
	if d = e.c.calendarWindow(e.ctx, ns, start, now); d.Hold != v1alpha1.HoldOutsideWindow || !d.NextWindow.IsZero() || !strings.Contains(d.WindowReason, "no window opens") {
		t.Errorf("never open: %+v", d)
	}
}
