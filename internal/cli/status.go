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
			nsName, output, err := statusOptions(c)
			if err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			rep, err := nodescripts.Status(c.Context, cs, dyn, nsName)
			if err != nil {
				return printLeftStates(c.Context, streams.Out, cs, nsName, err)
			}
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printReport(streams.Out, rep, time.Now())
			return nil
		},
	}
}

// statusOptions maps status's NAME and --output onto the NodeScript and the
// output format (text or json), checked.
func statusOptions(c *ucli.Context) (string, string, error) {
	nsName, err := nodeScriptArg(c, "status")
	if err != nil {
		return "", "", err
	}
	if o := c.String("output"); o != "text" && o != "json" {
		return "", "", fmt.Errorf("--output %q: want text or json", o)
	}
	return nsName, c.String("output"), nil
}

// printReport prints nodeexec status's text: the NodeScript's rollout, the
// lines of each feature in use, then a table of the nodes and what awaits them.
func printReport(w io.Writer, rep *nodescripts.Report, now time.Time) {
	ns, st := rep.NodeScript, rep.NodeScript.Status
	printRollout(w, ns)
	printSpecState(w, ns)
	printCheck(w, ns)
	printBudget(w, rep)
	printGates(w, st.Gates, now)
	printCalendars(w, ns)
	printHooks(w, rep, now)
	printNotifications(w, st.Notifications, now)
	printAnalysis(w, ns, now)
	printForecast(w, ns)
	printUninstall(w, ns)
	printReapply(w, ns, now)
	if st.NextWindow != nil {
		fmt.Fprintf(w, "maintenance window closed: opens at %s (in %s)\n", st.NextWindow.UTC().Format(time.RFC3339), st.NextWindow.Sub(now).Round(time.Second))
	}
	printPostComplete(w, ns, now)
	printRunNow(w, ns)
	printReportErrors(w, rep)
	fmt.Fprintln(w)
	printNodes(w, rep, now)
	printSilences(w, rep, now)
	printAwaiting(w, rep, now)
}

// printRollout prints the NodeScript's name, spec and stage, its node
// counts and its conditions that hold (and Progressing).
func printRollout(w io.Writer, ns *v1alpha1.NodeScript) {
	st := ns.Status
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
}

// printSpecState prints spec.paused, spec.reboot, and the nodes blocked by
// spec.blockingPodSelector or by a drain.
func printSpecState(w io.Writer, ns *v1alpha1.NodeScript) {
	if ns.Spec.Paused {
		fmt.Fprintf(w, "paused: nothing new starts (nodeexec resume %s)\n", ns.Name)
	}
	switch ns.Spec.Reboot {
	case v1alpha1.RebootAlways:
		fmt.Fprintln(w, "reboot: after each successful run")
	case v1alpha1.RebootIfRequired:
		fmt.Fprintf(w, "reboot: when a run leaves %s or exits %d\n", nodescripts.RebootSentinel(&ns.Spec), v1alpha1.ExitRebootRequired)
	}
	for _, b := range ns.Status.Blocked {
		fmt.Fprintf(w, "blocked: %s (spec.blockingPodSelector)\n", b)
	}
	for _, b := range ns.Status.DrainBlocked {
		fmt.Fprintf(w, "drain blocked: %s (not cordoned; checked again every %s)\n", b, watcher.DrainRecheck)
	}
}

// printReapply prints when spec.reapply runs the NodeScript again.
func printReapply(w io.Writer, ns *v1alpha1.NodeScript, now time.Time) {
	r := ns.Spec.Reapply
	if r == nil {
		return
	}
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

// printRunNow prints the run-now override, if set.
func printRunNow(w io.Writer, ns *v1alpha1.NodeScript) {
	until, set, err := nodescripts.RunNowUntil(ns)
	switch {
	case !set:
	case err != nil:
		fmt.Fprintf(w, "run-now: %v\n", err)
	default:
		fmt.Fprintf(w, "run-now: runs may start outside the maintenance window until %s (asked by %s; nodeexec run-now %s --cancel)\n",
			until.UTC().Format(time.RFC3339), orDash(ns.Annotations[v1alpha1.AnnotationRunNowBy]), ns.Name)
	}
}

// printReportErrors prints what the report could not show.
func printReportErrors(w io.Writer, rep *nodescripts.Report) {
	if rep.RunsError != "" {
		fmt.Fprintf(w, "runs going not shown (a node running shows its state before the run): %s\n", rep.RunsError)
	}
	if rep.OutputError != "" {
		fmt.Fprintf(w, "output not shown: %s\n", rep.OutputError)
	}
}

// printNodes prints the table of nodes, one line each.
func printNodes(w io.Writer, rep *nodescripts.Report, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPHASE\tEXIT\tATTEMPTS\tAGE\tREASON\tCORDONED\tOUTPUT")
	drainBlocked := map[string]string{} // node: why (status.drainBlocked)
	for _, b := range rep.NodeScript.Status.DrainBlocked {
		node, why, _ := strings.Cut(b, ": ")
		drainBlocked[node] = why
	}
	for _, n := range rep.Nodes {
		s := n.State
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
		reason, out := nodeReason(s), nodeOutput(n)
		if why, ok := drainBlocked[n.Node]; ok && s.Phase != v1alpha1.PhaseRunning {
			reason, out = v1alpha1.ReasonDrainBlocked, why
		}
		if out == "" {
			out = s.Message // an infrastructure failure's detail and fix
		}
		if len(out) > 60 {
			out = "…" + out[len(out)-59:]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.Node, nodePhase(n), exit, s.Attempts, age, orDash(reason), cordoned, orDash(out))
	}
	tw.Flush()
}

// nodePhase is a node's PHASE column: its phase, what it ran if not the
// current spec, whether it is ignored or not selected, and a rerun asked.
func nodePhase(n nodescripts.NodeReport) string {
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
	return phase
}

// nodeReason is a node's REASON column before a drain block: its reason or
// maintenance step, its rollback, hook and uninstall.
func nodeReason(s nodescripts.NodeState) string {
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
	return strings.TrimSpace(reason + " " + uninstallReason(s))
}

// nodeOutput is a node's OUTPUT column before a drain block: the output of
// the action its state is about, on one line.
func nodeOutput(n nodescripts.NodeReport) string {
	s := n.State
	out := n.Output[v1alpha1.ActionRun]
	switch {
	case s.Reason == "VerifyFailed":
		out = n.Output[v1alpha1.ActionVerify]
	case s.Phase == v1alpha1.PhaseNotNeeded || s.Reason == v1alpha1.ReasonCheckFailed || s.Reason == v1alpha1.ReasonCheckNeeded:
		out = n.Output[v1alpha1.ActionCheck]
	}
	return strings.ReplaceAll(strings.TrimSpace(out), "\n", " | ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
