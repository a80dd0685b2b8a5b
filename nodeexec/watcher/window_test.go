package watcher

import (
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestInWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	night := &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
	weekdayNights := &v1alpha1.MaintenanceWindow{Days: []string{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
	office := &v1alpha1.MaintenanceWindow{Days: []string{"Sat"}, Start: "09:00", End: "17:00"} // UTC
	dstSpring := &v1alpha1.MaintenanceWindow{Start: "02:30", End: "03:30", TimeZone: "Europe/Berlin"}
	for _, c := range []struct {
		name   string
		w      *v1alpha1.MaintenanceWindow
		now    time.Time
		open   bool
		change time.Time
	}{
		{"no window", nil, at("2026-11-23 12:00"), true, time.Time{}},
		{"before opening", night, at("2026-11-23 21:59"), false, at("2026-11-23 22:00")},
		{"at opening", night, at("2026-11-23 22:00"), true, at("2026-11-24 04:00")},
		{"after midnight, opened yesterday", night, at("2026-11-24 03:59"), true, at("2026-11-24 04:00")},
		{"at closing", night, at("2026-11-24 04:00"), false, at("2026-11-24 22:00")},
		{"Friday night runs into Saturday", weekdayNights, at("2026-11-28 01:00"), true, at("2026-11-28 04:00")}, // 28th is a Saturday
		{"Saturday night is not a window", weekdayNights, at("2026-11-28 23:00"), false, at("2026-11-30 22:00")},
		{"UTC, a week ahead", office, time.Date(2026, 11, 28, 17, 0, 0, 0, time.UTC), false, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)},
		// Berlin switches to summer time on 2026-03-29 at 02:00 (-> 03:00):
		// 02:30 does not exist that day; it normalises to 03:30, so the
		// window is empty that night and opens again the next.
		{"spring forward: no 02:30", dstSpring, at("2026-03-29 01:00"), false, at("2026-03-30 02:30")},
		// An overnight window across the change is an hour shorter in real time.
		{"spring forward overnight", night, at("2026-03-29 03:30"), true, at("2026-03-29 04:00")},
		// Berlin falls back on 2026-10-25 at 03:00 (-> 02:00): 02:30 happens twice.
		{"fall back", dstSpring, time.Date(2026, 10, 25, 1, 45, 0, 0, time.UTC), true, at("2026-10-25 03:30")}, // the second 02:45 (CET)
	} {
		t.Run(c.name, func(t *testing.T) {
			open, change, err := inWindow(c.w, c.now)
			if err != nil {
				t.Fatal(err)
			}
			if open != c.open || !change.Equal(c.change) {
				t.Errorf("InWindow at %s = %t, %s; want %t, %s", c.now, open, change, c.open, c.change)
			}
		})
	}
	if _, _, err := inWindow(&v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Mars/Olympus"}, time.Now()); err == nil {
		t.Error("an unknown time zone: no error")
	}
	if _, _, err := inWindow(&v1alpha1.MaintenanceWindow{Start: "24:00", End: "04:00"}, time.Now()); err == nil {
		t.Error("24:00: no error")
	}
}
