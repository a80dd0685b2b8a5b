package resident

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// Commander is implemented by backends whose pods run the agent binary: it
// returns the node to run req on and the agent command line, which a
// resident agent runs just as the backend's own pod would. It returns an
// error wrapping nodeexec.ErrUnsupported when a resident agent cannot run req.
// The runtime and nsenter backends implement it.
type Commander interface {
	AgentCommand(ctx context.Context, req nodeexec.Request) (node string, argv []string, err error)
}

// WrapOptions configure Wrap.
type WrapOptions struct {
	// Client finds the agent pods (RBAC: list pods in Namespace). Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the exec streams. Required
	// unless Streamer is set.
	Config *rest.Config
	// Namespace of the resident agents. Defaults to DefaultNamespace.
	Namespace string
	// Commander gives the agent command line. Defaults to the wrapped
	// backend when it implements Commander.
	Commander Commander
	// Clock for timestamps. Defaults to the real clock.
	Clock clock.PassiveClock
	// Streamer overrides how commands are run over exec (tests). Defaults
	// to podexec.NewStreamer(Config, Client.CoreV1().RESTClient()).
	Streamer podexec.Streamer
	// Dialer opens the port-forward to an agent pod whose agent listens
	// (Agent.ServePort). Defaults to NewDialer(Config,
	// Client.CoreV1().RESTClient()) when Config is set; without a Dialer
	// every agent is reached over exec (Streamer).
	Dialer Dialer
	// Warn, when set, is told (one sentence naming the node, the agent pod
	// and the cause) when a node's resident agent cannot run its own
	// binary (ErrAgentUnusable) and the run falls back to the wrapped
	// backend's pod; the context's logger has it too. Optional; it may be
	// called from several runs at once.
	Warn func(msg string)
	// SpoolName names each run's spool in the agent container (see
	// agent.SpoolFor), which must be unique among the agent's runs and one
	// path element (spool.CheckName; Run fails, running nothing, with any
	// other name). Defaults to 16 random lowercase letters and digits.
	SpoolName func() string
	// AgentListMaxAge is how long one list of every node's agent
	// (ListAgents) answers the lookups of a fan-out before a lookup lists
	// them again (see Wrap). Defaults to DefaultAgentListMaxAge; negative
	// is refused.
	AgentListMaxAge time.Duration
	// RunID labels the run records this backend creates for agents that
	// require them (TransportRecorded; nodeexec.LabelRunID). Defaults to
	// 10 random lowercase letters and digits.
	RunID string
	// Holder is recorded as the run records' spec.holderIdentity. Defaults
	// to podexec.ClientIdentity(), "<hostname>/<pid>".
	Holder string
}

// DefaultAgentListMaxAge is WrapOptions.AgentListMaxAge's default.
const DefaultAgentListMaxAge = time.Minute

// Backend runs requests in the node's resident agent when there is one, and
// with the wrapped backend otherwise.
type Backend struct {
	inner nodeexec.Backend
	o     WrapOptions

	mu    sync.Mutex
	found map[string]Agent // by SkipPreflight, for the node's next Run
	alone string           // the node looked up by itself (FindAgent); "" before the first lookup
	// list is ListAgents' answer (nil before the first), taken at listed;
	// listing is held while a list is read, so that concurrent lookups
	// wait for the one list rather than make their own.
	list    map[string]Agent
	listed  time.Time
	listing sync.Mutex
}

// The optional interfaces of package nodeexec the backend implements; the
// others (PodDescriber, Requirer, ...) are the wrapped backend's, which
// nodeexec.As finds through Unwrap.
var (
	_ nodeexec.Backend          = (*Backend)(nil)
	_ nodeexec.Preflighter      = (*Backend)(nil)
	_ nodeexec.PreflightSkipper = (*Backend)(nil)
	_ nodeexec.Wrapper          = (*Backend)(nil)
	_ nodeexec.Explainer        = (*Backend)(nil)
)

