package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// DefaultWindowsCount is how many openings nodeexec windows lists by default.
const DefaultWindowsCount = 5

// windowsCommand lists the next openings of a NodeScript's windows (its
// spec.window and spec.windowRefs combined) or of one MaintenanceCalendar.
func windowsCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "windows",
		Usage:     "list the next openings of a NodeScript's maintenance windows (spec.window and spec.windowRefs), or of a MaintenanceCalendar",
		ArgsUsage: "[NODESCRIPT]",
		Description: "With NODESCRIPT: when it may start runs (its inline window and the MaintenanceCalendars it names,\n" +
			"blackouts taken out). With --calendar NAME: when that calendar is open. An opening under way comes\n" +
			"first, from now. Times in UTC and in the calendar's (or window's) time zone.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "calendar", Usage: "list the openings of MaintenanceCalendar `NAME` instead"},
			&ucli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: DefaultWindowsCount, Usage: "how many openings to list (1 to 100)"},
		},
		Action: func(c *ucli.Context) error {
			cal := c.String("calendar")
			switch {
			case c.NArg() > 1:
				return fmt.Errorf("windows takes one NODESCRIPT at most (got %q)", c.Args().Slice())
			case c.NArg() == 1 && cal != "":
				return fmt.Errorf("give a NODESCRIPT or --calendar NAME, not both")
			case c.NArg() == 0 && cal == "":
				return fmt.Errorf("give a NODESCRIPT, or --calendar NAME")
			}
			n := c.Int("count")
			if n < 1 || n > 100 {
				return fmt.Errorf("--count %d: want 1 to 100", n)
			}
			name := c.Args().First()
			if cal != "" {
				name = cal
			}
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				return fmt.Errorf("%q: not a valid name: %s", name, strings.Join(msgs, "; "))
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			return printWindows(c.Context, streams.Out, dyn, c.Args().First(), cal, n, time.Now())
		},
	}
}

// printWindows prints the next n openings of NodeScript nsName, or of
// calendar cal when set, as of now. RBAC: get on nodescripts and
// maintenancecalendars.
func printWindows(ctx context.Context, w io.Writer, dyn dynamic.Interface, nsName, cal string, n int, now time.Time) error {
	var (
		ops  []nodescripts.Opening
		loc  = time.UTC
		head string
	)
	if cal != "" {
		c, err := nodescripts.GetCalendar(ctx, dyn, cal)
		if err != nil {
			return err
		}
		if l, err := time.LoadLocation(c.Spec.TimeZone); err == nil {
			loc = l
		}
		open, why, err := nodescripts.CalendarNow(c, now)
		if err != nil {
			return fmt.Errorf("maintenancecalendar %s: %w", cal, err)
		}
		head = fmt.Sprintf("MaintenanceCalendar %s (%s): %s: %s", cal, loc, openWord(open), why)
		if ops, err = nodescripts.CalendarOpenings(c, now, n); err != nil {
			return fmt.Errorf("maintenancecalendar %s: %w", cal, err)
		}
	} else {
		ns, err := nodescripts.Get(ctx, dyn, nsName)
		if err != nil {
			return err
		}
		head = "NodeScript " + nsName
		switch {
		case len(ns.Spec.WindowRefs) > 0:
			head += ": calendars " + strings.Join(ns.Spec.WindowRefs, ", ")
			if ns.Spec.Window != nil {
				head += " and spec.window"
			}
		case ns.Spec.Window != nil:
			head += ": spec.window"
		default:
			head += ": no window: runs may start at any time"
		}
		if w := ns.Spec.Window; w != nil {
			if l, err := time.LoadLocation(w.TimeZone); err == nil {
				loc = l
			}
		}
		for _, r := range ns.Spec.WindowRefs {
			if c, err := nodescripts.GetCalendar(ctx, dyn, r); err == nil && c.Spec.TimeZone != "" {
				if l, err := time.LoadLocation(c.Spec.TimeZone); err == nil {
					loc = l
				}
				break
			}
		}
		if ops, err = nodescripts.Openings(ctx, dyn, ns, now, n); err != nil {
			return fmt.Errorf("%w (the watcher starts nothing while so)", err)
		}
	}
	fmt.Fprintln(w, head)
	if len(ops) == 0 {
		fmt.Fprintf(w, "no opening within %s\n", nodescripts.OpeningsHorizon)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "OPENS (UTC)\tCLOSES (UTC)\tLOCAL (%s)\tLASTS\n", loc)
	for _, o := range ops {
		closes, local, lasts := "(not within the horizon)", o.Start.In(loc).Format("Mon 2006-01-02 15:04 MST"), "-"
		if !o.End.IsZero() {
			closes = o.End.UTC().Format(time.RFC3339)
			local += " - " + o.End.In(loc).Format("Mon 2006-01-02 15:04 MST")
			lasts = o.End.Sub(o.Start).Round(time.Second).String()
		}
		opens := o.Start.UTC().Format(time.RFC3339)
		if !o.Start.After(now) {
			opens = "now"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", opens, closes, local, lasts)
	}
	return tw.Flush()
}

func openWord(open bool) string {
	if open {
		return "open"
	}
	return "closed"
}

// printCalendars prints nodeexec status's lines for spec.windowRefs: each
// calendar's state as the watcher last saw it (status.calendars).
func printCalendars(w io.Writer, ns *v1alpha1.NodeScript) {
	if len(ns.Spec.WindowRefs) == 0 {
		return
	}
	fmt.Fprintf(w, "windowRefs: %s (nodeexec windows %s lists the next openings)\n", strings.Join(ns.Spec.WindowRefs, ", "), ns.Name)
	for _, c := range ns.Status.Calendars {
		fmt.Fprintf(w, "  calendar %s: %s: %s\n", c.Name, openWord(c.Open), c.Message)
	}
}

// applyAll applies what nodeexec apply read: the MaintenanceCalendars are
// checked by the API server (dry-run) first, then the NodeScripts and
// MaintenanceBudgets (applyManifests), then the calendars, so that a
// refused object applies nothing.
func applyAll(ctx context.Context, out io.Writer, dyn dynamic.Interface, m nodescripts.Manifests) error {
	if len(m.Calendars) > 0 {
		if _, err := nodescripts.ApplyCalendars(ctx, dyn, m.Calendars, true); err != nil {
			return err
		}
	}
	if err := applyManifests(ctx, out, dyn, m.Scripts, m.Budgets); err != nil {
		return err
	}
	if len(m.Calendars) == 0 {
		return nil
	}
	results, err := nodescripts.ApplyCalendars(ctx, dyn, m.Calendars, false)
	for i, r := range results {
		fmt.Fprintf(out, "maintenancecalendar.nodeexec.io/%s %s\n", m.Calendars[i].Name, r)
	}
	return err
}
