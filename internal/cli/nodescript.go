package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// watcherClients builds the typed and dynamic clients from the global flags.
func watcherClients(c *ucli.Context) (kubernetes.Interface, dynamic.Interface, error) {
	cs, cfg, _, err := client(c)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cs, dyn, nil
}

// applyCommand creates or updates NodeScripts from a file.
func applyCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "apply",
		Usage:     "create or update NodeScripts (and MaintenanceBudgets, MaintenanceCalendars) from a YAML file (the watcher applies them to nodes)",
		ArgsUsage: " ",
		Description: "Every document is validated first (fields named in each error), then accepted by the API\n" +
			"server in a dry-run; only then is any applied (server-side apply), so nothing is half-applied.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "filename", Aliases: []string{"f"}, Required: true, Usage: "the NodeScript YAML `FILE` (- for standard input)"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("apply takes no arguments (got %q): give the file with -f", c.Args().Slice())
			}
			var in io.Reader = streams.In
			if f := c.String("filename"); f != "-" {
				file, err := os.Open(f)
				if err != nil {
					return fmt.Errorf("--filename: %w", err)
				}
				defer file.Close()
				in = file
			}
			m, err := nodescripts.ParseAllManifests(in)
			if err != nil {
				return err
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			return applyAll(c.Context, streams.Out, dyn, m)
		},
	}
}

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

// promoteCommand promotes a manual rollout beyond its canaries.
func promoteCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "promote",
		Usage:     "let a NodeScript with manual promotion run beyond its canaries",
		ArgsUsage: "NAME",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "to", Required: true, Usage: "\"all\", or a label `SELECTOR` of the nodes to promote to"},
		},
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, "promote")
			if err != nil {
				return err
			}
			if to := c.String("to"); to != "all" {
				_, err := labels.Parse(to)
				if err == nil && strings.TrimSpace(to) == "" {
					err = errors.New("empty")
				}
				if err != nil {
					return fmt.Errorf("--to %q: want \"all\" or a label selector such as pool=gpu (%v)", to, err)
				}
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			ns, err := nodescripts.Promote(c.Context, dyn, nsName, c.String("to"))
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s promoted to %s\n", ns.Name, ns.Spec.Rollout.PromoteTo)
			return nil
		},
	}
}

// pauseCommand sets (pause) or clears (resume) a NodeScript's spec.paused.
func pauseCommand(streams Streams, paused bool) *ucli.Command {
	name, usage, done := "resume", "let a paused NodeScript start runs again", "resumed"
	if paused {
		name, usage, done = "pause", "start nothing new for a NodeScript (runs in progress finish)", "paused"
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, name)
			if err != nil {
				return err
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			ns, err := nodescripts.SetPaused(c.Context, dyn, nsName, paused)
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s %s\n", ns.Name, done)
			return nil
		},
	}
}

// rerunCommand asks the watcher to run a NodeScript's current spec again on some nodes.
func rerunCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "rerun",
		Usage:     "run a NodeScript's current spec again on nodes that ran it (the watcher forgets their record)",
		ArgsUsage: "NAME",
		UsageText: "rerun NAME (--node NODE... | --selector SEL | --all)",
		Description: "Every node is checked first: it must exist, be selected by the NodeScript and have run its current\n" +
			"spec; then each gets the annotation NAME.nodescript.nodeexec.io/rerun. The watcher runs it again there under\n" +
			"the rollout's pace, pause and maintenance window (after a run in progress), attempts counting on.",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "node", Usage: "node `NAME` to run again (repeatable, or comma-separated)"},
			&ucli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "the nodes matching this label `SELECTOR` that ran the current spec"},
			&ucli.BoolFlag{Name: "all", Usage: "every node that ran the current spec"},
		},
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, "rerun")
			if err != nil {
				return err
			}
			targets := nodeexec.Targets{Nodes: splitCSV(c.StringSlice("node")), Selector: c.String("selector"), All: c.Bool("all")}
			if err := checkNodeNames(c, targets.Nodes); err != nil {
				return err
			}
			if err := checkSelectorFlag(c); err != nil {
				return err
			}
			if err := targets.Validate(); err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			res, err := nodescripts.Rerun(c.Context, cs, dyn, nsName, targets)
			if err != nil {
				return err
			}
			for _, n := range res.Nodes {
				fmt.Fprintf(streams.Out, "node/%s: nodescript %s spec %s runs again\n", n, nsName, res.Hash)
			}
			return nil
		},
	}
}

