package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CalendarResource is MaintenanceCalendar's plural resource name, for
// dynamic clients.
var CalendarResource = GroupVersion.WithResource("maintenancecalendars")

// MaintenanceCalendar is a shared maintenance calendar: several windows
// (weekly, cron + duration, monthly, one-off) in one IANA time zone, and
// blackouts (change freezes) that close any window they overlap. It is
// open when one of its windows is open and none of its blackouts covers
// the moment. NodeScripts name calendars in spec.windowRefs and start runs
// only while one of them is open (and no blackout of any of them covers
// the moment). See docs/maintenancecalendar.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=mcal,categories=nodeexec
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.timeZone`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MaintenanceCalendar struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MaintenanceCalendarSpec `json:"spec"`
}

// MaintenanceCalendarList is a list of MaintenanceCalendars.
//
// +kubebuilder:object:root=true
type MaintenanceCalendarList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MaintenanceCalendar `json:"items"`
}

// Bounds of a MaintenanceCalendar.
const (
	// MaxCalendarWindows and MaxCalendarBlackouts bound spec.windows and
	// spec.blackouts.
	MaxCalendarWindows   = 64
	MaxCalendarBlackouts = 256
	// MaxCalendarDuration bounds the duration of cron and monthly windows
	// (7 days): a window open longer is a once window.
	MaxCalendarDuration = 7 * 24 * time.Hour
)

// MaintenanceCalendarSpec holds the calendar's windows and blackouts.
type MaintenanceCalendarSpec struct {
	// TimeZone is the IANA time zone (e.g. Europe/Berlin) in which the
	// weekly, cron and monthly windows' wall-clock times are read, so they
	// follow daylight saving time. Defaults to UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Windows are the times runs may start: the calendar is open while any
	// of them is (overlapping windows merge). Empty: the calendar is never
	// open.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Windows []CalendarWindow `json:"windows,omitempty"`
	// Blackouts are absolute time ranges (change freezes) during which the
	// calendar is closed whatever its windows say; a NodeScript naming the
	// calendar starts nothing during them, even when another calendar it
	// names is open.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Blackouts []Blackout `json:"blackouts,omitempty"`
}

// CalendarWindow is one recurring or one-off window: exactly one of
// weekly, cron, monthly and once.
//
// +kubebuilder:validation:XValidation:rule="[has(self.weekly), has(self.cron), has(self.monthly), has(self.once)].filter(x, x).size() == 1",message="set exactly one of weekly, cron, monthly, once"
type CalendarWindow struct {
	// Name of the window, unique in the calendar (a DNS label), shown by
	// `nodeexec windows` and in the NodeScript's status. Required.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Weekly opens on some days of the week from start to end (wall clock,
	// like spec.window of a NodeScript).
	// +optional
	Weekly *WeeklyWindow `json:"weekly,omitempty"`
	// Cron opens at each time of a cron schedule for a duration.
	// +optional
	Cron *CronWindow `json:"cron,omitempty"`
	// Monthly opens once a month, on a day of the month or on the nth (or
	// last) weekday, for a duration.
	// +optional
	Monthly *MonthlyWindow `json:"monthly,omitempty"`
	// Once opens once, from start to end (the exceptional maintenance).
	// +optional
	Once *OnceWindow `json:"once,omitempty"`
}

// WeeklyWindow opens on Days from Start to End, wall-clock times in the
// calendar's time zone; an End at or before Start closes the next day (an
// overnight window: 22:00 to 04:00). A Start skipped by a DST change is
// the wall-clock time it normalises to (02:30 becomes 03:30), so a window
// lying wholly in the skipped hour does not open that day; a window across
// the repeated hour lasts an hour longer.
type WeeklyWindow struct {
	// Days the window opens on: Mon, Tue, Wed, Thu, Fri, Sat, Sun. Empty
	// means every day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	Days []string `json:"days,omitempty"`
	// Start is when the window opens, "HH:MM" (24 h). Required.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// End is when the window closes, "HH:MM"; at or before Start it closes
	// the next day. Required.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`
}

