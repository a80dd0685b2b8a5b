package nodescript

import (
	"strings"
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

// span formats an opening in loc, "Mon 01-02 15:04 MST - Mon 01-02 15:04 MST".
func span(o Opening, loc *time.Location) string {
	const f = "Mon 01-02 15:04 MST"
	end := "open"
	if !o.End.IsZero() {
		end = o.End.In(loc).Format(f)
	}
	return o.Start.In(loc).Format(f) + " - " + end
}

// TestOpenings: every kind of window, in its zone, across both DST changes
// of 2026 in Europe/Berlin (Mar 29, Oct 25) and America/New_York (Mar 8,
// Nov 1), month ends, the leap day, blackouts and overlapping windows.
func TestOpenings(t *testing.T) {
	berlin, ny := mustLoc(t, "Europe/Berlin"), mustLoc(t, "America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h, mi int) time.Time {
		return time.Date(y, m, d, h, mi, 0, 0, loc)
	}
	weekly := func(days []string, s, e string) v1alpha1.CalendarWindow {
		return v1alpha1.CalendarWindow{Name: "w", Weekly: &v1alpha1.WeeklyWindow{Days: days, Start: s, End: e}}
	}
	cron := func(s string, d time.Duration) v1alpha1.CalendarWindow {
		return v1alpha1.CalendarWindow{Name: "c", Cron: &v1alpha1.CronWindow{Schedule: s, Duration: calDur(d)}}
	}
	monthlyDay := func(day int32, s string, d time.Duration) v1alpha1.CalendarWindow {
		return v1alpha1.CalendarWindow{Name: "m", Monthly: &v1alpha1.MonthlyWindow{Day: day, Start: s, Duration: calDur(d)}}
	}
	nth := func(week int32, wd, s string, d time.Duration) v1alpha1.CalendarWindow {
		return v1alpha1.CalendarWindow{Name: "n", Monthly: &v1alpha1.MonthlyWindow{Week: week, Weekday: wd, Start: s, Duration: calDur(d)}}
	}
	once := func(name string, s, e time.Time) v1alpha1.CalendarWindow {
		return v1alpha1.CalendarWindow{Name: name, Once: &v1alpha1.OnceWindow{Start: mt(s), End: mt(e)}}
	}
	cases := []struct {
		name   string
		loc    *time.Location
		cal    *v1alpha1.MaintenanceCalendar
		inline *v1alpha1.MaintenanceWindow
		now    time.Time
		n      int
		want   []string
	}{
		{name: "weekly overnight, open now first", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{weekly([]string{"Tue"}, "22:00", "04:00")}),
			now: at(berlin, 2026, 11, 25, 1, 0), n: 2, // Wed 01:00: Tuesday's window still open
			want: []string{"Wed 11-25 01:00 CET - Wed 11-25 04:00 CET", "Tue 12-01 22:00 CET - Wed 12-02 04:00 CET"}},
		{name: "weekly swallowed by spring-forward (Berlin)", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{weekly(nil, "02:00", "03:00")}),
			now: at(berlin, 2026, 3, 28, 12, 0), n: 2,
			want: []string{"Mon 03-30 02:00 CEST - Mon 03-30 03:00 CEST", "Tue 03-31 02:00 CEST - Tue 03-31 03:00 CEST"}},
		{name: "weekly doubled by fall-back (Berlin)", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{weekly([]string{"Sun"}, "02:00", "03:00")}),
			now: at(berlin, 2026, 10, 24, 12, 0), n: 1,
			want: []string{"Sun 10-25 02:00 CEST - Sun 10-25 03:00 CET"}}, // two hours
		{name: "cron swallowed by spring-forward (New York)", loc: ny,
			cal: calendar("c", "America/New_York", []v1alpha1.CalendarWindow{cron("30 2 * * *", 30*time.Minute)}),
			now: at(ny, 2026, 3, 7, 12, 0), n: 2,
			want: []string{"Mon 03-09 02:30 EDT - Mon 03-09 03:00 EDT", "Tue 03-10 02:30 EDT - Tue 03-10 03:00 EDT"}},
		{name: "cron doubled by fall-back (New York)", loc: ny,
			cal: calendar("c", "America/New_York", []v1alpha1.CalendarWindow{cron("30 1 * * *", 15*time.Minute)}),
			now: at(ny, 2026, 10, 31, 12, 0), n: 3,
			want: []string{"Sun 11-01 01:30 EDT - Sun 11-01 01:45 EDT", "Sun 11-01 01:30 EST - Sun 11-01 01:45 EST", "Mon 11-02 01:30 EST - Mon 11-02 01:45 EST"}},
		{name: "cron doubled by fall-back (Berlin)", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{cron("30 2 * * 0", 10*time.Minute)}),
			now: at(berlin, 2026, 10, 20, 0, 0), n: 2,
			want: []string{"Sun 10-25 02:30 CEST - Sun 10-25 02:40 CEST", "Sun 10-25 02:30 CET - Sun 10-25 02:40 CET"}},
		{name: "monthly across spring-forward keeps its wall clock (New York)", loc: ny,
			cal: calendar("c", "America/New_York", []v1alpha1.CalendarWindow{nth(2, "Sun", "01:00", 4*time.Hour)}),
			now: at(ny, 2026, 3, 1, 0, 0), n: 1, // Mar 8 01:00 EST + 4 h elapsed = 06:00 EDT
			want: []string{"Sun 03-08 01:00 EST - Sun 03-08 06:00 EDT"}},
		{name: "Patch Tuesday, second Tuesday 22:00 for 6h (Berlin)", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{nth(2, "Tue", "22:00", 6*time.Hour)}),
			now: at(berlin, 2026, 11, 1, 0, 0), n: 3,
			want: []string{"Tue 11-10 22:00 CET - Wed 11-11 04:00 CET", "Tue 12-08 22:00 CET - Wed 12-09 04:00 CET", "Tue 01-12 22:00 CET - Wed 01-13 04:00 CET"}},
		{name: "last Friday", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{nth(-1, "Fri", "20:00", time.Hour)}),
			now: at(time.UTC, 2026, 1, 1, 0, 0), n: 3,
			want: []string{"Fri 01-30 20:00 UTC - Fri 01-30 21:00 UTC", "Fri 02-27 20:00 UTC - Fri 02-27 21:00 UTC", "Fri 03-27 20:00 UTC - Fri 03-27 21:00 UTC"}},
		{name: "fifth Monday only in months that have one", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{nth(5, "Mon", "08:00", time.Hour)}),
			now: at(time.UTC, 2026, 1, 1, 0, 0), n: 2,
			want: []string{"Mon 03-30 08:00 UTC - Mon 03-30 09:00 UTC", "Mon 06-29 08:00 UTC - Mon 06-29 09:00 UTC"}},
		{name: "day 31: the month's last day", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{monthlyDay(31, "23:00", time.Hour)}),
			now: at(time.UTC, 2026, 1, 1, 0, 0), n: 4,
			want: []string{"Sat 01-31 23:00 UTC - Sun 02-01 00:00 UTC", "Sat 02-28 23:00 UTC - Sun 03-01 00:00 UTC", "Tue 03-31 23:00 UTC - Wed 04-01 00:00 UTC", "Thu 04-30 23:00 UTC - Fri 05-01 00:00 UTC"}},
		{name: "day 29: the leap day in 2028, Feb 28 in 2027", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{monthlyDay(29, "12:00", time.Hour)}),
			now: at(time.UTC, 2027, 2, 1, 0, 0), n: 1,
			want: []string{"Sun 02-28 12:00 UTC - Sun 02-28 13:00 UTC"}},
		{name: "leap day", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{monthlyDay(29, "12:00", time.Hour)}),
			now: at(time.UTC, 2028, 2, 1, 0, 0), n: 2,
			want: []string{"Tue 02-29 12:00 UTC - Tue 02-29 13:00 UTC", "Wed 03-29 12:00 UTC - Wed 03-29 13:00 UTC"}},
		{name: "once, past ones skipped", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{
				once("past", at(time.UTC, 2026, 1, 1, 0, 0), at(time.UTC, 2026, 1, 2, 0, 0)),
				once("next", at(time.UTC, 2026, 12, 5, 22, 0), at(time.UTC, 2026, 12, 6, 4, 0))}),
			now: at(time.UTC, 2026, 6, 1, 0, 0), n: 3,
			want: []string{"Sat 12-05 22:00 UTC - Sun 12-06 04:00 UTC"}},
		{name: "overlapping windows merge", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{
				weekly([]string{"Sat"}, "20:00", "23:00"),
				cron("0 22 * * 6", 3*time.Hour),
				once("o", at(time.UTC, 2026, 12, 6, 1, 0), at(time.UTC, 2026, 12, 6, 2, 0))}),
			now: at(time.UTC, 2026, 12, 1, 0, 0), n: 2,
			want: []string{"Sat 12-05 20:00 UTC - Sun 12-06 02:00 UTC", "Sat 12-12 20:00 UTC - Sun 12-13 01:00 UTC"}},
		{name: "a blackout closes the windows it overlaps, partly or wholly", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{weekly(nil, "22:00", "04:00")},
				v1alpha1.Blackout{Name: "freeze", Start: mt(at(berlin, 2026, 12, 2, 1, 0)), End: mt(at(berlin, 2026, 12, 4, 0, 0))}),
			now: at(berlin, 2026, 12, 1, 12, 0), n: 3,
			want: []string{"Tue 12-01 22:00 CET - Wed 12-02 01:00 CET", "Fri 12-04 00:00 CET - Fri 12-04 04:00 CET", "Fri 12-04 22:00 CET - Sat 12-05 04:00 CET"}},
		{name: "blackout covering now: the next opening after it", loc: berlin,
			cal: calendar("c", "Europe/Berlin", []v1alpha1.CalendarWindow{nth(2, "Tue", "22:00", 6*time.Hour)},
				v1alpha1.Blackout{Name: "december", Start: mt(at(berlin, 2026, 12, 1, 0, 0)), End: mt(at(berlin, 2027, 1, 1, 0, 0)), Reason: "freeze"}),
			now: at(berlin, 2026, 12, 8, 23, 0), n: 1,
			want: []string{"Tue 01-12 22:00 CET - Wed 01-13 04:00 CET"}},
		{name: "inline window intersects", loc: time.UTC,
			cal:    calendar("c", "", []v1alpha1.CalendarWindow{weekly(nil, "00:00", "12:00")}),
			inline: &v1alpha1.MaintenanceWindow{Days: []string{"Mon"}, Start: "10:00", End: "14:00"},
			now:    at(time.UTC, 2026, 11, 24, 0, 0), n: 1,
			want: []string{"Mon 11-30 10:00 UTC - Mon 11-30 12:00 UTC"}},
		{name: "always open cron never closes within the horizon", loc: time.UTC,
			cal: calendar("c", "", []v1alpha1.CalendarWindow{cron("* * * * *", time.Minute)}),
			now: at(time.UTC, 2026, 11, 24, 0, 0), n: 1,
			want: []string{"Tue 11-24 00:00 UTC - open"}},
		{name: "no window at all", loc: time.UTC,
			cal: calendar("c", "", nil),
			now: at(time.UTC, 2026, 11, 24, 0, 0), n: 1,
			want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := refs("c")
			ns.Spec.Window = c.inline
			got, err := Openings(ns, []*v1alpha1.MaintenanceCalendar{c.cal}, c.now, c.n)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, o := range got {
				s = append(s, span(o, c.loc))
			}
			if strings.Join(s, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("openings:\n%s\nwant:\n%s", strings.Join(s, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestOpeningsCombined: several calendars: any open window, every
// blackout; a missing calendar is an error (closed); no window is always
// open.
func TestOpeningsCombined(t *testing.T) {
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	a := calendar("a", "", []v1alpha1.CalendarWindow{{Name: "w", Weekly: &v1alpha1.WeeklyWindow{Start: "01:00", End: "02:00"}}})
	b := calendar("b", "", []v1alpha1.CalendarWindow{{Name: "w", Weekly: &v1alpha1.WeeklyWindow{Start: "03:00", End: "04:00"}}},
		v1alpha1.Blackout{Name: "x", Start: mt(now), End: mt(now.Add(26 * time.Hour))})
	got, err := Openings(refs("a", "b"), []*v1alpha1.MaintenanceCalendar{a, b}, now, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Opening{{now.Add(27 * time.Hour), now.Add(28 * time.Hour)}, {now.Add(49 * time.Hour), now.Add(50 * time.Hour)}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v (b's blackout closes a's window too)", got, want)
	}
	if _, err := Openings(refs("a", "gone"), []*v1alpha1.MaintenanceCalendar{a}, now, 1); err == nil || !strings.Contains(err.Error(), "maintenancecalendar gone does not exist") {
		t.Errorf("missing calendar: %v", err)
	}
	got, err = Openings(&v1alpha1.NodeScript{}, nil, now, 3)
	if err != nil || len(got) != 1 || !got[0].Start.Equal(now) || !got[0].End.IsZero() {
		t.Errorf("no window: %v, %v; want one opening from now, never closing", got, err)
	}
	if got, _ := Openings(refs("a"), []*v1alpha1.MaintenanceCalendar{a}, now, 0); got != nil {
		t.Errorf("n 0: %v", got)
	}
}

// TestCalendarNow: the message says which window, which blackout (with its
// reason), or when the next opens.
func TestCalendarNow(t *testing.T) {
	now := time.Date(2026, 12, 8, 22, 30, 0, 0, time.UTC)
	c := calendar("c", "UTC", []v1alpha1.CalendarWindow{{Name: "patch", Monthly: &v1alpha1.MonthlyWindow{Week: 2, Weekday: "Tue", Start: "22:00", Duration: calDur(6 * time.Hour)}}})
	open, msg, err := CalendarNow(c, now)
	if err != nil || !open || msg != "window patch open until 2026-12-09T04:00:00Z" {
		t.Errorf("open: %v %q %v", open, msg, err)
	}
	c.Spec.Blackouts = []v1alpha1.Blackout{{Name: "freeze", Start: mt(now.Add(-time.Hour)), End: mt(now.Add(time.Hour)), Reason: "December freeze"}}
	open, msg, err = CalendarNow(c, now)
	if err != nil || open || msg != "blackout freeze until 2026-12-08T23:30:00Z: December freeze" {
		t.Errorf("blackout: %v %q %v", open, msg, err)
	}
	c.Spec.Blackouts = nil
	open, msg, err = CalendarNow(c, now.Add(7*time.Hour))
	if err != nil || open || msg != "no window open; next opens at 2027-01-12T22:00:00Z" {
		t.Errorf("closed: %v %q %v", open, msg, err)
	}
}

// FuzzCalendarWindow: a window validation accepts evaluates without error,
// its openings are ordered, disjoint, non-empty and after now.
func FuzzCalendarWindow(f *testing.F) {
	f.Add("Europe/Berlin", "0 22 * * 2", int64(6*time.Hour), int32(0), int32(2), "Tue", "22:00", "04:00", int64(1795000000))
	f.Add("America/New_York", "30 2 * * *", int64(time.Hour), int32(31), int32(0), "", "02:30", "03:30", int64(1772900000))
	f.Add("", "@monthly", int64(time.Minute), int32(29), int32(-1), "Fri", "23:59", "00:00", int64(1835000000))
	f.Add("UTC", "*/5 * * * *", int64(time.Minute), int32(0), int32(5), "Mon", "00:00", "00:00", int64(0))
	f.Fuzz(func(t *testing.T, zone, sched string, d int64, day, week int32, wd, start, end string, unix int64) {
		now := time.Unix(unix%4e9, 0)
		cal := calendar("c", zone, []v1alpha1.CalendarWindow{
			{Name: "c", Cron: &v1alpha1.CronWindow{Schedule: sched, Duration: calDur(time.Duration(d))}},
			{Name: "m", Monthly: &v1alpha1.MonthlyWindow{Day: day, Week: week, Weekday: wd, Start: start, Duration: calDur(time.Duration(d))}},
			{Name: "w", Weekly: &v1alpha1.WeeklyWindow{Days: []string{wd}, Start: start, End: end}},
		})
		if len(v1alpha1.ValidateCalendar(cal)) > 0 {
			return
		}
		got, err := Openings(refs("c"), []*v1alpha1.MaintenanceCalendar{cal}, now, 4)
		if err != nil {
			t.Fatalf("valid calendar %+v: %v", cal.Spec, err)
		}
		prev := now
		for i, o := range got {
			if o.Start.Before(prev) || (i > 0 && !o.Start.After(prev)) || (!o.End.IsZero() && !o.End.After(o.Start)) {
				t.Fatalf("openings out of order or empty at %d: %v", i, got)
			}
			if o.End.IsZero() {
				if i != len(got)-1 {
					t.Fatalf("an opening without end before the last: %v", got)
				}
				break
			}
			prev = o.End
		}
	})
}