// Wrap returns a backend that, for each request, asks o.Commander for the
// node and agent command line, looks for a resident agent on that node,
// and runs the command line there: through a port-forward to the agent's loopback listener when its
// pod announces one (RBAC: create and get pods/portforward in the
// namespace), else, or when nothing was started that way (ErrNotServing, a
// refused port-forward), over exec (create pods/exec). With no resident
// agent on the node, or nodeexec.ErrUnsupported from the Commander, it
// calls inner.Run. Results name inner's backend and the resident pod.
//
// The lookup costs a fan-out the same API requests whatever its size: the
// first node asked about (SkipPreflight's, the Runner's preflight node, or
// a single-node run's) is looked up by itself (FindAgent: a DaemonSet get
// and a pod list with a spec.nodeName field selector); as soon as another
// node is asked about, every node's agent is listed once (ListAgents: a
// DaemonSet get and one pod list, paged by ListPageSize), and that list
// answers every further lookup, from every concurrent run, for
// o.AgentListMaxAge; the first lookup after that lists again. An agent pod
// of the list that is gone when its node's run reaches it (the API server
// answers "not found"; nothing ran) is looked up again (FindAgent): its
// node's new agent runs the command, or, with none, the wrapped backend.
func Wrap(inner nodeexec.Backend, o WrapOptions) (*Backend, error) {
	if inner == nil {
		return nil, errors.New("resident: the backend to wrap is nil")
	}
	if o.Client == nil {
		return nil, errors.New("resident: WrapOptions.Client is nil: give a Kubernetes client")
	}
	if o.Config == nil && o.Streamer == nil {
		return nil, errors.New("resident: WrapOptions.Config is nil: give the rest.Config the client was built from")
	}
	if o.Commander == nil {
		c, ok := inner.(Commander)
		if !ok {
			return nil, fmt.Errorf("resident: backend %q cannot use resident agents (it does not run the agent); give WrapOptions.Commander", inner.Name())
		}
		o.Commander = c
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Streamer == nil {
		o.Streamer = podexec.NewStreamer(o.Config, o.Client.CoreV1().RESTClient())
	}
	if o.SpoolName == nil {
		o.SpoolName = func() string { return utilrand.String(16) }
	}
	if o.RunID == "" {
		o.RunID = utilrand.String(10)
	}
	if o.Holder == "" {
		o.Holder = podexec.ClientIdentity()
	}
	if o.Dialer == nil && o.Config != nil {
		o.Dialer = NewDialer(o.Config, o.Client.CoreV1().RESTClient())
	}
	switch {
	case o.AgentListMaxAge < 0:
		return nil, fmt.Errorf("resident: WrapOptions.AgentListMaxAge is %s: give a positive duration, or 0 for the default (%s)", o.AgentListMaxAge, DefaultAgentListMaxAge)
	case o.AgentListMaxAge == 0:
		o.AgentListMaxAge = DefaultAgentListMaxAge
	}
	return &Backend{inner: inner, o: o, found: map[string]Agent{}}, nil
}

// Unwrap returns the wrapped backend.
func (b *Backend) Unwrap() nodeexec.Backend { return b.inner }

// Namespace is the namespace of the resident agents.
func (b *Backend) Namespace() string { return b.o.Namespace }

// AgentCommand is the command line a resident agent on the node would run
// for req (the Commander's), with the node; an error wrapping nodeexec.ErrUnsupported
// when req goes to the wrapped backend.
func (b *Backend) AgentCommand(ctx context.Context, req nodeexec.Request) (string, []string, error) {
	return b.o.Commander.AgentCommand(ctx, req)
}

// Explain says, for --explain, whether a resident agent would run req and
// with which command line, or why the wrapped backend's pod is created.
func (b *Backend) Explain(ctx context.Context, req nodeexec.Request) []string {
	node, argv, err := b.AgentCommand(ctx, req)
	if err != nil {
		return []string{fmt.Sprintf("resident agents (namespace %s): not used for this request (%v): the pod below is created", b.o.Namespace, err)}
	}
	return []string{
		fmt.Sprintf("resident agents (namespace %s): on node %s, when a ready agent runs there, the command runs over exec in it, no pod created:", b.o.Namespace, node),
		fmt.Sprintf("  %q", argv),
		"a node without a ready agent gets the wrapped backend's pod, below",
	}
}

// Name is the wrapped backend's name.
func (b *Backend) Name() string { return b.inner.Name() }

// Preflight checks nothing when node has a resident agent (no pod will be
// created; RBAC on pods/portforward or pods/exec is checked by the API
// server on the run's own request), else it is the wrapped backend's, when
// it has one.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	if b.SkipPreflight(ctx, node) {
		return nil
	}
	if p, ok := b.inner.(nodeexec.Preflighter); ok {
		return p.Preflight(ctx, node)
	}
	return nil
}

