package watcher

import (
	"fmt"
	"slices"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// inWindow reports whether the maintenance window w is open at now and
// when that changes: the time it closes when open, the next time it opens
// when closed. A nil window is always open (zero time). Times are
// wall-clock times in w.TimeZone, so daylight saving time moves them with
// the clock: a time skipped by a change is the one time.Date normalises it
// to (a window emptied that way does not open that day), a time that
// happens twice is one of its occurrences. A window opens on w.Days (every
// day when empty) and an overnight one (End at or before Start) closes the
// next day. It is a pure
// function; errors come from an invalid window (v1alpha1.Validate refuses
// them first).
func inWindow(w *v1alpha1.MaintenanceWindow, now time.Time) (open bool, change time.Time, err error) {
	if w == nil {
		return true, time.Time{}, nil
	}
	loc, err := time.LoadLocation(w.TimeZone) // "" is UTC
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.window.timeZone %q: %w", w.TimeZone, err)
	}
	sh, sm, err := hhmm(w.Start)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.window.start: %w", err)
	}
	eh, em, err := hhmm(w.End)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.window.end: %w", err)
	}
	overnight := eh*60+em <= sh*60+sm
	local := now.In(loc)
	var next time.Time
	// The window opened yesterday may still be open; the next opening is
	// at most a week away.
	for d := -1; d <= 7; d++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+d, 12, 0, 0, 0, loc)
		if len(w.Days) > 0 && !slices.Contains(w.Days, day.Weekday().String()[:3]) {
			continue
		}
		opens := time.Date(day.Year(), day.Month(), day.Day(), sh, sm, 0, 0, loc)
		endDay := day.Day()
		if overnight {
			endDay++
		}
		closes := time.Date(day.Year(), day.Month(), endDay, eh, em, 0, 0, loc)
		if !closes.After(opens) {
			continue // emptied by a DST change: 02:30 to 03:30 when 02:00 skips to 03:00
		}
		if !now.Before(opens) && now.Before(closes) {
			return true, closes, nil
		}
		if opens.After(now) && (next.IsZero() || opens.Before(next)) {
			next = opens
		}
	}
	return false, next, nil
}

// hhmm parses "HH:MM".
func hhmm(s string) (h, m int, err error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, 0, fmt.Errorf("%q: want HH:MM, 00:00 to 23:59", s)
	}
	return t.Hour(), t.Minute(), nil
}
