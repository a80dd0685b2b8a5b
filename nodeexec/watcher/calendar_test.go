package watcher

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func calendar(name, zone string, windows []v1alpha1.CalendarWindow, blackouts ...v1alpha1.Blackout) *v1alpha1.MaintenanceCalendar {
	return &v1alpha1.MaintenanceCalendar{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.MaintenanceCalendarSpec{TimeZone: zone, Windows: windows, Blackouts: blackouts}}
}

func refs(names ...string) *v1alpha1.NodeScript {
	return &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "ns"}, Spec: v1alpha1.NodeScriptSpec{CalendarFields: v1alpha1.CalendarFields{WindowRefs: names}}}
}

func calDur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
func mt(t time.Time) metav1.Time             { return metav1.Time{Time: t} }

// TestDecideWindowCloses: Decide sets WindowCloses for the inline window.
func TestDecideWindowCloses(t *testing.T) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "u"}, Spec: v1alpha1.NodeScriptSpec{Script: "true",
		Window: &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"}}}
	now := time.Date(2026, 11, 24, 23, 0, 0, 0, time.UTC)
	d, err := computeDecision(ns, []rolloutNode{{Name: "n", UID: "n", Ready: true}}, now)
	if err != nil || !d.WindowCloses.Equal(time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)) || d.Hold != "" {
		t.Errorf("open: closes %v, hold %q, %v", d.WindowCloses, d.Hold, err)
	}
	d, err = computeDecision(ns, []rolloutNode{{Name: "n", UID: "n", Ready: true}}, now.Add(6*time.Hour))
	if err != nil || !d.WindowCloses.IsZero() || d.Hold != v1alpha1.HoldOutsideWindow {
		t.Errorf("closed: closes %v, hold %q, %v", d.WindowCloses, d.Hold, err)
	}
}