// SkipPreflight implements nodeexec.PreflightSkipper: it reports whether
// node has a ready resident agent (looked up as Wrap says), which the
// node's next Run then uses without looking it up again.
func (b *Backend) SkipPreflight(ctx context.Context, node string) bool {
	b.mu.Lock()
	_, found := b.found[node]
	b.mu.Unlock()
	if found {
		return true
	}
	a, ok, _, err := b.lookup(ctx, node)
	if err != nil || !ok {
		return false
	}
	b.mu.Lock()
	b.found[node] = a
	b.mu.Unlock()
	return true
}

// agentOn returns node's agent: the one SkipPreflight found, else the
// lookup's; listed reports that it came from a list of every node's
// agents (which may be older than the run).
func (b *Backend) agentOn(ctx context.Context, node string) (a Agent, ok, listed bool, err error) {
	b.mu.Lock()
	a, ok = b.found[node]
	delete(b.found, node)
	b.mu.Unlock()
	if ok {
		return a, true, false, nil
	}
	return b.lookup(ctx, node)
}

// lookup finds node's agent: by itself (FindAgent) when no other node was
// looked up before, else in the list of every node's agents, listed once
// per AgentListMaxAge (see Wrap).
func (b *Backend) lookup(ctx context.Context, node string) (a Agent, ok, listed bool, err error) {
	b.mu.Lock()
	if b.list != nil && b.o.Clock.Since(b.listed) < b.o.AgentListMaxAge {
		a, ok = b.list[node]
		b.mu.Unlock()
		return a, ok, true, nil
	}
	if b.alone == "" || b.alone == node {
		b.alone = node
		b.mu.Unlock()
		a, ok, err = FindAgent(ctx, b.o.Client, b.o.Namespace, node)
		return a, ok, false, err
	}
	b.mu.Unlock()
	list, err := b.listAgents(ctx)
	if err != nil {
		return Agent{}, false, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok = list[node]
	return a, ok, true, nil
}

// listAgents returns the list of every node's agents, listing them
// (ListAgents) unless a list younger than AgentListMaxAge is there; one
// list at a time. The map is shared: read it only under b.mu.
func (b *Backend) listAgents(ctx context.Context) (map[string]Agent, error) {
	b.listing.Lock()
	defer b.listing.Unlock()
	b.mu.Lock()
	fresh := b.list != nil && b.o.Clock.Since(b.listed) < b.o.AgentListMaxAge
	list := b.list
	b.mu.Unlock()
	if fresh { // another lookup listed while this one waited
		return list, nil
	}
	at := b.o.Clock.Now()
	list, err := ListAgents(ctx, b.o.Client, b.o.Namespace)
	if err != nil {
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("listed the resident agents", "namespace", b.o.Namespace, "agents", len(list))
	b.mu.Lock()
	b.list, b.listed = list, at
	b.mu.Unlock()
	return list, nil
}

// ReadyNodes returns which of nodes have a ready resident agent, by the
// lookup Wrap describes, and keeps the answer for the nodes' runs, so that
// a caller that sorts the nodes first (the CLI's agent image check) costs
// the run no lookup of its own: one node is looked up by itself
// (FindAgent: a DaemonSet get and one pod list), and its agent is the one
// its next Preflight and Run use; several share the list of every node's
// agents (ListAgents: a DaemonSet get and one paged pod list, at most once
// per AgentListMaxAge), which answers their runs' lookups too. Errors:
// those of FindAgent or ListAgents (API errors wrapped; RBAC: get
// daemonsets, list pods).
func (b *Backend) ReadyNodes(ctx context.Context, nodes []string) (map[string]bool, error) {
	ready := make(map[string]bool, len(nodes))
	switch len(nodes) {
	case 0:
		return ready, nil
	case 1:
		a, ok, _, err := b.lookup(ctx, nodes[0])
		if err != nil {
			return nil, err
		}
		if ok {
			b.mu.Lock()
			b.found[nodes[0]] = a
			b.mu.Unlock()
			ready[nodes[0]] = true
		}
		return ready, nil
	}
	list, err := b.listAgents(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range nodes {
		if _, ok := list[n]; ok {
			ready[n] = true
		}
	}
	return ready, nil
}

// relookup looks node's agent up by itself (FindAgent) after its listed
// agent pod was gone, and puts the answer in the list.
func (b *Backend) relookup(ctx context.Context, node string) (Agent, bool, error) {
	a, ok, err := FindAgent(ctx, b.o.Client, b.o.Namespace, node)
	if err != nil {
		return a, ok, err
	}
	b.mu.Lock()
	if b.list != nil {
		if ok {
			b.list[node] = a
		} else {
			delete(b.list, node)
		}
	}
	b.mu.Unlock()
	return a, ok, nil
}

// agentGone reports whether err, from a run in agent pod, is the API
// server's answer that the pod does not exist, before anything ran (not a
// run whose outcome was lost, nodeexec.ErrOutcomeUnknown).
func agentGone(err error, pod string) bool {
	if err == nil || errors.Is(err, nodeexec.ErrOutcomeUnknown) {
		return false
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return false
	}
	return apierrors.IsNotFound(err) || strings.Contains(err.Error(), fmt.Sprintf("pods %q not found", pod))
}

// Run runs req in the node's resident agent, or with the wrapped backend.
// The agent itself bounds the command (its --timeout, agent.WithTimeout)
// to the request's timeout plus 5 s: then the command's process group gets
// SIGTERM, and SIGKILL 5 s later, so that it cannot outlive a client that is
// gone; the client side ends at the timeout with an error wrapping
// nodeexec.ErrTimeout. When the timeout expires or ctx is cancelled, Run
// ends the command before it returns, as the pod backends do by deleting
// their pod: over one more exec (agent.StopSpoolArgv, bounded by
// StopTimeout) it has the agent stop the command the same way, and waits
// until it ended (if that fails, it is logged, and the agent's --timeout
// still ends the command). A TTY run has no spool and cannot be stopped so:
// its command ends with its terminal, or at the agent's --timeout. A Commander's command line must be the agent's
// (`nodeexec agent SUBCOMMAND ...`), else Run fails without running it. Errors are nodeexec.Backend's (for the
// runtime backend's command lines also agent.ErrNotRun; see agent.ReportsNotRun).
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	if err := req.Validate(); err != nil {
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: b.Name()}, err
	}
	node, argv, err := b.o.Commander.AgentCommand(ctx, req)
	if errors.Is(err, nodeexec.ErrUnsupported) {
		log.V(1).Info("not using the resident agent", "reason", err)
		return b.inner.Run(ctx, req)
	}
	if err != nil {
		now := b.o.Clock.Now()
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: b.Name(), Started: now, Finished: now}, err
	}
	a, ok, listed, err := b.agentOn(ctx, node)
	if err != nil || !ok {
		log.V(1).Info("no resident agent: creating a pod", "node", node, "err", err)
		return b.inner.Run(ctx, req)
	}
	if !a.NsenterEnv && agent.NsenterEnvFromAgent(argv) {
		log.V(1).Info("the resident agent's nsenter is older than environment variables (its pod lacks "+agent.AnnotationNsenterEnv+"): creating a pod", "node", node, "pod", a.Pod)
		return b.inner.Run(ctx, req)
	}
	on := req
	on.Node = node
	res, tried, err := b.execIn(ctx, a, argv, on)
	if listed && tried && ctx.Err() == nil && agentGone(err, a.Pod) {
		// The list is older than this run: the node's agent pod may have
		// been replaced since.
		log.V(1).Info("the listed resident agent pod is gone: looking again", "node", node, "pod", a.Pod)
		now, ok, ferr := b.relookup(ctx, node)
		if ferr != nil || !ok {
			log.V(1).Info("no resident agent: creating a pod", "node", node, "err", ferr)
			return b.inner.Run(ctx, req)
		}
		if now.Pod != a.Pod {
			a = now
			res, tried, err = b.execIn(ctx, a, argv, on)
		}
	}
	if !tried {
		return b.inner.Run(ctx, req)
	}
	switch {
	case errors.Is(err, errEnvOverExec):
		log.V(1).Info("the resident agent's listener did not run the command, and exec would put the request's environment variables on its command line: creating a pod", "node", node, "pod", a.Pod, "reason", err.Error())
		return b.inner.Run(ctx, req)
	case errors.Is(err, ErrAgentUnusable) && ctx.Err() == nil:
		msg := fmt.Sprintf("resident agent %s/%s on node %q cannot run its binary (%v): running the command with a pod instead (reinstall the agents: nodeexec agent install)", b.o.Namespace, a.Pod, node, err)
		log.Info(msg)
		if b.o.Warn != nil {
			b.o.Warn(msg)
		}
		return b.inner.Run(ctx, req)
	}
	return res, err
}