// ignoreCommand makes a NodeScript ignore (or no longer ignore) nodes.
func ignoreCommand(streams Streams, ignore bool) *ucli.Command {
	name, usage, done := "unignore", "let a NodeScript select nodes it was told to ignore again", "no longer ignored"
	if ignore {
		name, usage, done = "ignore", "leave nodes out of a NodeScript's rollout without editing its spec", "ignored"
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		UsageText: name + " NAME --node NODE...",
		Description: "Sets (ignore) or removes (unignore) the annotation NAME.nodescript.nodeexec.io/ignore on each node,\n" +
			"with who asked as its value. An ignored node is treated as in spec.excludeNodes; its record is kept.",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "node", Usage: "node `NAME` (repeatable, or comma-separated)"},
		},
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, name)
			if err != nil {
				return err
			}
			nodes := splitCSV(c.StringSlice("node"))
			if !c.IsSet("node") {
				return fmt.Errorf("%s needs --node NODE: name the nodes (repeat --node, or separate them with commas)", name)
			}
			if err := checkNodeNames(c, nodes); err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			who, err := nodescripts.SetIgnored(c.Context, cs, dyn, nsName, nodes, ignore)
			if err != nil {
				return err
			}
			if who.Unknown != "" {
				fmt.Fprintf(streams.ErrOut, "note: recorded as asked by %q: %s\n", who.User, who.Unknown)
			}
			for _, n := range nodes {
				fmt.Fprintf(streams.Out, "node/%s %s by nodescript %s\n", n, done, nsName)
			}
			return nil
		},
	}
}

// runNowCommand lets a NodeScript start runs outside its maintenance window for a while.
func runNowCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "run-now",
		Usage:     "let a NodeScript start runs outside its maintenance window for a while (or --cancel)",
		ArgsUsage: "NAME",
		Description: "Sets the annotations " + v1alpha1.AnnotationRunNow + " (until when, RFC 3339) and " + v1alpha1.AnnotationRunNowBy + " (who asked,\n" +
			"from a SelfSubjectReview) on the NodeScript; the watcher records them in an Event and removes them once expired.",
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "for", Value: nodescripts.DefaultRunNowFor, Usage: "how long runs may start outside the window (at most " + nodescripts.MaxRunNowFor.String() + ", a week)"},
			&ucli.BoolFlag{Name: "cancel", Usage: "remove the override: runs start only inside the window again"},
		},
		OnUsageError: durationLimits(map[string]time.Duration{"for": nodescripts.MaxRunNowFor}),
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, "run-now")
			if err != nil {
				return err
			}
			o := nodescripts.RunNowOptions{For: c.Duration("for"), Cancel: c.Bool("cancel")}
			switch {
			case o.Cancel && c.IsSet("for"):
				return errors.New("--cancel removes the override: give --for only to set one")
			case o.Cancel:
				o.For = 0
			case o.For <= 0:
				return fmt.Errorf("--for %s: give a positive duration such as 1h", o.For)
			case o.For > nodescripts.MaxRunNowFor:
				return fmt.Errorf("--for %s: too long: at most %s (a week); to run outside the window for longer, change the NodeScript's spec.window", o.For, nodescripts.MaxRunNowFor)
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			res, err := nodescripts.RunNow(c.Context, cs, dyn, nsName, o)
			if err != nil {
				return err
			}
			if o.Cancel {
				fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s: run-now override removed\n", nsName)
				return nil
			}
			if res.By.Unknown != "" {
				fmt.Fprintf(streams.ErrOut, "note: recorded as asked by %q: %s\n", res.By.User, res.By.Unknown)
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s: runs may start outside the maintenance window until %s (asked by %s)\n",
				nsName, res.Until.Format(time.RFC3339), res.By.User)
			return nil
		},
	}
}

