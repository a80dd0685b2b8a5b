package watcher

import (
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// This file stands in for the calendar part's openings (calendar.go) while
// it is not merged: the inline spec.window only. At the merge, delete this
// file and put in forecast.go:
//
//	func (c *controller) forecastOpenings(ns *v1alpha1.NodeScript, now time.Time, n int) ([]Opening, *time.Location, error) {
//		cals, err := c.calendarsFor(ns)
//		if err != nil {
//			return nil, nil, err
//		}
//		ops, err := openings(ns, cals, now, n)
//		return ops, forecastZone(ns, cals), err
//	}
//
// with forecastZone the zone of spec.window, else of the first calendar
// named (MaintenanceCalendar.spec.timeZone), else UTC.

// Opening is an interval in which runs may start; End is zero when it
// never closes.
type Opening struct{ Start, End time.Time }

// openings is the next n intervals in which runs may start for ns (one
// open at now first, with Start = now): here the inline spec.window only,
// found with InWindow repeatedly. No window: one opening that never closes.
func openings(ns *v1alpha1.NodeScript, _ []struct{}, now time.Time, n int) ([]Opening, error) {
	w := ns.Spec.Window
	if w == nil {
		return []Opening{{Start: now}}, nil
	}
	var ops []Opening
	t := now
	for len(ops) < n {
		open, change, err := InWindow(w, t)
		if err != nil {
			return nil, err
		}
		if !open {
			if change.IsZero() {
				return ops, nil // never opens again (no day listed)
			}
			t = change
			continue
		}
		ops = append(ops, Opening{Start: t, End: change})
		t = change
	}
	return ops, nil
}

// forecastOpenings is the next n openings of ns's window(s), with the time
// zone the ETA is shown in (spec.window.timeZone; UTC without one).
func (c *controller) forecastOpenings(ns *v1alpha1.NodeScript, now time.Time, n int) ([]Opening, *time.Location, error) {
	ops, err := openings(ns, nil, now, n)
	if err != nil {
		return nil, nil, err
	}
	loc := time.UTC
	if w := ns.Spec.Window; w != nil {
		if loc, err = time.LoadLocation(w.TimeZone); err != nil {
			return nil, nil, fmt.Errorf("spec.window.timeZone %q: %w", w.TimeZone, err)
		}
	}
	return ops, loc, nil
}