// ErrAgentUnusable is wrapped by the error of a run that a node's resident
// agent did not start because the agent cannot execute its own binary
// (agent.Path gone from its container or not executable: the agent's
// listener says so, agent.CannotExecPrefix, or the container runtime fails
// the exec of it). Nothing ran, and nothing will in that agent until its
// container restarts: Run reports it (WrapOptions.Warn, the context's
// logger) and falls back to the wrapped backend, as on a node without an
// agent. One attempt per run: neither retried nor resumed.
var ErrAgentUnusable = errors.New("the resident agent cannot execute its binary")

// cannotExec reports whether err, from an exec of the agent command line
// in an agent pod, is the container runtime's refusal to start the agent's
// binary (gone, not executable, not a program) — what runc reports as
// `exec: "/usr/local/bin/nodeexec": stat ...: no such file or directory` —
// rather than the command's exit status or a cut stream.
func cannotExec(err error) bool {
	var ce utilexec.CodeExitError
	if err == nil || errors.As(err, &ce) || errors.Is(err, ErrAgentUnusable) {
		return false
	}
	msg := err.Error()
	if !strings.Contains(msg, agent.Path) {
		return false
	}
	for _, s := range []string{"no such file or directory", "permission denied", "exec format error", "executable file not found", "not found in $PATH"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// agentExecStreamer is the exec Streamer into agent pods: an exec that the
// container runtime could not start because the agent's binary cannot be
// executed (cannotExec) fails with ErrAgentUnusable and
// podexec.ErrNotStarted, so that it is not taken for a cut stream and
// retried until the run's timeout.
type agentExecStreamer struct{ podexec.Streamer }

func (s agentExecStreamer) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	err := s.Streamer.Exec(ctx, namespace, pod, opts, streams)
	if cannotExec(err) {
		return fmt.Errorf("%w: %w: %w", ErrAgentUnusable, podexec.ErrNotStarted, err)
	}
	return err
}

// streamer is how the commands reach agent a: through a port-forward to
// its listener, with exec as the fallback when nothing was started that
// way (ErrNotServing, a refused port-forward); over exec when it does not
// listen. env goes with the command line main only (WireRequest.Env), and
// never over exec: main is not run over exec when env is set
// (errEnvOverExec).
func (b *Backend) streamer(a Agent, node string, main []string, env map[string]string) podexec.Streamer {
	execStreamer := agentExecStreamer{b.o.Streamer}
	if a.ServePort == 0 || b.o.Dialer == nil {
		return execStreamer
	}
	pf := &portForwardStreamer{dialer: b.o.Dialer, port: a.ServePort, env: env, envFor: main}
	if a.RequiresRecord {
		pf.record = &recorder{client: b.o.Client, clock: b.o.Clock, name: b.o.SpoolName, spec: agent.RecordSpec{
			Namespace: b.o.Namespace, Node: node, Command: main, EnvNames: slices.Collect(maps.Keys(env)), RunID: b.o.RunID, Holder: b.o.Holder,
		}}
	}
	f := &fallbackStreamer{primary: pf, secondary: execStreamer}
	if len(env) > 0 {
		f.primaryOnly = main
	}
	return f
}

// fallbackStreamer runs a command with primary, and with secondary when
// primary did not start it (podexec.ErrNotStarted), except for the command
// line primaryOnly (nil: none), which then fails with errEnvOverExec.
type fallbackStreamer struct {
	primary, secondary podexec.Streamer
	primaryOnly        []string
}

// errEnvOverExec: the run's command line needs its environment variables
// sent over the agent's listener, which did not start it; nothing ran.
var errEnvOverExec = fmt.Errorf("the request's environment variables go only through the agent's listener, never on an exec's command line: %w", podexec.ErrNotStarted)

func (f *fallbackStreamer) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	err := f.primary.Exec(ctx, namespace, pod, opts, streams)
	if err == nil || !errors.Is(err, podexec.ErrNotStarted) || errors.Is(err, ErrAgentUnusable) || errors.Is(err, ErrRecordRefused) || ctx.Err() != nil {
		// An agent that cannot execute its binary fails the same over
		// exec; a refused record is to be seen, not hidden by a fallback.
		return err
	}
	if agentGone(err, pod) {
		return err // the pod is gone: exec cannot reach it either
	}
	if f.primaryOnly != nil && slices.Equal(opts.Command, f.primaryOnly) {
		return fmt.Errorf("%w: %w", errEnvOverExec, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("the agent's listener did not run the command: using exec", "namespace", namespace, "pod", pod, "reason", err.Error())
	return f.secondary.Exec(ctx, namespace, pod, opts, streams)
}

// execIn runs argv in agent a with exec, unless a cannot take req (its
// environment variables would go on an exec's command line): then tried is
// false, and the wrapped backend is to run it.
func (b *Backend) execIn(ctx context.Context, a Agent, argv []string, req nodeexec.Request) (res nodeexec.Result, tried bool, err error) {
	log := logr.FromContextOrDiscard(ctx)
	if len(req.Env) > 0 && (a.ServePort == 0 || b.o.Dialer == nil) {
		log.V(1).Info("the resident agent is reached over exec only, which would put the request's environment variables on its command line: creating a pod", "node", req.Node, "pod", a.Pod)
		return res, false, nil
	}
	log.V(1).Info("using the resident agent", "node", req.Node, "pod", a.Pod, "servePort", a.ServePort)
	res, err = b.exec(ctx, a, argv, req)
	return res, true, err
}

func (b *Backend) exec(ctx context.Context, a Agent, argv []string, req nodeexec.Request) (res nodeexec.Result, err error) {
	pod := a.Pod
	res = nodeexec.Result{Node: req.Node, ExitCode: -1, Started: b.o.Clock.Now(), Backend: b.Name(), Namespace: b.o.Namespace, Pod: pod}
	req, firstOutput := nodeexec.RecordFirstOutput(req, b.o.Clock.Now)
	defer func() {
		res.Finished = b.o.Clock.Now()
		res.FirstOutput = firstOutput()
	}()
	timeout := req.EffectiveTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("node %q: %w after %s", req.Node, nodeexec.ErrTimeout, timeout))
	defer cancel()

	tail := &agent.TailWriter{W: req.Stderr}
	streams := remotecommand.StreamOptions{
		Stdin:             req.Stdin,
		Stdout:            orDiscard(req.Stdout),
		Tty:               req.TTY,
		TerminalSizeQueue: req.TerminalSizeQueue,
	}
	if !req.TTY {
		streams.Stderr = tail
	}
	bounded, ok := agent.WithTimeout(argv, timeout+agentTimeoutSlack)
	if !ok {
		return res, fmt.Errorf("resident: the Commander's command line %q %w (%s agent SUBCOMMAND ...): cannot bound it with the agent's --timeout", argv, errNotAgent, agent.Path)
	}
	name := b.o.SpoolName()
	if err := spool.CheckName(name); err != nil {
		return res, fmt.Errorf("resident: WrapOptions.SpoolName: %w", err)
	}
	bounded, resume := agent.SpoolFor(bounded, name, req)
	streamer := b.streamer(a, req.Node, bounded, req.Env)
	opts := &corev1.PodExecOptions{
		Container: agent.ContainerName,
		Command:   bounded,
		Stdin:     req.Stdin != nil,
		Stdout:    true,
		Stderr:    !req.TTY,
		TTY:       req.TTY,
	}
	clk, ok := b.o.Clock.(clock.WithTicker)
	if !ok {
		clk = clock.RealClock{}
	}
	xerr := podexec.ExecResuming(ctx, streamer, clk, b.o.Namespace, pod, opts, streams, resume)
	if xerr == nil {
		res.ExitCode = 0
		return res, nil
	}
	var ce utilexec.CodeExitError
	if errors.As(xerr, &ce) {
		res.ExitCode = ce.Code
		err := error(&nodeexec.ExitError{Node: req.Node, Code: ce.Code})
		if agent.ReportsNotRun(argv) {
			err = agent.NotRunError(err, tail)
		}
		return res, err
	}
	if ctx.Err() != nil {
		if resume != nil && len(resume.Stop) > 0 {
			b.stop(ctx, streamer, pod, resume.Stop)
		}
		return res, context.Cause(ctx)
	}
	if errors.Is(xerr, nodeexec.ErrOutcomeUnknown) {
		return res, fmt.Errorf("exec in resident agent %s/%s on node %q: %w", b.o.Namespace, pod, req.Node, xerr)
	}
	if podexec.StreamBroke(xerr) {
		// The agent pod stays: the command goes on until it ends or the
		// agent's --timeout (the request's timeout plus agentTimeoutSlack) ends it.
		return res, fmt.Errorf("exec in resident agent %s/%s on node %q: %w (the command may run on until its timeout): %w",
			b.o.Namespace, pod, req.Node, nodeexec.ErrOutcomeUnknown, xerr)
	}
	return res, fmt.Errorf("exec in resident agent %s/%s on node %q: %w", b.o.Namespace, pod, req.Node, xerr)
}

// StopTimeout bounds the exec that stops the command of a cancelled or
// timed-out run: the agent's SIGKILL comes 5 s after its SIGTERM.
const StopTimeout = 15 * time.Second

// stop runs argv (agent.StopSpoolArgv) in the agent pod, whatever ctx's
// state, and logs a failure.
func (b *Backend) stop(ctx context.Context, streamer podexec.Streamer, pod string, argv []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StopTimeout)
	defer cancel()
	tail := &agent.TailWriter{}
	opts := &corev1.PodExecOptions{Container: agent.ContainerName, Command: argv, Stdout: true, Stderr: true}
	if err := streamer.Exec(ctx, b.o.Namespace, pod, opts, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: tail}); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "could not stop the command of the cancelled or timed-out run: it runs on until the agent's --timeout",
			"namespace", b.o.Namespace, "pod", pod, "agentSaid", tail.LastLine())
	}
}

// errNotAgent is wrapped by Run's error for a Commander whose command line is
// not the agent's.
var errNotAgent = errors.New("is not the agent's")

// agentTimeoutSlack is added to a request's timeout to give the agent's
// --timeout: the client ends first, with a clear error.
const agentTimeoutSlack = 5 * time.Second

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
