package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/internal/envflag"
	"github.com/nodeexec/nodeexec/internal/term"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// Largest values of run's --retries and --tail-bytes.
const (
	// maxRetries bounds --retries: each retry creates another pod after a
	// doubling backoff; a node that failed ten times in a row needs a
	// person, not an eleventh pod.
	maxRetries = 10
	// maxTailBytes bounds --tail-bytes (1 MiB): twice this per node is kept
	// in memory until the run ends.
	maxTailBytes = 1 << 20
)

func runCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "run",
		Usage:     "run a command or script on nodes",
		UsageText: "run (--node NAME... | --selector SEL | --all) [options] -- COMMAND [ARGS...]\n   run (--node NAME... | --selector SEL | --all) [options] --script FILE",
		Description: "Runs the command on every target node, at most --max-concurrency at a time, streaming each node's\n" +
			"output with a [node] prefix, then prints a summary on stderr: up to 20 nodes, a line per node (exit code, duration);\n" +
			"more, the failed nodes first, the nodes per exit code and identical outputs grouped (kwok-node-[1-4998]).\n" +
			"--summary-only prints only the summary; --max-per-zone limits the nodes of one zone (" + nodeexec.ZoneLabel + ") at once.\n" +
			"Exit status: one node: its exit code (124 on timeout; 125 when the outcome was lost: the connection broke\n" +
			"after the command started); several nodes: 1 if any failed.",
		Flags: append(append([]ucli.Flag{
			&ucli.StringSliceFlag{Name: "node", Usage: "target node `NAME` (repeatable, or comma-separated)"},
			&ucli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "target nodes matching this label `SELECTOR` (kubectl syntax)"},
			&ucli.BoolFlag{Name: "all", Usage: "target every node"},
			&ucli.DurationFlag{Name: "timeout", Value: nodeexec.DefaultTimeout, Usage: "time limit per node, pod start included"},
			&ucli.IntFlag{Name: "max-concurrency", Value: nodeexec.DefaultMaxConcurrency, Usage: "nodes worked on at once"},
			&ucli.IntFlag{Name: "max-per-zone", Usage: "at most `N` nodes of one zone (label " + nodeexec.ZoneLabel + ") at once, within --max-concurrency; nodes without the label count as one zone (default: no zone limit)"},
			&ucli.StringFlag{Name: "script", Usage: "run this script `FILE` with sh on the node (in chroot /host when the profile mounts it)"},
			&ucli.BoolFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "pass standard input to the command (to every node)"},
			envflag.Flag("environment variable `KEY=VALUE` for the command; repeat -e for several (the value is kept whole: commas, '=' and spaces included)"),
			&ucli.StringSliceFlag{Name: "env-from-secret", Usage: "environment variables from a Secret in the pod's namespace, read by the kubelet (the value is never in the pod spec): `NAME:KEY` for the variable KEY, NAME for every key; repeatable. debugpod, nsenter and ephemeral"},
			&ucli.BoolFlag{Name: "no-prefix", Usage: "do not prefix output lines with [node]"},
			&ucli.BoolFlag{Name: "include-not-ready", Usage: "also run on nodes that are not Ready"},
			&ucli.BoolFlag{Name: "no-progress", Usage: "no live progress line on stderr (shown by default for several nodes with -o text when stderr is a terminal)"},
			explainFlag(),
		}, backendFlags("")...),
			// The rollout controls of a one-shot run and its output format.
			&ucli.IntFlag{Name: "canary", Usage: "run on the first `N` target nodes first; the others only if all of them succeed"},
			&ucli.StringSliceFlag{Name: "batch", Usage: "stage sizes after the canary, counts or percentages, e.g. --batch 1,5,20% (the last repeats)"},
			&ucli.StringFlag{Name: "max-errors", Usage: "error budget `N|P%`: once more nodes failed, start no more (default: no limit)"},
			&ucli.IntFlag{Name: "retries", Usage: fmt.Sprintf("retry a node `N` times (at most %d) after an infrastructure failure (image pull, kubelet rejection, eviction), with backoff", maxRetries)},
			&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: formatText, Usage: "text (streamed, prefixed output and a summary), json (one array at the end) or ndjson (one record per node as it finishes)"},
			&ucli.BoolFlag{Name: "summary-only", Usage: "with -o text: no streamed output, only the summary (failures first, identical outputs grouped) at the end"},
			&ucli.IntFlag{Name: "tail-bytes", Value: nodeexec.DefaultTailBytes, Usage: fmt.Sprintf("bytes of each node's stdout and stderr kept for json/ndjson and the summary (at most %d, 1 MiB)", maxTailBytes)},
		),
		Action: func(c *ucli.Context) error {
			return runAction(c, streams)
		},
	}
}

