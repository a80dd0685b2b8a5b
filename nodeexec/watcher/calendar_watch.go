package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// newCalendarOpen is the metric nodeexec_watcher_calendar_open.
func newCalendarOpen() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_calendar_open",
		Help: "1 while a MaintenanceCalendar of spec.windowRefs is open, 0 while it is closed (no window, a blackout, or missing), by NodeScript and calendar.",
	}, []string{"nodescript", "calendar"})
}

// calendarInformer returns the informer of MaintenanceCalendars from f, nil
// when the API server does not serve the resource (found by a LIST of at
// most one object; a NodeScript naming a calendar then starts nothing).
// RBAC: list/watch on maintenancecalendars.
func (w *Watcher) calendarInformer(ctx context.Context, f dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
	if _, err := w.o.Dynamic.Resource(v1alpha1.CalendarResource).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		logr.FromContextOrDiscard(ctx).Info("not watched: the API server does not serve it (or refused)", "resource", v1alpha1.CalendarResource.String(), "err", err.Error())
		return nil
	}
	return f.ForResource(v1alpha1.CalendarResource).Informer()
}

// calendarHandler re-reconciles the NodeScripts (in scripts) naming a
// MaintenanceCalendar that was added, changed or deleted: add queues a
// NodeScript's key.
func calendarHandler(scripts cache.Store, add func(string)) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		name := u.GetName()
		for _, o := range scripts.List() {
			s, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			refs, _, _ := unstructured.NestedStringSlice(s.Object, "spec", "windowRefs")
			for _, r := range refs {
				if r == name {
					add(s.GetName())
					break
				}
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

// errCalendarsNotServed: the MaintenanceCalendar CRD is not installed.
var errCalendarsNotServed = errors.New("the MaintenanceCalendar CRD (maintenancecalendars.nodeexec.io) is not installed: kubectl apply -f deploy/crd/")

// calendarsFor reads the MaintenanceCalendars of ns's spec.windowRefs from
// the informer's cache, in spec order. Errors: the CRD is not served, a
// calendar does not exist or cannot be decoded (all joined; the
// calendars read are returned too).
func (c *controller) calendarsFor(ns *v1alpha1.NodeScript) ([]*v1alpha1.MaintenanceCalendar, error) {
	if len(ns.Spec.WindowRefs) == 0 {
		return nil, nil
	}
	if c.calendars == nil {
		return nil, errCalendarsNotServed
	}
	var (
		out  []*v1alpha1.MaintenanceCalendar
		errs []error
	)
	for _, name := range ns.Spec.WindowRefs {
		obj, exists, err := c.calendars.GetByKey(name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("maintenancecalendar %s: %w", name, err))
			continue
		case !exists:
			errs = append(errs, fmt.Errorf("maintenancecalendar %s does not exist", name))
			continue
		}
		cal, err := nodescript.ToCalendar(obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, cal)
	}
	return out, errors.Join(errs...)
}

// calendarWindow is the step after Decide for spec.windowRefs: it sets
// d.Calendars (what each named calendar says now), and, unless the rollout
// is over (then d.Calendars is all, without Events) or paused, holds d (HoldOutsideWindow, d.NextWindow the next
// opening, d.WindowReason why) when no opening (openings: calendars and
// spec.window combined) holds now, or sets d.WindowCloses when one does.
// A calendar missing, unreadable or invalid is closed: nothing starts
// while it is so, with the error in d.WindowReason. The run-now override
// (AnnotationRunNow) still lets runs start (d.RunNow). Events
// CalendarOpened/CalendarClosed when a calendar's state changes (against
// status.calendars); metric nodeexec_watcher_calendar_open.
func (c *controller) calendarWindow(ctx context.Context, ns *v1alpha1.NodeScript, d decision, now time.Time) decision {
	if len(ns.Spec.WindowRefs) == 0 {
		c.w.metrics.calendarOpen.DeletePartialMatch(prometheus.Labels{"nodescript": ns.Name})
		return d
	}
	over := d.Stage == v1alpha1.StageComplete || d.Stage == v1alpha1.StageHalted
	cals, readErr := c.calendarsFor(ns)
	byName := map[string]*v1alpha1.MaintenanceCalendar{}
	for _, cal := range cals {
		byName[cal.Name] = cal
	}
	var problems []string
	if readErr != nil {
		problems = append(problems, strings.ReplaceAll(readErr.Error(), "\n", "; "))
	}
	d.Calendars = make([]v1alpha1.CalendarStatus, 0, len(ns.Spec.WindowRefs))
	for _, name := range ns.Spec.WindowRefs {
		st := v1alpha1.CalendarStatus{Name: name}
		if cal, ok := byName[name]; !ok {
			st.Message = "missing or unreadable: closed"
			if errors.Is(readErr, errCalendarsNotServed) {
				st.Message = errCalendarsNotServed.Error()
			}
		} else if errs := v1alpha1.ValidateCalendar(cal); len(errs) > 0 {
			st.Message = "invalid, closed: " + errs.ToAggregate().Error()
			problems = append(problems, "maintenancecalendar "+name+" is invalid: "+errs.ToAggregate().Error())
		} else if open, msg, err := nodescript.CalendarNow(cal, now); err != nil {
			st.Message = "closed: " + err.Error()
			problems = append(problems, "maintenancecalendar "+name+": "+err.Error())
		} else {
			st.Open, st.Message = open, msg
		}
		if !over {
			c.calendarEvent(ns, st)
		}
		v := 0.0
		if st.Open {
			v = 1
		}
		c.w.metrics.calendarOpen.WithLabelValues(ns.Name, name).Set(v)
		d.Calendars = append(d.Calendars, st)
	}
	if over || d.Hold == v1alpha1.HoldPaused {
		return d
	}
	var next []opening
	if len(problems) == 0 {
		var err error
		if next, err = nodescript.Openings(ns, cals, now, 1); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 && len(next) > 0 && !next[0].Start.After(now) {
		d.WindowCloses = next[0].End
		return d
	}
	// Closed.
	d.WindowCloses = time.Time{}
	reason := strings.Join(problems, "; ")
	if reason == "" {
		var why []string
		for _, st := range d.Calendars {
			why = append(why, st.Name+": "+st.Message)
		}
		if ns.Spec.Window != nil {
			if open, _, err := inWindow(ns.Spec.Window, now); err == nil && !open {
				why = append(why, "spec.window closed")
			}
		}
		reason = strings.Join(why, "; ")
	}
	if until, set, err := nodescript.RunNowUntil(ns); err == nil && set && now.Before(until) {
		d.RunNow = until
		return d
	}
	d.Hold, d.WindowReason, d.NextWindow = v1alpha1.HoldOutsideWindow, reason, time.Time{}
	if len(problems) == 0 && len(next) > 0 {
		d.NextWindow = next[0].Start
	}
	d.Start, d.Verify = nil, nil
	logr.FromContextOrDiscard(ctx).V(1).Info("outside the calendars' windows", "reason", reason, "next", d.NextWindow)
	return d
}

// calendarEvent records CalendarOpened or CalendarClosed on ns when st's
// open state differs from status.calendars' (a calendar not listed there
// yet counts as closed before).
func (c *controller) calendarEvent(ns *v1alpha1.NodeScript, st v1alpha1.CalendarStatus) {
	was := false
	for _, p := range ns.Status.Calendars {
		if p.Name == st.Name {
			was = p.Open
			if p.Open == st.Open {
				return
			}
		}
	}
	switch {
	case st.Open:
		c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonCalendarOpened, "maintenancecalendar %s is open: %s", st.Name, st.Message)
	case was:
		c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonCalendarClosed, "maintenancecalendar %s is closed: %s", st.Name, st.Message)
	}
}

// windowHoldMessage is the Progressing condition's message for
// HoldOutsideWindow.
func windowHoldMessage(d decision) string {
	msg := fmt.Sprintf("outside the maintenance window: nothing new starts (%d running)", d.Counts.Running)
	if d.WindowReason != "" {
		msg += " (" + d.WindowReason + ")"
	}
	if !d.NextWindow.IsZero() {
		msg += " until it opens at " + d.NextWindow.UTC().Format(time.RFC3339)
	}
	return msg
}
