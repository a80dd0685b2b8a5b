package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/internal/term"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// DefaultShellTimeout is shell's --timeout: an interactive session lasts longer than a command.
const DefaultShellTimeout = time.Hour

func shellCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "shell",
		Usage:     "open an interactive shell on a node",
		UsageText: "shell NODE [options] [-- COMMAND [ARGS...]]\n   shell NODE --backend ephemeral|runtime --pod [NAMESPACE/]NAME [options] [-- COMMAND [ARGS...]]",
		Description: "Opens a login shell on the node in a pod of the chosen backend, with a terminal: the node's\n" +
			"root (chroot /host, bash if the node has it, else sh) for profiles that mount it (sysadmin,\n" +
			"general, legacy), the container's sh otherwise. A COMMAND after -- runs instead of the shell.\n" +
			"The pod is deleted when the shell exits, on Ctrl-C/SIGTERM/SIGHUP, and at --timeout.\n" +
			"Exit status: the remote shell's (124 on timeout). When standard input is not a terminal the\n" +
			"shell runs without one (like kubectl exec -i): input is read from stdin, no prompt is shown.\n" +
			"--record FILE writes the session in asciicast v2 (asciinema play FILE replays it), each\n" +
			"event as it happens, so a session cut short keeps what came before the cut.",
		Flags: append([]ucli.Flag{
			&ucli.DurationFlag{Name: "timeout", Value: DefaultShellTimeout, Usage: "time limit of the session, pod start included"},
			explainFlag(),
		}, append(shellRecordFlags(), backendFlags(backends.DefaultName)...)...),
		Action: func(c *ucli.Context) error {
			return shellAction(c, streams)
		},
	}
}

// shellArgv is the login shell for backend b: in the node's root when the
// backend's container mounts it (nodeexec.HostRooter), else in the container.
func shellArgv(b nodeexec.Backend) []string {
	const pick = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"
	if h, ok := nodeexec.As[nodeexec.HostRooter](b); ok && h.HostRoot() != "" {
		return []string{"chroot", h.HostRoot(), "/bin/sh", "-c", pick}
	}
	return []string{"sh", "-c", pick}
}

// shellOptions turns shell's NODE, command and flags into the Request
// (its Command empty when none was given: the backend's login shell,
// shellArgv) after checking them and the backend flags without touching
// the cluster; tty says whether standard input is a terminal (fd).
func shellOptions(c *ucli.Context, streams Streams) (req nodeexec.Request, rec recordOptions, fd uintptr, tty bool, err error) {
	if c.NArg() < 1 || c.Args().First() == "" {
		return req, rec, 0, false, errors.New("give the node: shell NODE")
	}
	node := c.Args().First()
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		return req, rec, 0, false, fmt.Errorf("node %q: not a node name (%s): see kubectl get nodes", node, strings.Join(msgs, "; "))
	}
	if err := checkRunTimeout(c, "30m or 2h"); err != nil {
		return req, rec, 0, false, err
	}
	if err := checkBackendFlags(c); err != nil {
		return req, rec, 0, false, err
	}
	if err := checkBackendTargets(c, backends.TargetFlags{Shell: true, Nodes: []string{node}}); err != nil {
		return req, rec, 0, false, err
	}
	if err := checkClientFlags(c); err != nil {
		return req, rec, 0, false, err
	}
	if rec, err = checkRecordFlags(c); err != nil {
		return req, rec, 0, false, err
	}
	fd, tty = term.Fd(streams.In)
	req = nodeexec.Request{Node: node, Command: c.Args().Tail(), Stdin: streams.In, Stdout: streams.Out, Timeout: c.Duration("timeout")}
	if tty {
		req.TTY = true
		if t := os.Getenv("TERM"); t != "" {
			req.Env = map[string]string{"TERM": t}
		}
	} else {
		req.Stderr = streams.ErrOut
	}
	return req, rec, fd, tty, nil
}

