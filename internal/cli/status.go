package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// statusCommand prints a NodeScript's rollout and each node's state.
func statusCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "status",
		Usage:     "show a NodeScript's rollout and each node's state",
		ArgsUsage: "NAME",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
		},
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, "status")
			if err != nil {
				return err
			}
			if o := c.String("output"); o != "text" && o != "json" {
				return fmt.Errorf("--output %q: want text or json", o)
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			rep, err := nodescripts.Status(c.Context, cs, dyn, nsName)
			if err != nil {
				return printLeftStates(c.Context, streams.Out, cs, nsName, err)
			}
			if c.String("output") == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printReport(streams.Out, rep, time.Now())
			return nil
		},
	}
}

func printReport(w io.Writer, rep *nodescripts.Report, now time.Time) {
	ns, st := rep.NodeScript, rep.NodeScript.Status
	fmt.Fprintf(w, "NodeScript %s  spec %s  stage %s\n", ns.Name, st.SpecHash, st.Stage)
	fmt.Fprintf(w, "nodes %d: succeeded %d, failed %d, rolled back %d, running %d, pending %d",
		st.Nodes, st.Succeeded, st.Failed, st.RolledBack, st.Running, st.Pending)
	if st.NotNeeded > 0 || ns.Spec.CheckScript != "" {
		fmt.Fprintf(w, ", not needed %d", st.NotNeeded)
	}
	fmt.Fprintln(w)
	for _, c := range st.Conditions {
		if c.Status == "True" || c.Type == "Progressing" {
			fmt.Fprintf(w, "%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if ns.Spec.Paused {
		fmt.Fprintf(w, "paused: nothing new starts (nodeexec resume %s)\n", ns.Name)
	}
	switch ns.Spec.Reboot {
	case v1alpha1.RebootAlways:
		fmt.Fprintln(w, "reboot: after each successful run")
	case v1alpha1.RebootIfRequired:
		fmt.Fprintf(w, "reboot: when a run leaves %s or exits %d\n", nodescripts.RebootSentinel(&ns.Spec), v1alpha1.ExitRebootRequired)
	}
	for _, b := range st.Blocked {
		fmt.Fprintf(w, "blocked: %s (spec.blockingPodSelector)\n", b)
	}
	for _, b := range st.DrainBlocked {
		fmt.Fprintf(w, "drain blocked: %s (not cordoned; checked again every %s)\n", b, watcher.DrainRecheck)
	}
	printCheck(w, ns)
	printBudget(w, rep)
	printGates(w, st.Gates, now)
	printCalendars(w, ns)
	printHooks(w, rep, now)
	printNotifications(w, st.Notifications, now)
	printAnalysis(w, ns, now)
	printForecast(w, ns)
	printUninstall(w, ns)
	if r := ns.Spec.Reapply; r != nil {
		var when []string
		if r.OnReboot {
			when = append(when, "after a node reboots")
		}
		if r.Interval != nil {
			when = append(when, "every "+r.Interval.Duration.String()+" after a success")
		}
		if s := reapplySchedule(r, now); s != "" {
			when = append(when, s)
		}
		fmt.Fprintf(w, "reapply: runs again %s\n", strings.Join(when, ", and "))
	}
	if st.NextWindow != nil {
		fmt.Fprintf(w, "maintenance window closed: opens at %s (in %s)\n", st.NextWindow.UTC().Format(time.RFC3339), st.NextWindow.Sub(now).Round(time.Second))
	}
	printPostComplete(w, ns, now)
	if until, set, err := nodescripts.RunNowUntil(ns); set {
		if err != nil {
			fmt.Fprintf(w, "run-now: %v\n", err)
		} else {
			fmt.Fprintf(w, "run-now: runs may start outside the maintenance window until %s (asked by %s; nodeexec run-now %s --cancel)\n",
				until.UTC().Format(time.RFC3339), orDash(ns.Annotations[v1alpha1.AnnotationRunNowBy]), ns.Name)
		}
	}
	if rep.RunsError != "" {
		fmt.Fprintf(w, "runs going not shown (a node running shows its state before the run): %s\n", rep.RunsError)
	}
	if rep.OutputError != "" {
		fmt.Fprintf(w, "output not shown: %s\n", rep.OutputError)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPHASE\tEXIT\tATTEMPTS\tAGE\tREASON\tCORDONED\tOUTPUT")
	drainBlocked := map[string]string{} // node: why (status.drainBlocked)
	for _, b := range st.DrainBlocked {
		node, why, _ := strings.Cut(b, ": ")
		drainBlocked[node] = why
	}
	for _, n := range rep.Nodes {
		s := n.State
		phase := s.Phase
		if !n.Current && s.Hash != "" {
			phase = "Pending (ran " + s.Hash + ": " + s.Phase + ")"
		}
		switch {
		case n.Ignored:
			phase = "Ignored (by " + orDash(n.IgnoredBy) + "; was " + phase + ")"
		case !n.Selected:
			phase += " (not selected)"
		}
		if n.Rerun != "" {
			phase += " (rerun requested)"
		}
		exit, age, cordoned := "-", "-", "-"
		if s.ExitCode != nil {
			exit = fmt.Sprint(*s.ExitCode)
		}
		if !s.Since.IsZero() {
			age = now.Sub(s.Since).Round(time.Second).String()
		}
		if s.Cordoned {
			cordoned = map[bool]string{true: "by nodeexec", false: "already"}[s.CordonedByUs]
		}
		reason := s.Reason
		if s.Maintenance != "" {
			reason = s.Maintenance // cordoned for the run, draining or drained
		}
		if s.Rollback != "" {
			reason = strings.TrimSpace(reason + " rollback:" + s.Rollback)
		}
		if s.Hook != "" {
			reason = strings.TrimSpace(reason + " hook:" + s.Hook)
		}
		reason = strings.TrimSpace(reason + " " + uninstallReason(s))
		out := n.Output[v1alpha1.ActionRun]
		switch {
		case s.Reason == "VerifyFailed":
			out = n.Output[v1alpha1.ActionVerify]
		case s.Phase == v1alpha1.PhaseNotNeeded || s.Reason == v1alpha1.ReasonCheckFailed || s.Reason == v1alpha1.ReasonCheckNeeded:
			out = n.Output[v1alpha1.ActionCheck]
		}
		out = strings.ReplaceAll(strings.TrimSpace(out), "\n", " | ")
		if why, ok := drainBlocked[n.Node]; ok && s.Phase != v1alpha1.PhaseRunning {
			reason, out = v1alpha1.ReasonDrainBlocked, why
		}
		if out == "" {
			out = s.Message // an infrastructure failure's detail and fix
		}
		if len(out) > 60 {
			out = "…" + out[len(out)-59:]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.Node, phase, exit, s.Attempts, age, orDash(reason), cordoned, orDash(out))
	}
	tw.Flush()
	printSilences(w, rep, now)
	printAwaiting(w, rep, now)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
