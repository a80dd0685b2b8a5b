package nodescript

import (
	"fmt"
	"slices"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Opening is one interval in which runs may start: from Start (inclusive)
// to End (exclusive). A zero End means it does not close within
// OpeningsHorizon of the time asked about.
type Opening struct{ Start, End time.Time }

// OpeningsHorizon is how far ahead openings looks (a little over a year:
// every monthly and yearly window recurs within it).
const OpeningsHorizon = 400 * 24 * time.Hour

// cronSteps bounds the activations of one cron window listed per call (a
// window of "* * * * *" would otherwise take 576,000 steps over the
// horizon): past it the listing stops there, as if at the horizon.
const cronSteps = 20000

// Openings returns the next n intervals in which runs may start for ns,
// its inline spec.window and the MaintenanceCalendars of spec.windowRefs
// (cals, which must hold each of them) combined: an interval open at now
// comes first, with Start now. Runs may start while one of the named
// calendars has a window open, no blackout of any of them covers the
// moment, and spec.window (when set) is open. Overlapping and touching
// intervals merge. With neither spec.window nor spec.windowRefs the one
// opening is {now, zero}: always open. Fewer than n come back when the
// horizon (OpeningsHorizon) holds fewer. It is a pure function; errors
// come from a calendar of spec.windowRefs missing from cals (closed: the
// caller holds), or an invalid window (v1alpha1.Validate and
// ValidateCalendar refuse them first).
func Openings(ns *v1alpha1.NodeScript, cals []*v1alpha1.MaintenanceCalendar, now time.Time, n int) ([]Opening, error) {
	if n <= 0 {
		return nil, nil
	}
	byName := make(map[string]*v1alpha1.MaintenanceCalendar, len(cals))
	for _, c := range cals {
		byName[c.Name] = c
	}
	refs := make([]*v1alpha1.MaintenanceCalendar, 0, len(ns.Spec.WindowRefs))
	for _, r := range ns.Spec.WindowRefs {
		c, ok := byName[r]
		if !ok {
			return nil, fmt.Errorf("maintenancecalendar %s does not exist (closed until it does)", r)
		}
		refs = append(refs, c)
	}
	for horizon := 2 * 24 * time.Hour; ; horizon *= 4 {
		horizon = min(horizon, OpeningsHorizon)
		spans, reached, err := allowedSpans(ns.Spec.Window, refs, now, now.Add(horizon))
		if err != nil {
			return nil, err
		}
		var out []Opening
		complete := 0
		for _, s := range spans {
			if !s.End.After(now) || !s.Start.Before(reached) {
				continue
			}
			s.Start = maxTime(s.Start, now)
			if s.End.Before(reached) {
				complete++
			} else {
				s.End = time.Time{} // not seen to close within the horizon
			}
			out = append(out, s)
			if len(out) == n {
				break
			}
		}
		if complete >= n || horizon == OpeningsHorizon || reached.Before(now.Add(horizon)) {
			return out, nil
		}
	}
}

// allowedSpans lists the intervals overlapping [from, to) in which runs may
// start (see openings), merged, and the time up to which the listing is
// complete (to, or earlier when a cron window's listing was cut short).
func allowedSpans(inline *v1alpha1.MaintenanceWindow, cals []*v1alpha1.MaintenanceCalendar, from, to time.Time) ([]Opening, time.Time, error) {
	reached := to
	spans := []Opening{{Start: from, End: to.Add(time.Second)}} // open: no window applies
	if len(cals) > 0 {
		var open, closed []Opening
		for _, c := range cals {
			o, b, r, err := calendarSpans(c, from, to)
			if err != nil {
				return nil, time.Time{}, err
			}
			open, closed = append(open, o...), append(closed, b...)
			reached = minTime(reached, r)
		}
		spans = subtractSpans(mergeSpans(open), mergeSpans(closed))
	}
	if inline != nil {
		loc, err := time.LoadLocation(inline.TimeZone)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("spec.window.timeZone %q: %w", inline.TimeZone, err)
		}
		w, err := weeklySpans(inline.Days, inline.Start, inline.End, loc, from, to)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("spec.window: %w", err)
		}
		spans = intersectSpans(spans, w)
	}
	return spans, reached, nil
}

