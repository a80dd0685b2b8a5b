package watcher

import (
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
)

// The calendar math (openings of spec.window and spec.windowRefs) lives in
// internal/nodescript, shared with the client verbs (package nodescripts).

// Opening is one span of time a rollout may run in (nodescript.Opening).
type Opening = nodescript.Opening

// OpeningsHorizon is nodescript.OpeningsHorizon.
const OpeningsHorizon = nodescript.OpeningsHorizon

// openings is nodescript.Openings.
func openings(ns *v1alpha1.NodeScript, cals []*v1alpha1.MaintenanceCalendar, now time.Time, n int) ([]Opening, error) {
	return nodescript.Openings(ns, cals, now, n)
}

// calendarNow is nodescript.CalendarNow.
func calendarNow(c *v1alpha1.MaintenanceCalendar, now time.Time) (bool, string, error) {
	return nodescript.CalendarNow(c, now)
}
