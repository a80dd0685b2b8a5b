package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateCalendarFields(t *testing.T) {
	for name, tc := range map[string]struct {
		refs []string
		want string
	}{
		"two calendars": {[]string{"patch-tuesday", "eu.weekends"}, ""},
		"not a name":    {[]string{"Patch_Tuesday"}, `spec.windowRefs[0]: Invalid value: "Patch_Tuesday": name a MaintenanceCalendar`},
		"empty":         {[]string{""}, "spec.windowRefs[0]: Required value"},
		"duplicate":     {[]string{"a", "b", "a"}, `spec.windowRefs[2]: Duplicate value: "a"`},
		"too many":      {strings.Split("a b c d e f g h i j k l m n o p q", " "), "spec.windowRefs: Too many: 17"},
	} {
		ns := valid()
		ns.Spec.WindowRefs = tc.refs
		got := Validate(ns).ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: %v, want valid", name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", name, got, tc.want)
		}
	}
}

func TestValidateCalendar(t *testing.T) {
	at := func(s string) metav1.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return metav1.Time{Time: tm}
	}
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	ok := func() *MaintenanceCalendar {
		return &MaintenanceCalendar{ObjectMeta: metav1.ObjectMeta{Name: "patch"}, Spec: MaintenanceCalendarSpec{
			TimeZone: "Europe/Berlin",
			Windows: []CalendarWindow{
				{Name: "patch-tuesday", Monthly: &MonthlyWindow{Week: 2, Weekday: "Tue", Start: "22:00", Duration: d(6 * time.Hour)}},
				{Name: "last-day", Monthly: &MonthlyWindow{Day: 31, Start: "01:00", Duration: d(time.Hour)}},
				{Name: "nightly", Cron: &CronWindow{Schedule: "0 2 * * *", Duration: d(time.Hour)}},
				{Name: "weekend", Weekly: &WeeklyWindow{Days: []string{"Sat", "Sun"}, Start: "10:00", End: "14:00"}},
				{Name: "exception", Once: &OnceWindow{Start: at("2026-12-05T22:00:00+01:00"), End: at("2026-12-06T04:00:00+01:00")}},
			},
			Blackouts: []Blackout{{Name: "december", Start: at("2026-12-15T00:00:00+01:00"), End: at("2027-01-06T00:00:00+01:00"), Reason: "change freeze"}},
		}}
	}
	for name, tc := range map[string]struct {
		mutate func(*MaintenanceCalendar)
		want   string
	}{
		"valid":           {func(*MaintenanceCalendar) {}, ""},
		"no name":         {func(c *MaintenanceCalendar) { c.Name = "" }, "metadata.name: Required value"},
		"unknown zone":    {func(c *MaintenanceCalendar) { c.Spec.TimeZone = "Mars/Olympus" }, `spec.timeZone: Invalid value: "Mars/Olympus": want an IANA time zone`},
		"bad cron":        {func(c *MaintenanceCalendar) { c.Spec.Windows[2].Cron.Schedule = "0 25 * * *" }, `spec.windows[2].cron.schedule: Invalid value: "0 25 * * *"`},
		"cron six field":  {func(c *MaintenanceCalendar) { c.Spec.Windows[2].Cron.Schedule = "0 0 2 * * *" }, "spec.windows[2].cron.schedule"},
		"cron tz":         {func(c *MaintenanceCalendar) { c.Spec.Windows[2].Cron.Schedule = "CRON_TZ=UTC 0 2 * * *" }, "no CRON_TZ= or TZ= prefix"},
		"cron every":      {func(c *MaintenanceCalendar) { c.Spec.Windows[2].Cron.Schedule = "@every 1h" }, "@every is an interval"},
		"cron duration":   {func(c *MaintenanceCalendar) { c.Spec.Windows[2].Cron.Duration = d(0) }, "spec.windows[2].cron.duration: Invalid value: \"0s\": want 1m to 168h"},
		"long monthly":    {func(c *MaintenanceCalendar) { c.Spec.Windows[0].Monthly.Duration = d(200 * time.Hour) }, "spec.windows[0].monthly.duration"},
		"week 6":          {func(c *MaintenanceCalendar) { c.Spec.Windows[0].Monthly.Week = 6 }, "spec.windows[0].monthly.week: Invalid value: 6: want 1 to 5"},
		"week -2":         {func(c *MaintenanceCalendar) { c.Spec.Windows[0].Monthly.Week = -2 }, "spec.windows[0].monthly.week"},
		"no weekday":      {func(c *MaintenanceCalendar) { c.Spec.Windows[0].Monthly.Weekday = "" }, "spec.windows[0].monthly.weekday: Unsupported value"},
		"day and week":    {func(c *MaintenanceCalendar) { c.Spec.Windows[0].Monthly.Day = 3 }, "spec.windows[0].monthly.day: Invalid value: 3: set day, or week and weekday"},
		"day 32":          {func(c *MaintenanceCalendar) { c.Spec.Windows[1].Monthly.Day = 32 }, "spec.windows[1].monthly.day: Invalid value: 32"},
		"neither":         {func(c *MaintenanceCalendar) { c.Spec.Windows[1].Monthly.Day = 0 }, "spec.windows[1].monthly.day: Required value"},
		"monthly start":   {func(c *MaintenanceCalendar) { c.Spec.Windows[1].Monthly.Start = "1:00" }, "spec.windows[1].monthly.start"},
		"weekly day":      {func(c *MaintenanceCalendar) { c.Spec.Windows[3].Weekly.Days[0] = "Saturday" }, "spec.windows[3].weekly.days[0]: Unsupported value"},
		"weekly end":      {func(c *MaintenanceCalendar) { c.Spec.Windows[3].Weekly.End = "24:00" }, "spec.windows[3].weekly.end"},
		"once backwards":  {func(c *MaintenanceCalendar) { c.Spec.Windows[4].Once.End = at("2026-12-05T20:00:00+01:00") }, "spec.windows[4].once.end: Invalid value: \"2026-12-05T19:00:00Z\": ends at or before its start"},
		"once no start":   {func(c *MaintenanceCalendar) { c.Spec.Windows[4].Once.Start = metav1.Time{} }, "spec.windows[4].once.start: Required value"},
		"two kinds":       {func(c *MaintenanceCalendar) { c.Spec.Windows[4].Weekly = c.Spec.Windows[3].Weekly }, "spec.windows[4]: Invalid value: \"exception\": sets 2 of weekly, cron, monthly, once"},
		"no kind":         {func(c *MaintenanceCalendar) { c.Spec.Windows[4].Once = nil }, "sets 0 of weekly"},
		"dup window":      {func(c *MaintenanceCalendar) { c.Spec.Windows[1].Name = "patch-tuesday" }, `spec.windows[1].name: Duplicate value: "patch-tuesday"`},
		"window name":     {func(c *MaintenanceCalendar) { c.Spec.Windows[1].Name = "Last Day" }, "spec.windows[1].name: Invalid value"},
		"blackout no end": {func(c *MaintenanceCalendar) { c.Spec.Blackouts[0].End = metav1.Time{} }, "spec.blackouts[0].end: Required value"},
		"blackout backwards": {func(c *MaintenanceCalendar) {
			c.Spec.Blackouts[0].End = c.Spec.Blackouts[0].Start
		}, "spec.blackouts[0].end: Invalid value"},
		"dup blackout": {func(c *MaintenanceCalendar) { c.Spec.Blackouts = append(c.Spec.Blackouts, c.Spec.Blackouts[0]) }, `spec.blackouts[1].name: Duplicate value: "december"`},
	} {
		c := ok()
		tc.mutate(c)
		got := ValidateCalendar(c).ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: %v, want valid", name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", name, got, tc.want)
		}
	}
}

func TestValidateCalendarDurationSyntax(t *testing.T) {
	doc := `apiVersion: nodeexec.io/v1alpha1
kind: MaintenanceCalendar
metadata: {name: c}
spec:
  windows:
  - {name: a, cron: {schedule: "0 2 * * *", duration: 2hours}}
  - {name: b, monthly: {day: 1, start: "01:00", duration: 1h}}
  - {name: c, once: {start: tomorrow, end: "2026-12-06T04:00:00Z"}}
  blackouts:
  - {name: x, start: "2026-12-15T00:00:00Z", end: 2027}
`
	got := ValidateCalendarDurationSyntax([]byte(doc)).ToAggregate()
	for _, want := range []string{"spec.windows[0].cron.duration", "spec.windows[2].once.start", "spec.blackouts[0].end"} {
		if got == nil || !strings.Contains(got.Error(), want) {
			t.Errorf("%v: want %s", got, want)
		}
	}
	if got != nil && strings.Contains(got.Error(), "windows[1]") {
		t.Errorf("%v: windows[1] is fine", got)
	}
}