// watchCommand runs the watcher in the foreground.
func watchCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "watch",
		Usage: "run the NodeScript watcher (controller) in the foreground against the current kubeconfig",
		Description: "Applies every NodeScript to its nodes, now and as nodes join, until interrupted. Logs are\n" +
			"JSON lines on stderr. Stopping it at any moment is safe: the next start continues the rollouts.",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "leader-elect", Usage: "hold a Lease so that only one of several replicas runs rollouts"},
			&ucli.StringFlag{Name: "leader-election-namespace", Value: v1alpha1.DefaultNamespace, Usage: "namespace of the Lease"},
			&ucli.StringFlag{Name: "leader-election-id", Value: "nodeexec-watcher", Usage: "name of the Lease"},
			&ucli.StringFlag{Name: "metrics-bind-address", Value: "0", Usage: "`ADDRESS` to serve Prometheus metrics on /metrics, without authentication: " +
				"bind it to localhost (127.0.0.1:8080, as deploy/ does) and expose it through an authenticating proxy such as kube-rbac-proxy (0 disables)"},
			&ucli.StringFlag{Name: "health-probe-bind-address", Value: "0", Usage: "`ADDRESS` to serve the kubelet's probes on, /healthz and /readyz, " +
				"e.g. :8081 as deploy/ and controller-runtime's scaffolds do (0 disables)"},
			&ucli.DurationFlag{Name: "collect-interval", Value: podexec.DefaultCollectInterval, Usage: "how often the leader deletes, in every namespace, " +
				"the pods and run Leases of `nodeexec run` and `shell` clients that died (0 disables; RBAC: deploy/'s ClusterRole nodeexec-run-collector)"},
			&ucli.IntFlag{Name: "workers", Value: 2, Usage: "NodeScripts reconciled at once"},
			&ucli.IntFlag{Name: "create-parallelism", Value: 16, Usage: "pod creates and node patches one reconcile makes at once"},
			&ucli.DurationFlag{Name: "pod-batch-period", Value: watcher.DefaultPodBatchPeriod, Usage: "how long a run pod's event waits before it reconciles its NodeScript, " +
				"so that runs finishing together are recorded in one reconcile (0: at once)"},
			&ucli.IntFlag{Name: "success-log-lines", Value: 20, Usage: "lines of a successful run's log kept in its output record, for NodeScripts with spec.recordOutput (-1: none)"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("watch takes no arguments (got %q)", c.Args().Slice())
			}
			for _, f := range []string{"workers", "create-parallelism"} {
				if c.Int(f) < 1 {
					return fmt.Errorf("--%s %d: give 1 or more", f, c.Int(f))
				}
			}
			if n := c.Int("success-log-lines"); n < -1 {
				return fmt.Errorf("--success-log-lines %d: give -1 (none), 0 or more", n)
			}
			if msgs := validation.IsDNS1123Subdomain(c.String("leader-election-id")); len(msgs) > 0 {
				return fmt.Errorf("--leader-election-id %q: not a Lease name (%s)", c.String("leader-election-id"), strings.Join(msgs, "; "))
			}
			if c.Bool("leader-elect") && c.String("leader-election-namespace") == "" {
				return errors.New("--leader-election-namespace is empty: name the namespace of the Lease (default " + v1alpha1.DefaultNamespace + ")")
			}
			if d := c.Duration("pod-batch-period"); d < 0 {
				return fmt.Errorf("--pod-batch-period %s: give a duration such as 1s, or 0 to reconcile on every pod event at once", d)
			}
			if d := c.Duration("collect-interval"); d < 0 {
				return fmt.Errorf("--collect-interval %s: give a positive duration such as 15s, or 0 to disable the collector", d)
			}
			metricsAddr, probeAddr := c.String("metrics-bind-address"), c.String("health-probe-bind-address")
			for _, f := range []string{"metrics-bind-address", "health-probe-bind-address"} {
				if err := checkBindAddress(f, c.String(f)); err != nil {
					return err
				}
			}
			if bindEnabled(metricsAddr) && metricsAddr == probeAddr {
				return fmt.Errorf("--metrics-bind-address and --health-probe-bind-address are both %q: give each its own port", metricsAddr)
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			o := watcher.Options{
				Client: cs, Dynamic: dyn,
				Workers: c.Int("workers"), CreateParallelism: c.Int("create-parallelism"),
				SuccessLogLines: c.Int("success-log-lines"), CollectInterval: c.Duration("collect-interval"),
			}
			if o.CollectInterval == 0 {
				o.CollectInterval = -1 // Options: negative disables, zero is the default
			}
			if o.PodBatchPeriod = c.Duration("pod-batch-period"); o.PodBatchPeriod == 0 {
				o.PodBatchPeriod = -1 // Options: negative is at once, zero is the default
			}
			if c.Bool("leader-elect") {
				o.LeaderElection = &watcher.LeaderElection{Namespace: c.String("leader-election-namespace"), Name: c.String("leader-election-id")}
			}
			log := funcr.NewJSON(func(obj string) { fmt.Fprintln(streams.ErrOut, obj) }, funcr.Options{Verbosity: c.Int("v"), LogTimestamp: true})
			ctx := logr.NewContext(c.Context, log)
			if bindEnabled(metricsAddr) {
				reg := prometheus.NewRegistry()
				reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
				o.Metrics = reg
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				stop, err := serveHTTP(log, "metrics-bind-address", metricsAddr, mux)
				if err != nil {
					return err
				}
				defer stop()
			}
			if bindEnabled(probeAddr) {
				// Both report the process up and serving: readiness does not
				// wait for leadership, a standby replica is ready to take over.
				ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
				mux := http.NewServeMux()
				mux.HandleFunc("/healthz", ok)
				mux.HandleFunc("/readyz", ok)
				stop, err := serveHTTP(log, "health-probe-bind-address", probeAddr, mux)
				if err != nil {
					return err
				}
				defer stop()
			}
			w, err := watcher.New(o)
			if err != nil {
				return err
			}
			return w.Start(ctx)
		},
	}
}