func runAction(c *ucli.Context, streams Streams) error {
	// The progress line (several nodes, -o text, stderr a terminal) is
	// erased before each line of output or log reaches the terminal: stderr,
	// and stdout when it is a terminal too (the same screen, presumably).
	prog := runProgress(c, streams)
	errOut := prog.writer(streams.ErrOut, true)
	req, targets, opts, err := runOptions(c, streams, prog, errOut)
	if err != nil {
		return err
	}
	client, cfg, ns, err := client(c)
	if err != nil {
		return err
	}
	backend, targets, err := runBackend(c, client, cfg, ns, targets)
	if err != nil {
		return err
	}
	plat := startPlatformCheck(c)
	opts.Client, opts.Backend = client, backend
	// The text summary compares outputs (by digest) only of several
	// nodes; one named node's output is passed on without hashing.
	opts.SkipDigest = c.String("output") == formatText && len(targets.Nodes) == 1
	ctx := withLogger(c.Context, errOut, c.Int("v"))
	// Refusals (Pod Security, RBAC, admission) are reported before anything
	// is created: the full preflight report, which includes the backend's
	// dry-run, once, on the first node. Once it passes, the pods of dead
	// clients in the namespace are collected.
	opts.Preflight = func(ctx context.Context, node string) error {
		first := req
		first.Node = node
		if skipPreflight(ctx, backend, node) {
			return nil // a resident agent: nothing is created, nothing to collect
		}
		if err := runPreflight(ctx, streams.Out, backend, client, ns, first, false); err != nil {
			return defaultBackendHint(c, err)
		}
		collectExpired(ctx, client, ns)
		return nil
	}
	prog.hooks(&opts)
	runner, err := nodeexec.NewRunner(opts)
	if err != nil {
		return fmt.Errorf("%w (check --canary, --batch, --max-errors, --retries, --tail-bytes)", err)
	}
	nodes, err := runner.Resolve(ctx, targets)
	if err != nil {
		return err
	}
	if err := checkCluster(c, client, nodes); err != nil {
		return err
	}
	warnNoZone(errOut, opts.MaxPerZone, nodes)
	platforms, err := plat.check(ctx, c, errOut, client, backend, nodes, c.Bool("explain"))
	if err != nil {
		return err
	}
	if c.Bool("explain") {
		first := req
		first.Node = nodes[0].Name
		return runPreflight(ctx, streams.Out, backend, client, ns, first, true, platforms...)
	}
	prog.start(len(nodes))
	results, err := runner.RunNodes(ctx, nodes, outputRequest(c, req))
	prog.stop()
	if err != nil {
		return err
	}
	// Every node refused the image (pull policy Never, image not there):
	// bad input, one error and exit status 2, like the checks above.
	if err := neverPullResults(results, backendName(c)); err != nil {
		return err
	}
	printResults(c, streams, results)
	printPullHint(streams.ErrOut, backendName(c), results)
	return exitStatus(results)
}

// runOptions turns run's flags into the library's options: the Request
// (validated here, once), the Targets, and the RunnerOptions but for what
// needs the cluster (Client, Backend, Preflight: runAction). The backend's
// own flags become its options in newBackend (backends.Entry.Build), after
// checkBackendFlags here. Nothing touches the cluster; errors name the flag
// (exit 2).
func runOptions(c *ucli.Context, streams Streams, prog *progress, errOut io.Writer) (nodeexec.Request, nodeexec.Targets, nodeexec.RunnerOptions, error) {
	req, targets, err := runRequest(c, streams, prog, errOut)
	if err != nil {
		return req, targets, nodeexec.RunnerOptions{}, err
	}
	o, err := runnerOptions(c, streams)
	return req, targets, o, err
}

// runRequest is runOptions' Request and Targets, checked with the backend
// flags.
func runRequest(c *ucli.Context, streams Streams, prog *progress, errOut io.Writer) (nodeexec.Request, nodeexec.Targets, error) {
	targets := nodeexec.Targets{Nodes: splitCSV(c.StringSlice("node")), Selector: c.String("selector"), All: c.Bool("all")}
	_, outOnTerm := term.Fd(streams.Out)
	req := nodeexec.Request{
		Command: c.Args().Slice(),
		Stdout:  prog.writer(streams.Out, outOnTerm),
		Stderr:  errOut,
		Timeout: c.Duration("timeout"),
	}
	if f := c.String("script"); f != "" {
		if len(req.Command) > 0 {
			return req, targets, errors.New("give either --script FILE or a command after --, not both")
		}
		script, err := readScript(f)
		if err != nil {
			return req, targets, err
		}
		req.Script = script
	}
	if c.Bool("stdin") {
		req.Stdin = streams.In
	}
	env, err := parseEnv(envflag.Values(c))
	if err != nil {
		return req, targets, err
	}
	req.Env = env
	if req.SecretEnv, err = parseSecretEnv(c.StringSlice("env-from-secret")); err != nil {
		return req, targets, err
	}
	if e, ok := backends.Lookup(backendName(c)); ok && len(req.SecretEnv) > 0 && e.SecretEnvRefusal != "" {
		return req, targets, errors.New(e.SecretEnvRefusal)
	}
	if err := checkRunTimeout(c, "30s or 5m"); err != nil {
		return req, targets, err
	}
	if c.Int("max-concurrency") <= 0 {
		return req, targets, fmt.Errorf("--max-concurrency %d: give a positive number", c.Int("max-concurrency"))
	}
	if err := checkScaleFlags(c); err != nil {
		return req, targets, err
	}
	// Check the request and targets before touching the cluster.
	if err := checkNodeNames(c, targets.Nodes); err != nil {
		return req, targets, err
	}
	if err := checkSelectorFlag(c); err != nil {
		return req, targets, err
	}
	if err := checkBackendTargets(c, backends.TargetFlags{Nodes: targets.Nodes, Selector: targets.Selector, All: targets.All}); err != nil {
		return req, targets, err
	}
	if err := req.Validate(); err != nil {
		return req, targets, err
	}
	if err := checkBackendFlags(c); err != nil {
		return req, targets, err
	}
	return req, targets, nil
}

