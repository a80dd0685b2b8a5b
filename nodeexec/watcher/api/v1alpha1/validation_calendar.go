package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// cronParser reads a CronWindow's schedule: the standard 5 fields or a
// descriptor.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCalendarCron parses a CronWindow's schedule (robfig/cron v3's
// standard 5-field syntax, or @daily, @weekly, @monthly, @yearly) into a
// schedule read in loc. Errors: a CRON_TZ=/TZ= prefix (the calendar's
// timeZone says the zone), @every (not a time of day), or the parser's.
func ParseCalendarCron(schedule string, loc *time.Location) (*cron.SpecSchedule, error) {
	s := strings.TrimSpace(schedule)
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		return nil, errors.New("no CRON_TZ= or TZ= prefix: the calendar's spec.timeZone gives the zone")
	}
	if strings.HasPrefix(s, "@every") {
		return nil, errors.New("@every is an interval, not a time: give 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 22 * * 2\"")
	}
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("want 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 22 * * 2\") or @daily/@weekly/@monthly/@yearly: %w", err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unsupported schedule %q", schedule)
	}
	spec.Location = loc
	return spec, nil
}

// Weekdays are the day names of windows, Sunday first (time.Weekday's order).
var Weekdays = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// ValidateCalendar reports what is wrong with a MaintenanceCalendar, each
// error naming its field and the fix: the name (a DNS subdomain),
// spec.timeZone (an IANA zone time.LoadLocation knows), each window (a
// unique DNS-label name; exactly one of weekly, cron, monthly, once;
// HH:MM times; a cron schedule robfig/cron v3 parses; durations from 1m
// to 168h; day 1..31 or week 1..5/-1 with a weekday; once's end after its
// start) and each blackout (a unique name, start and end set, end after
// start).
func ValidateCalendar(c *MaintenanceCalendar) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "name the MaintenanceCalendar"))
	} else if msgs := validation.IsDNS1123Subdomain(c.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), c.Name, strings.Join(msgs, "; ")))
	}
	spec := field.NewPath("spec")
	loc, err := time.LoadLocation(c.Spec.TimeZone)
	if err != nil {
		errs = append(errs, field.Invalid(spec.Child("timeZone"), c.Spec.TimeZone, "want an IANA time zone, e.g. Europe/Berlin or America/New_York (or leave it out for UTC)"))
		loc = time.UTC
	}
	if n := len(c.Spec.Windows); n > MaxCalendarWindows {
		errs = append(errs, field.TooMany(spec.Child("windows"), n, MaxCalendarWindows))
	}
	if n := len(c.Spec.Blackouts); n > MaxCalendarBlackouts {
		errs = append(errs, field.TooMany(spec.Child("blackouts"), n, MaxCalendarBlackouts))
	}
	seen := map[string]bool{}
	for i := range c.Spec.Windows {
		w := &c.Spec.Windows[i]
		p := spec.Child("windows").Index(i)
		errs = append(errs, uniqueLabel(p.Child("name"), w.Name, seen)...)
		errs = append(errs, validateCalendarWindow(p, w, loc)...)
	}
	seen = map[string]bool{}
	for i := range c.Spec.Blackouts {
		b := &c.Spec.Blackouts[i]
		p := spec.Child("blackouts").Index(i)
		errs = append(errs, uniqueLabel(p.Child("name"), b.Name, seen)...)
		errs = append(errs, validateRange(p, b.Start.Time, b.End.Time, "the freeze")...)
		if len(b.Reason) > 256 {
			errs = append(errs, field.TooLong(p.Child("reason"), "", 256))
		}
	}
	return errs
}

func uniqueLabel(p *field.Path, name string, seen map[string]bool) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(p, "give a name (a DNS label, e.g. patch-tuesday)")}
	case len(validation.IsDNS1123Label(name)) > 0:
		return field.ErrorList{field.Invalid(p, name, "want a DNS label (lower-case letters, digits and '-', e.g. patch-tuesday)")}
	case seen[name]:
		return field.ErrorList{field.Duplicate(p, name)}
	}
	seen[name] = true
	return nil
}