// CronWindow opens at each activation of Schedule for Duration.
type CronWindow struct {
	// Schedule is a standard 5-field cron expression (minute hour
	// day-of-month month day-of-week, e.g. "0 22 * * 2") or a descriptor
	// (@daily, @weekly, @monthly, @yearly), read in the calendar's time
	// zone (no CRON_TZ= prefix, no @every). Parsed by robfig/cron v3: a
	// time skipped by a DST change does not activate that day, a repeated
	// one activates twice. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`
	// Duration the window stays open after each activation (elapsed time),
	// e.g. 4h; from 1m to 168h. Required.
	Duration metav1.Duration `json:"duration"`
}

// MonthlyWindow opens once a month at Start (wall clock) for Duration:
// on Day of the month, or on the Week-th Weekday (Week -1: the last). A
// Day past the month's end (31 in April, 29 to 31 in February) opens on
// the month's last day, so no month is skipped.
//
// +kubebuilder:validation:XValidation:rule="has(self.day) != (has(self.week) || has(self.weekday))",message="set day, or week and weekday"
// +kubebuilder:validation:XValidation:rule="has(self.week) == has(self.weekday)",message="week and weekday go together"
type MonthlyWindow struct {
	// Day of the month, 1 to 31.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=31
	// +optional
	Day int32 `json:"day,omitempty"`
	// Week is which Weekday of the month: 1 to 5 (5: only in months with
	// five of them), or -1 for the last.
	// +kubebuilder:validation:Minimum=-1
	// +kubebuilder:validation:Maximum=5
	// +optional
	Week int32 `json:"week,omitempty"`
	// Weekday with Week: Mon, Tue, Wed, Thu, Fri, Sat or Sun.
	// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	// +optional
	Weekday string `json:"weekday,omitempty"`
	// Start is when the window opens, "HH:MM" (24 h), in the calendar's
	// time zone. Required.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Duration the window stays open (elapsed time), e.g. 6h; from 1m to
	// 168h. Required.
	Duration metav1.Duration `json:"duration"`
}

// OnceWindow opens once, from Start to End (RFC 3339 times).
type OnceWindow struct {
	// Start, RFC 3339 (e.g. 2026-12-05T22:00:00+01:00). Required.
	Start metav1.Time `json:"start"`
	// End, RFC 3339, after Start. Required.
	End metav1.Time `json:"end"`
}

// Blackout closes the calendar from Start to End whatever its windows say.
type Blackout struct {
	// Name of the blackout, unique in the calendar (a DNS label). Required.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Start, RFC 3339. Required.
	Start metav1.Time `json:"start"`
	// End, RFC 3339, after Start. Required.
	End metav1.Time `json:"end"`
	// Reason is shown in the NodeScript's status while the blackout holds
	// it, e.g. "December change freeze".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// CalendarFields are the NodeScript's calendar fields (inlined in
// NodeScriptSpec). None is part of the spec hash.
type CalendarFields struct {
	// WindowRefs names MaintenanceCalendars: runs start only while one of
	// them is open and no blackout of any of them covers the moment (and
	// spec.window, when set, is open too). A calendar that does not exist
	// or cannot be read counts as closed (condition Progressing False,
	// reason OutsideMaintenanceWindow, with why). Defaults to none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	WindowRefs []string `json:"windowRefs,omitempty"`
}

// CalendarStatus is what the watcher last saw of one of spec.windowRefs.
type CalendarStatus struct {
	// Name of the MaintenanceCalendar.
	Name string `json:"name"`
	// Open is whether it lets runs start now.
	Open bool `json:"open"`
	// Message says why it is closed (no window open, a blackout and its
	// reason, or the calendar missing), or which window is open.
	// +optional
	Message string `json:"message,omitempty"`
}