func shellAction(c *ucli.Context, streams Streams) error {
	req, recOpts, fd, tty, err := shellOptions(c, streams)
	if err != nil {
		return err
	}
	node := req.Node
	client, cfg, ns, err := client(c)
	if err != nil {
		return err
	}
	backend, err := newBackend(c, client, cfg, ns)
	if err != nil {
		return err
	}
	plat := startPlatformCheck(c)
	// --pod (ephemeral, runtime): the shell opens on the pod's node, which
	// must be NODE.
	if t, err := podTargets(c, backend, nodeexec.Targets{Nodes: []string{node}}); err != nil {
		return err
	} else if t.Nodes[0] != node {
		return fmt.Errorf("--pod %q runs on node %q, not %q: give shell %s", c.String("pod"), t.Nodes[0], node, t.Nodes[0])
	}
	if len(req.Command) == 0 {
		req.Command = shellArgv(backend)
	}
	if err := req.Validate(); err != nil {
		return err
	}
	runner, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: backend})
	if err != nil {
		return err
	}
	// SIGINT and SIGTERM end c.Context (see main); SIGHUP (the terminal went away) too.
	ctx, stop := signal.NotifyContext(withLogger(c.Context, streams.ErrOut, c.Int("v")), syscall.SIGHUP)
	defer stop()
	nodes, err := runner.Resolve(ctx, nodeexec.Targets{Nodes: []string{node}})
	if err != nil {
		return err
	}
	if err := checkCluster(c, client, nodes); err != nil {
		return err
	}
	platforms, err := plat.check(ctx, c, streams.ErrOut, client, backend, nodes, c.Bool("explain"))
	if err != nil {
		return err
	}
	if c.Bool("explain") || !skipPreflight(ctx, backend, node) {
		if err := runPreflight(ctx, streams.Out, backend, client, ns, req, c.Bool("explain"), platforms...); err != nil || c.Bool("explain") {
			return err
		}
		collectExpired(ctx, client, ns)
	}
	if !tty {
		fmt.Fprintln(streams.ErrOut, "standard input is not a terminal: running without a TTY (no prompt; commands are read from stdin)")
	}
	var rec *shellRecording
	if recOpts.path != "" {
		var size remotecommand.TerminalSize
		if tty {
			size, _ = term.Size(fd)
		}
		if rec, err = startRecording(recOpts, &req, size, time.Now); err != nil {
			return err
		}
	}
	if tty {
		raw, err := term.MakeRaw(fd)
		if err != nil {
			return errors.Join(err, rec.finishIfStarted())
		}
		defer raw.Restore() //nolint:errcheck // restored again below, with the error reported
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req.TerminalSizeQueue = rec.sizes(term.NewSizeQueue(sctx, fd))
		_, err = backend.Run(ctx, req)
		if rerr := raw.Restore(); rerr != nil {
			fmt.Fprintf(streams.ErrOut, "warning: %v; run `reset`\n", rerr)
		}
		var ee *nodeexec.ExitError
		if err != nil && !errors.As(err, &ee) && !errors.Is(err, nodeexec.ErrImageNeverPull) {
			// The session was cut (signal, timeout, broken stream): the
			// cursor may still be after the remote prompt.
			fmt.Fprintln(streams.ErrOut)
		}
		return shellExit(streams, backendName(c), err, rec.finishIfStarted())
	}
	_, err = backend.Run(ctx, req)
	return shellExit(streams, backendName(c), err, rec.finishIfStarted())
}

// checkShellWords refuses shell's words before "--" (words, when dash
// reports a "--") beyond NODE: a second word, without "--", would be read
// as the command (`shell NODE other-node` runs other-node on NODE).
func checkShellWords(words []string, dash bool) error {
	if dash || len(words) <= 1 {
		return nil
	}
	return fmt.Errorf("shell takes one node (got %q): the command goes after --, e.g. shell %s -- %s", words, words[0], strings.Join(words[1:], " "))
}

// shellExit maps the session's end to the exit status: the remote status
// silently; an image not on the node with pull policy Never as bad input
// (Run prints it, exit status 2); otherwise the error on stderr and 124
// (timeout) or 1. recErr, the --record file's error, is printed; it makes a
// session that ended with 0 end with 1.
func shellExit(streams Streams, backend string, err, recErr error) error {
	if recErr != nil {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", recErr)
	}
	var ee *nodeexec.ExitError
	switch {
	case err == nil && recErr != nil:
		return exitCoder{1}
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return exitCoder{ee.Code}
	case errors.Is(err, nodeexec.ErrImageNeverPull):
		return neverPullError([]error{err}, "shell", backend)
	default:
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return exitCoder{nodeexec.ExitCode(err)}
	}
}