// bindEnabled reports whether a --*-bind-address value asks for a listener
// ("0" and "" disable it, as in controller-runtime).
func bindEnabled(addr string) bool { return addr != "0" && addr != "" }

// checkBindAddress refuses a --*-bind-address that is neither disabled nor
// HOST:PORT (HOST may be empty: every interface).
func checkBindAddress(flag, addr string) error {
	if !bindEnabled(addr) {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("--%s %q: give HOST:PORT such as 127.0.0.1:8080 or :8081, or 0 to disable (%v)", flag, addr, err)
	}
	return nil
}

// serveHTTP serves mux on addr (flag names it in errors and logs) until the
// returned stop is called.
func serveHTTP(log logr.Logger, flag, addr string, mux *http.ServeMux) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving", "flag", flag, "address", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// nodeScriptArg is the one argument of command cmd, a NodeScript NAME, checked.
func nodeScriptArg(c *ucli.Context, cmd string) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("%s needs one NodeScript NAME", cmd)
	}
	return c.Args().First(), checkNodeScriptName(c.Args().First())
}

// checkNodeScriptName: NodeScript names are DNS labels (they label pods).
func checkNodeScriptName(name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("NodeScript NAME %q: %s (see nodeexec status or kubectl get nodescripts)", name, strings.Join(msgs, "; "))
	}
	return nil
}

// durationLimits is the OnUsageError handler of a command whose duration
// flags (by name) have a maximum: a value too large for a duration at all
// (999999999h), which the flag package calls a parse error, is refused
// naming the maximum; other errors go to onUsageError.
func durationLimits(limits map[string]time.Duration) ucli.OnUsageErrorFunc {
	return func(c *ucli.Context, err error, isSubcommand bool) error {
		// invalid value "999999999h" for flag -for: parse error
		if rest, ok := strings.CutPrefix(err.Error(), "invalid value "); ok {
			if i := strings.LastIndex(rest, " for flag "); i > 0 {
				val, _ := strconv.Unquote(rest[:i])
				name, _, _ := strings.Cut(strings.TrimLeft(rest[i+len(" for flag "):], "-"), ":")
				if limit, ok := limits[name]; ok && durationcheck.Overflows(val) {
					return fmt.Errorf("--%s %s: too large: at most %s", name, val, limit)
				}
			}
		}
		return onUsageError(c, err, isSubcommand)
	}
}