// calendarSpans lists calendar c's window intervals overlapping [from, to)
// (merged) and its blackouts (merged), and the time up to which the
// listing is complete.
func calendarSpans(c *v1alpha1.MaintenanceCalendar, from, to time.Time) (open, blackouts []Opening, reached time.Time, err error) {
	loc, err := time.LoadLocation(c.Spec.TimeZone)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("maintenancecalendar %s: spec.timeZone %q: %w", c.Name, c.Spec.TimeZone, err)
	}
	reached = to
	for i := range c.Spec.Windows {
		w := &c.Spec.Windows[i]
		s, r, err := windowSpans(w, loc, from, to)
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("maintenancecalendar %s: spec.windows[%d] (%s): %w", c.Name, i, w.Name, err)
		}
		open = append(open, s...)
		reached = minTime(reached, r)
	}
	for _, b := range c.Spec.Blackouts {
		if b.End.After(from) && b.Start.Time.Before(to) {
			blackouts = append(blackouts, Opening{Start: b.Start.Time, End: b.End.Time})
		}
	}
	return mergeSpans(open), mergeSpans(blackouts), reached, nil
}

// windowSpans lists window w's intervals overlapping [from, to), in loc,
// and the time up to which the listing is complete.
func windowSpans(w *v1alpha1.CalendarWindow, loc *time.Location, from, to time.Time) ([]Opening, time.Time, error) {
	switch {
	case w.Weekly != nil:
		s, err := weeklySpans(w.Weekly.Days, w.Weekly.Start, w.Weekly.End, loc, from, to)
		return s, to, err
	case w.Cron != nil:
		return cronSpans(w.Cron, loc, from, to)
	case w.Monthly != nil:
		s, err := monthlySpans(w.Monthly, loc, from, to)
		return s, to, err
	case w.Once != nil:
		if w.Once.End.After(from) && w.Once.Start.Time.Before(to) {
			return []Opening{{Start: w.Once.Start.Time, End: w.Once.End.Time}}, to, nil
		}
		return nil, to, nil
	}
	return nil, to, fmt.Errorf("sets none of weekly, cron, monthly, once")
}

// weeklySpans lists a weekly window's intervals overlapping [from, to):
// on days (every day when empty) from start to end, wall-clock times in
// loc; an end at or before start closes the next day. A time skipped by a
// DST change is the one time.Date normalises it to (an interval emptied
// that way does not open that day); a start that happens twice is its
// first occurrence, an end its last (a window across the repeated hour
// lasts an hour longer).
func weeklySpans(days []string, start, end string, loc *time.Location, from, to time.Time) ([]Opening, error) {
	sh, sm, err := v1alpha1.CalendarHHMM(start)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	eh, em, err := v1alpha1.CalendarHHMM(end)
	if err != nil {
		return nil, fmt.Errorf("end: %w", err)
	}
	overnight := eh*60+em <= sh*60+sm
	lf := from.In(loc)
	var out []Opening
	// The interval opened the day before from may still be open.
	for day := time.Date(lf.Year(), lf.Month(), lf.Day()-1, 12, 0, 0, 0, loc); day.Before(to.Add(24 * time.Hour)); day = time.Date(day.Year(), day.Month(), day.Day()+1, 12, 0, 0, 0, loc) {
		if len(days) > 0 && !slices.Contains(days, v1alpha1.Weekdays[day.Weekday()]) {
			continue
		}
		opens := wallClock(day.Year(), day.Month(), day.Day(), sh, sm, loc, true)
		endDay := day.Day()
		if overnight {
			endDay++
		}
		closes := wallClock(day.Year(), day.Month(), endDay, eh, em, loc, false)
		if closes.After(opens) && closes.After(from) && opens.Before(to) {
			out = append(out, Opening{Start: opens, End: closes})
		}
	}
	return out, nil
}

