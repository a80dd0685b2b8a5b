package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

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
			o, metricsAddr, probeAddr, err := watchOptions(c)
			if err != nil {
				return err
			}
			o.Client, o.Dynamic, err = watcherClients(c)
			if err != nil {
				return err
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

// watchOptions maps watch's flags onto watcher.Options (without its clients)
// and the addresses to serve metrics and probes on, checking each.
func watchOptions(c *ucli.Context) (o watcher.Options, metricsAddr, probeAddr string, err error) {
	if c.NArg() > 0 {
		return watcher.Options{}, "", "", fmt.Errorf("watch takes no arguments (got %q)", c.Args().Slice())
	}
	for _, f := range []string{"workers", "create-parallelism"} {
		if c.Int(f) < 1 {
			return watcher.Options{}, "", "", fmt.Errorf("--%s %d: give 1 or more", f, c.Int(f))
		}
	}
	if n := c.Int("success-log-lines"); n < -1 {
		return watcher.Options{}, "", "", fmt.Errorf("--success-log-lines %d: give -1 (none), 0 or more", n)
	}
	if msgs := validation.IsDNS1123Subdomain(c.String("leader-election-id")); len(msgs) > 0 {
		return watcher.Options{}, "", "", fmt.Errorf("--leader-election-id %q: not a Lease name (%s)", c.String("leader-election-id"), strings.Join(msgs, "; "))
	}
	if c.Bool("leader-elect") && c.String("leader-election-namespace") == "" {
		return watcher.Options{}, "", "", errors.New("--leader-election-namespace is empty: name the namespace of the Lease (default " + v1alpha1.DefaultNamespace + ")")
	}
	if d := c.Duration("pod-batch-period"); d < 0 {
		return watcher.Options{}, "", "", fmt.Errorf("--pod-batch-period %s: give a duration such as 1s, or 0 to reconcile on every pod event at once", d)
	}
	if d := c.Duration("collect-interval"); d < 0 {
		return watcher.Options{}, "", "", fmt.Errorf("--collect-interval %s: give a positive duration such as 15s, or 0 to disable the collector", d)
	}
	metricsAddr, probeAddr = c.String("metrics-bind-address"), c.String("health-probe-bind-address")
	for _, f := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		if err := checkBindAddress(f, c.String(f)); err != nil {
			return watcher.Options{}, "", "", err
		}
	}
	if bindEnabled(metricsAddr) && metricsAddr == probeAddr {
		return watcher.Options{}, "", "", fmt.Errorf("--metrics-bind-address and --health-probe-bind-address are both %q: give each its own port", metricsAddr)
	}
	o = watcher.Options{
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
	return o, metricsAddr, probeAddr, nil
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