// validateRange checks a once window's or a blackout's start and end.
func validateRange(p *field.Path, start, end time.Time, what string) field.ErrorList {
	var errs field.ErrorList
	if start.IsZero() {
		errs = append(errs, field.Required(p.Child("start"), "give when "+what+" starts, RFC 3339 (e.g. 2026-12-15T00:00:00+01:00)"))
	}
	if end.IsZero() {
		errs = append(errs, field.Required(p.Child("end"), "give when "+what+" ends, RFC 3339 (e.g. 2027-01-06T00:00:00+01:00)"))
	}
	if !start.IsZero() && !end.IsZero() && !end.After(start) {
		errs = append(errs, field.Invalid(p.Child("end"), end.UTC().Format(time.RFC3339), "ends at or before its start ("+start.UTC().Format(time.RFC3339)+"): want an end after the start"))
	}
	return errs
}

func validateCalendarWindow(p *field.Path, w *CalendarWindow, loc *time.Location) field.ErrorList {
	kinds := 0
	for _, set := range []bool{w.Weekly != nil, w.Cron != nil, w.Monthly != nil, w.Once != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return field.ErrorList{field.Invalid(p, w.Name, fmt.Sprintf("sets %d of weekly, cron, monthly, once: set exactly one", kinds))}
	case w.Weekly != nil:
		return validateWeekly(p.Child("weekly"), w.Weekly)
	case w.Cron != nil:
		cp := p.Child("cron")
		var errs field.ErrorList
		if _, err := ParseCalendarCron(w.Cron.Schedule, loc); err != nil {
			errs = append(errs, field.Invalid(cp.Child("schedule"), w.Cron.Schedule, err.Error()))
		}
		return append(errs, validateCalendarDuration(cp.Child("duration"), w.Cron.Duration.Duration)...)
	case w.Monthly != nil:
		return validateMonthly(p.Child("monthly"), w.Monthly)
	}
	return validateRange(p.Child("once"), w.Once.Start.Time, w.Once.End.Time, "the window")
}

// validateWeekly: known days, start and end as HH:MM.
func validateWeekly(wp *field.Path, w *WeeklyWindow) field.ErrorList {
	var errs field.ErrorList
	for j, d := range w.Days {
		if weekday(d) < 0 {
			errs = append(errs, field.NotSupported(wp.Child("days").Index(j), d, Weekdays))
		}
	}
	errs = append(errs, validateCalendarHHMM(wp.Child("start"), w.Start)...)
	return append(errs, validateCalendarHHMM(wp.Child("end"), w.End)...)
}

// validateMonthly: a day, or a week and a weekday; a start and a duration.
func validateMonthly(mp *field.Path, m *MonthlyWindow) field.ErrorList {
	var errs field.ErrorList
	switch {
	case m.Day != 0 && (m.Week != 0 || m.Weekday != ""):
		errs = append(errs, field.Invalid(mp.Child("day"), m.Day, "set day, or week and weekday, not both"))
	case m.Day != 0:
		if m.Day < 1 || m.Day > 31 {
			errs = append(errs, field.Invalid(mp.Child("day"), m.Day, "want 1 to 31 (a day past the month's end is its last day)"))
		}
	default:
		errs = validateMonthlyWeekday(mp, m)
	}
	errs = append(errs, validateCalendarHHMM(mp.Child("start"), m.Start)...)
	return append(errs, validateCalendarDuration(mp.Child("duration"), m.Duration.Duration)...)
}

// validateMonthlyWeekday: the nth (or last) weekday of the month.
func validateMonthlyWeekday(mp *field.Path, m *MonthlyWindow) field.ErrorList {
	var errs field.ErrorList
	if m.Week == 0 && m.Weekday == "" {
		errs = append(errs, field.Required(mp.Child("day"), "set day (1 to 31), or week (1 to 5, -1 for the last) and weekday"))
	}
	if m.Week < -1 || m.Week == 0 || m.Week > 5 {
		errs = append(errs, field.Invalid(mp.Child("week"), m.Week, "want 1 to 5 (the nth weekday of the month), or -1 for the last"))
	}
	if weekday(m.Weekday) < 0 {
		errs = append(errs, field.NotSupported(mp.Child("weekday"), m.Weekday, Weekdays))
	}
	return errs
}

// validateCalendarHHMM: s is HH:MM.
func validateCalendarHHMM(fp *field.Path, s string) field.ErrorList {
	if _, _, err := CalendarHHMM(s); err != nil {
		return field.ErrorList{field.Invalid(fp, s, "want HH:MM, 00:00 to 23:59 (24 h), e.g. 22:00")}
	}
	return nil
}