// cronSpans lists a cron window's intervals overlapping [from, to): each
// activation of the schedule (robfig/cron v3, in loc: a time skipped by a
// DST change does not activate, a repeated one activates twice) for the
// duration. At most cronSteps activations: then the listing is complete
// only up to the last one.
func cronSpans(w *v1alpha1.CronWindow, loc *time.Location, from, to time.Time) ([]Opening, time.Time, error) {
	sched, err := v1alpha1.ParseCalendarCron(w.Schedule, loc)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("cron.schedule: %w", err)
	}
	d := w.Duration.Duration
	if d <= 0 {
		return nil, time.Time{}, fmt.Errorf("cron.duration %s: want a positive duration", d)
	}
	var out []Opening
	t := sched.Next(from.Add(-d))
	for i := 0; !t.IsZero() && t.Before(to); i++ {
		if i == cronSteps {
			return mergeSpans(out), t, nil
		}
		out = append(out, Opening{Start: t, End: t.Add(d)})
		t = sched.Next(t)
	}
	return mergeSpans(out), to, nil
}

// monthlySpans lists a monthly window's intervals overlapping [from, to):
// once a month at the start time (wall clock in loc; one skipped by DST is
// the time time.Date normalises it to) for the duration, on the day of the
// month (past the month's end: its last day) or the nth (-1: last)
// weekday (a month without a fifth one has none).
func monthlySpans(m *v1alpha1.MonthlyWindow, loc *time.Location, from, to time.Time) ([]Opening, error) {
	h, mi, err := v1alpha1.CalendarHHMM(m.Start)
	if err != nil {
		return nil, fmt.Errorf("monthly.start: %w", err)
	}
	d := m.Duration.Duration
	if d <= 0 {
		return nil, fmt.Errorf("monthly.duration %s: want a positive duration", d)
	}
	wd := v1alpha1.CalendarWeekday(m.Weekday)
	if m.Day == 0 && (wd < 0 || m.Week == 0 || m.Week < -1 || m.Week > 5) {
		return nil, fmt.Errorf("monthly: want day, or week (1 to 5, -1) and weekday")
	}
	lf := from.Add(-d).In(loc)
	var out []Opening
	for month := time.Date(lf.Year(), lf.Month(), 1, 12, 0, 0, 0, loc); month.Before(to); month = time.Date(month.Year(), month.Month()+1, 1, 12, 0, 0, 0, loc) {
		last := time.Date(month.Year(), month.Month()+1, 0, 12, 0, 0, 0, loc).Day()
		var day int
		switch {
		case m.Day > 0:
			day = min(int(m.Day), last)
		case m.Week == -1:
			lastWd := time.Date(month.Year(), month.Month(), last, 12, 0, 0, 0, loc).Weekday()
			day = last - (int(lastWd)-int(wd)+7)%7
		default:
			day = 1 + (int(wd)-int(month.Weekday())+7)%7 + 7*(int(m.Week)-1)
			if day > last {
				continue
			}
		}
		opens := wallClock(month.Year(), month.Month(), day, h, mi, loc, true)
		if closes := opens.Add(d); closes.After(from) && opens.Before(to) {
			out = append(out, Opening{Start: opens, End: closes})
		}
	}
	return out, nil
}

// wallClock is time.Date(y, m, d, h, mi, 0, 0, loc) made definite where
// the wall-clock time happens twice (a DST change turning the clock back):
// its first occurrence when first, else its last. A time skipped by a
// change is what time.Date normalises it to.
func wallClock(y int, m time.Month, d, h, mi int, loc *time.Location, first bool) time.Time {
	t := time.Date(y, m, d, h, mi, 0, 0, loc)
	same := func(c time.Time) bool {
		return c.Hour() == t.Hour() && c.Minute() == t.Minute() && c.Day() == t.Day()
	}
	for _, step := range []time.Duration{time.Hour, 30 * time.Minute, 2 * time.Hour} {
		if first {
			if c := t.Add(-step).In(loc); same(c) {
				return c
			}
		} else if c := t.Add(step).In(loc); same(c) {
			return c
		}
	}
	return t
}