// runnerOptions is runOptions' RunnerOptions: concurrency, prefix, the
// rollout flags and -o ndjson's stream. Flag errors name the flag.
func runnerOptions(c *ucli.Context, streams Streams) (nodeexec.RunnerOptions, error) {
	o := nodeexec.RunnerOptions{
		MaxConcurrency:  c.Int("max-concurrency"),
		MaxPerZone:      c.Int("max-per-zone"),
		NoPrefix:        c.Bool("no-prefix"),
		IncludeNotReady: c.Bool("include-not-ready"),
	}
	o.Canary = c.Int("canary")
	o.Retries = c.Int("retries")
	o.TailBytes = c.Int("tail-bytes")
	for _, f := range []string{"canary", "retries", "tail-bytes"} {
		if n := c.Int(f); n < 0 {
			return o, fmt.Errorf("--%s %d: give 0 or more", f, n)
		}
	}
	if o.Retries > maxRetries {
		return o, fmt.Errorf("--retries %d: too large, at most %d", o.Retries, maxRetries)
	}
	if o.TailBytes > maxTailBytes {
		return o, fmt.Errorf("--tail-bytes %d: too large, at most %d (1 MiB)", o.TailBytes, maxTailBytes)
	}
	for _, s := range splitCSV(c.StringSlice("batch")) {
		v, err := parseCountOrPercentFlag("batch", s, false)
		if err != nil {
			return o, err
		}
		o.Batches = append(o.Batches, v)
	}
	if s := c.String("max-errors"); s != "" || c.IsSet("max-errors") {
		v, err := parseCountOrPercentFlag("max-errors", s, true)
		if err != nil {
			return o, err
		}
		o.MaxErrors = &v
	}
	switch c.String("output") {
	case formatText, formatJSON:
	case formatNDJSON:
		var mu sync.Mutex
		enc := json.NewEncoder(streams.Out)
		o.OnResult = func(r nodeexec.NodeResult) {
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(record(r))
		}
	default:
		return o, fmt.Errorf("--output %q: want text, json or ndjson", c.String("output"))
	}
	return o, nil
}

// runBackend builds the backend of run's flags and, for a backend that
// targets a container (TargetResolver), replaces targets with its pod's node.
func runBackend(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string, targets nodeexec.Targets) (nodeexec.Backend, nodeexec.Targets, error) {
	backend, err := newBackend(c, client, cfg, ns)
	if err != nil {
		return nil, targets, err
	}
	targets, err = podTargets(c, backend, targets)
	return backend, targets, err
}

// printSummary writes one line per node: name, exit code, duration, and the error if any.
func printSummary(w io.Writer, results []nodeexec.NodeResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tEXIT\tDURATION\tRESULT")
	for _, r := range results {
		exit := fmt.Sprint(r.ExitCode)
		if r.ExitCode < 0 {
			exit = "-"
		}
		result := "ok"
		if r.Err != nil {
			result = r.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Node, exit, r.Duration().Round(10*time.Millisecond), result)
	}
	_ = tw.Flush()
}

// exitStatus: one node, its exit code; several, 1 if any failed.
func exitStatus(results []nodeexec.NodeResult) error {
	if len(results) == 1 {
		if code := nodeexec.ExitCode(results[0].Err); code != 0 {
			return exitCoder{code}
		}
		return nil
	}
	if len(nodeexec.Failed(results)) > 0 {
		return exitCoder{1}
	}
	return nil
}

func splitCSV(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// defaultBackendHint adds to a Pod Security refusal of the default backend
// (nsenter, which needs "privileged") the debug containers that may fit.
func defaultBackendHint(c *ucli.Context, err error) error {
	if c.IsSet("backend") || backendName(c) != backends.RunDefaultName || !errors.Is(err, nodeexec.ErrForbidden) || !strings.Contains(err.Error(), "Pod Security level") {
		return err
	}
	return fmt.Errorf("%w; or run in a debug container whose profile needs less: --profile baseline or --profile restricted (kubectl debug's profiles)", err)
}
