package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ParseReapplySchedule parses spec.reapply.schedule with robfig/cron v3's
// standard parser (5 fields: minute, hour, day of month, month, day of
// week; or a descriptor: @yearly, @monthly, @weekly, @daily, @hourly). A
// leading CRON_TZ=ZONE (or TZ=ZONE) names the IANA time zone its times are
// in; without one they are UTC. @every is refused (spec.reapply.interval
// does that), and so is a schedule that never fires (e.g. Feb 30: none in
// the 5 years robfig/cron looks ahead). Errors say what is wrong and give
// an example; the parser's own message is wrapped.
func ParseReapplySchedule(expr string) (sched cron.Schedule, err error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New("empty: give a cron expression such as \"0 3 * * *\" (03:00 UTC every day)")
	}
	body := expr
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		zone, rest, ok := strings.Cut(expr, " ")
		if !ok || strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("%s names a time zone but no schedule: give e.g. \"CRON_TZ=Europe/Berlin 0 3 * * *\"", zone)
		}
		body = strings.TrimSpace(rest)
	} else {
		expr = "CRON_TZ=UTC " + expr
	}
	if strings.HasPrefix(body, "@every") {
		return nil, errors.New("@every is not a schedule here: use spec.reapply.interval for a fixed period (e.g. 24h), or a cron expression such as \"0 3 * * *\"")
	}
	defer func() {
		// The parser has panicked on odd input before; an input it cannot
		// read is an error, never a crash.
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("not a cron expression (%v): give 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\"", r)
		}
	}()
	sched, err = cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("not a cron expression: give 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", optionally after CRON_TZ=ZONE: %w", err)
	}
	if sched.Next(time.Unix(0, 0)).IsZero() {
		return nil, errors.New("never fires (no such date: e.g. day 30 of February): give a schedule that fires, e.g. \"0 3 1 * *\"")
	}
	return sched, nil
}

// validateLifecycle checks spec.reapply.schedule (ParseReapplySchedule)
// and spec.uninstallScript (length, NUL, not only blanks), naming each
// field and its fix.
func validateLifecycle(spec *field.Path, s *NodeScriptSpec) field.ErrorList {
	var errs field.ErrorList
	if r := s.Reapply; r != nil && r.Schedule != "" {
		if _, err := ParseReapplySchedule(r.Schedule); err != nil {
			errs = append(errs, field.Invalid(spec.Child("reapply", "schedule"), r.Schedule, err.Error()))
		}
	}
	errs = append(errs, validateScript(spec.Child("uninstallScript"), s.UninstallScript)...)
	if s.UninstallScript != "" && strings.TrimSpace(s.UninstallScript) == "" {
		errs = append(errs, field.Invalid(spec.Child("uninstallScript"), s.UninstallScript, "only blanks: give the script that undoes spec.script on a node, or leave uninstallScript out"))
	}
	return errs
}