// mergeSpans sorts spans by start and merges those overlapping or touching.
func mergeSpans(spans []Opening) []Opening {
	if len(spans) == 0 {
		return nil
	}
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b Opening) int { return a.Start.Compare(b.Start) })
	out := []Opening{s[0]}
	for _, x := range s[1:] {
		last := &out[len(out)-1]
		if !x.Start.After(last.End) {
			last.End = maxTime(last.End, x.End)
			continue
		}
		out = append(out, x)
	}
	return out
}

// subtractSpans removes the merged spans cut from the merged spans a.
func subtractSpans(a, cut []Opening) []Opening {
	var out []Opening
	for _, s := range a {
		for _, c := range cut {
			if !c.End.After(s.Start) || !c.Start.Before(s.End) {
				continue
			}
			if c.Start.After(s.Start) {
				out = append(out, Opening{Start: s.Start, End: c.Start})
			}
			s.Start = c.End
			if !s.Start.Before(s.End) {
				break
			}
		}
		if s.Start.Before(s.End) {
			out = append(out, s)
		}
	}
	return out
}

// intersectSpans returns the intervals in both merged span lists.
func intersectSpans(a, b []Opening) []Opening {
	var out []Opening
	for i, j := 0, 0; i < len(a) && j < len(b); {
		s, e := maxTime(a[i].Start, b[j].Start), minTime(a[i].End, b[j].End)
		if s.Before(e) {
			out = append(out, Opening{Start: s, End: e})
		}
		if a[i].End.Before(b[j].End) {
			i++
		} else {
			j++
		}
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// CalendarNow says whether calendar c is open at now and why: which window
// is open until when, which blackout closes it (and its reason) until
// when, or when a window next opens. Errors come from an invalid calendar.
func CalendarNow(c *v1alpha1.MaintenanceCalendar, now time.Time) (bool, string, error) {
	for _, b := range c.Spec.Blackouts {
		if !now.Before(b.Start.Time) && now.Before(b.End.Time) {
			msg := fmt.Sprintf("blackout %s until %s", b.Name, b.End.UTC().Format(time.RFC3339))
			if b.Reason != "" {
				msg += ": " + b.Reason
			}
			return false, msg, nil
		}
	}
	loc, err := time.LoadLocation(c.Spec.TimeZone)
	if err != nil {
		return false, "", fmt.Errorf("spec.timeZone %q: %w", c.Spec.TimeZone, err)
	}
	for i := range c.Spec.Windows {
		w := &c.Spec.Windows[i]
		s, _, err := windowSpans(w, loc, now, now.Add(time.Second))
		if err != nil {
			return false, "", fmt.Errorf("spec.windows[%d] (%s): %w", i, w.Name, err)
		}
		for _, o := range s {
			if !now.Before(o.Start) && now.Before(o.End) {
				return true, fmt.Sprintf("window %s open until %s", w.Name, o.End.UTC().Format(time.RFC3339)), nil
			}
		}
	}
	next, err := Openings(&v1alpha1.NodeScript{Spec: v1alpha1.NodeScriptSpec{CalendarFields: v1alpha1.CalendarFields{WindowRefs: []string{c.Name}}}}, []*v1alpha1.MaintenanceCalendar{c}, now, 1)
	if err != nil {
		return false, "", err
	}
	if len(next) == 0 {
		return false, "no window opens within " + OpeningsHorizon.String(), nil
	}
	return false, "no window open; next opens at " + next[0].Start.UTC().Format(time.RFC3339), nil
}