// validateCalendarDuration: 1m to MaxCalendarDuration.
func validateCalendarDuration(fp *field.Path, d time.Duration) field.ErrorList {
	if d < time.Minute || d > MaxCalendarDuration {
		return field.ErrorList{field.Invalid(fp, d.String(), "want 1m to 168h, e.g. 4h (a longer window is a once window)")}
	}
	return nil
}

// weekday returns the time.Weekday of a day name (Mon..Sun), or -1.
func weekday(d string) time.Weekday {
	for i, n := range Weekdays {
		if n == d {
			return time.Weekday(i)
		}
	}
	return -1
}

// CalendarWeekday is weekday for the watcher: the time.Weekday of Mon..Sun,
// or -1.
func CalendarWeekday(d string) time.Weekday { return weekday(d) }

// CalendarHHMM parses "HH:MM" (00:00 to 23:59).
func CalendarHHMM(s string) (h, m int, err error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, 0, fmt.Errorf("%q: want HH:MM, 00:00 to 23:59", s)
	}
	return t.Hour(), t.Minute(), nil
}

// validateCalendarFields checks spec.windowRefs: DNS subdomains (names of
// MaintenanceCalendars), no duplicates, at most 16.
func validateCalendarFields(spec *field.Path, s *NodeScriptSpec) field.ErrorList {
	var errs field.ErrorList
	p := spec.Child("windowRefs")
	if n := len(s.WindowRefs); n > 16 {
		errs = append(errs, field.TooMany(p, n, 16))
	}
	seen := map[string]bool{}
	for i, r := range s.WindowRefs {
		switch {
		case r == "":
			errs = append(errs, field.Required(p.Index(i), "name a MaintenanceCalendar"))
		case len(validation.IsDNS1123Subdomain(r)) > 0:
			errs = append(errs, field.Invalid(p.Index(i), r, "name a MaintenanceCalendar (a DNS subdomain: lower-case letters, digits, '-' and '.'): "+strings.Join(validation.IsDNS1123Subdomain(r), "; ")))
		case seen[r]:
			errs = append(errs, field.Duplicate(p.Index(i), r))
		}
		seen[r] = true
	}
	return errs
}

// ValidateCalendarDurationSyntax checks a MaintenanceCalendar document's
// durations (spec.windows[*].cron.duration, .monthly.duration) and times
// (spec.windows[*].once.start/end, spec.blackouts[*].start/end, RFC 3339)
// before it is decoded, so that an error names the field (the decoder's
// would not). A document that is not YAML is left to the decoder.
func ValidateCalendarDurationSyntax(doc []byte) field.ErrorList {
	var m struct {
		Spec struct {
			Windows []struct {
				Cron, Monthly map[string]any
				Once          map[string]any
			} `json:"windows"`
			Blackouts []map[string]any `json:"blackouts"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil
	}
	var errs field.ErrorList
	dur := func(p *field.Path, v any) {
		if v == nil {
			return
		}
		s, ok := v.(string)
		if _, err := time.ParseDuration(s); !ok || err != nil {
			errs = append(errs, field.Invalid(p, v, "want a duration such as 30m, 4h or 6h30m"))
		}
	}
	stamp := func(p *field.Path, v any) {
		if v == nil {
			return
		}
		s, ok := v.(string)
		if _, err := time.Parse(time.RFC3339, s); !ok || err != nil {
			errs = append(errs, field.Invalid(p, v, "want an RFC 3339 time such as 2026-12-15T00:00:00+01:00"))
		}
	}
	spec := field.NewPath("spec")
	for i, w := range m.Spec.Windows {
		p := spec.Child("windows").Index(i)
		if w.Cron != nil {
			dur(p.Child("cron", "duration"), w.Cron["duration"])
		}
		if w.Monthly != nil {
			dur(p.Child("monthly", "duration"), w.Monthly["duration"])
		}
		if w.Once != nil {
			stamp(p.Child("once", "start"), w.Once["start"])
			stamp(p.Child("once", "end"), w.Once["end"])
		}
	}
	for i, b := range m.Spec.Blackouts {
		p := spec.Child("blackouts").Index(i)
		stamp(p.Child("start"), b["start"])
		stamp(p.Child("end"), b["end"])
	}
	return errs
}
