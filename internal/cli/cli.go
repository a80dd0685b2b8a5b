// Package cli is the nodeexec command line, on urfave/cli v2. All printing
// happens here; the library prints nothing.
//
// Each command is one file with its flags (run.go, shell.go, gc.go, image.go,
// agent.go, version.go, completion.go; the NodeScript verbs in
// nodescript*.go, windows.go, budget.go); flag groups shared by several
// commands have files of their own: the client flags (cli.go), the backend
// flags and --explain (backendflags.go). A command's flags become the
// library's options in one function (run: runOptions), which checks them
// without touching the cluster (errors name the flag, exit status 2); then
// come the library calls (run: Runner.Resolve, the preflight, RunNodes).
//
// Backends are known only through their registration table
// (nodeexec/backends): --backend's values, the backend flags, their checks
// and the backend each builds are its entries'; no file here names a
// backend.
//
// Run is the entry point: it reorders argv (permuteArgs, for what urfave/cli
// v2 cannot parse), runs the app and maps errors to exit statuses.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ucli "github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// Streams are the process's standard streams.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// InterruptedAgainMessage is printed when a second SIGINT or SIGTERM stops
// nodeexec before its cleanup finished.
const InterruptedAgainMessage = "nodeexec: interrupted again: exiting before cleanup finished. Pods of this run not yet deleted " +
	"are deleted by the next `nodeexec run`, `shell` or `gc` in their namespace, or by the watcher, once the run's Lease " +
	"(nodeexec-run-<run ID>) has gone 30s without renewal; `kubectl get pods -A -l app.kubernetes.io/managed-by=nodeexec` lists them"

// exitCoder carries a process exit code out of an Action without printing.
type exitCoder struct{ code int }

func (e exitCoder) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Run runs the command line args (args[0] is the program name) and returns
// the process exit code: 0 on success; for `run` on one node, that node's exit
// code (124 on timeout, 125 when its outcome was lost); on several nodes, 1 if
// any failed; 2 for bad usage or a run that could not start.
func Run(ctx context.Context, streams Streams, args []string) int {
	app := newApp(streams)
	args, err := permuteArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	var ec exitCoder
	var as agentcmd.ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &as):
		return as.Code
	default:
		fmt.Fprintf(streams.ErrOut, "error: %v%s\n", err, errorHint(err))
		return 2
	}
}

// errorHint says how to fix the API server's refusals of the caller's
// identity, which client-go reports as a bare "Unauthorized" or "forbidden".
func errorHint(err error) string {
	switch {
	case apierrors.IsUnauthorized(err):
		return " (the API server rejected the credentials: the token or certificate is invalid or expired; refresh them, or choose others with --kubeconfig or --context)"
	case apierrors.IsForbidden(err) && !errors.Is(err, nodeexec.ErrForbidden) && !strings.Contains(err.Error(), "kubectl"):
		return " (RBAC: ask a cluster admin for the permission named above; `kubectl auth can-i --list` shows yours)"
	}
	return ""
}

// NewApp returns the application Run runs, for what walks its commands
// and flags (the e2e sweep of every command). Run it through Run, which
// also reorders flags given after arguments and prints errors.
func NewApp(streams Streams) *ucli.App { return newApp(streams) }

// BackendNames are the values of --backend.
func BackendNames() []string { return backendNames() }

func newApp(streams Streams) *ucli.App {
	name := filepath.Base(os.Args[0])
	if strings.HasPrefix(name, "kubectl-") {
		name = "kubectl " + strings.TrimPrefix(name, "kubectl-")
	}
	prof := &profiler{}
	app := &ucli.App{
		Name:      name,
		Usage:     "run commands and scripts on Kubernetes nodes",
		Reader:    streams.In,
		Writer:    streams.Out,
		ErrWriter: streams.ErrOut,
		// Errors are printed by Run, once.
		ExitErrHandler:       func(*ucli.Context, error) {},
		EnableBashCompletion: true,
		HideVersion:          true, // --version is versionFlag: urfave's own would take -v, our verbosity
		Flags:                append(append(clientFlags(), profilingFlags()...), versionFlag()),
		Before:               prof.start,
		After:                prof.stop,
		Action:               rootAction(streams),
		Commands: []*ucli.Command{runCommand(streams), shellCommand(streams), gcCommand(streams),
			applyCommand(streams), statusCommand(streams), windowsCommand(streams), promoteCommand(streams), pauseCommand(streams, true), pauseCommand(streams, false),
			rerunCommand(streams), ignoreCommand(streams, true), ignoreCommand(streams, false), runNowCommand(streams), watchCommand(streams),
			imageCommand(streams), agentCommand(streams),
			versionCommand(streams), completionCommand(streams)},
		// A flag value the flag package cannot parse (--timeout soon) is one
		// error naming the flag, not the usage on stdout.
		OnUsageError: onUsageError,
	}
	setOnUsageError(app.Commands)
	refuseUnknownSubcommands(app.Commands)
	return app
}

// refuseUnknownSubcommands gives every command that has subcommands and
// no action of its own (agent, image) unknownSubcommand: urfave/cli's
// default would answer `agent bogus` with "No help topic" and exit 0.
func refuseUnknownSubcommands(cmds []*ucli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 && c.Action == nil {
			c.Action = unknownSubcommand
		}
		refuseUnknownSubcommands(c.Subcommands)
	}
}

// unknownSubcommand is the action of a command with subcommands: alone it
// shows its help; followed by a word that names none of them, it is an
// error listing them.
func unknownSubcommand(c *ucli.Context) error {
	if !c.Args().Present() {
		return ucli.ShowSubcommandHelp(c)
	}
	full := c.App.Name + " " + c.Command.FullName()
	return fmt.Errorf("unknown command %q for %s: want %s (see %s --help)", c.Args().First(), full, commandNames(c.Command.VisibleCommands()), full)
}

// commandNames lists the names of cmds for an error: "a, b or c".
func commandNames(cmds []*ucli.Command) string {
	var names []string
	for _, c := range cmds {
		if c.Name != "help" {
			names = append(names, c.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Client flags, as kubectl spells them.
func clientFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "kubeconfig", Usage: "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)"},
		&ucli.StringFlag{Name: "context", Usage: "the kubeconfig context to use"},
		&ucli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace for the pods nodeexec creates (default: the context's, else \"default\")"},
		&ucli.Float64Flag{Name: "qps", Value: float64(nodeexec.DefaultQPS), Usage: "client-side requests per second to the API server; negative disables the limit"},
		&ucli.IntFlag{Name: "burst", Value: nodeexec.DefaultBurst, Usage: "client-side request burst"},
		&ucli.IntFlag{Name: "v", Usage: "log verbosity on stderr (0: none, 1: pods created and deleted, 2: every exec attempt)"},
	}
}

// client builds the client from the global flags.
func client(c *ucli.Context) (kubernetes.Interface, *rest.Config, string, error) {
	if err := checkClientFlags(c); err != nil {
		return nil, nil, "", err
	}
	o := nodeexec.ClientOptions{
		Kubeconfig: c.String("kubeconfig"),
		Context:    c.String("context"),
		Namespace:  c.String("namespace"),
		QPS:        float32(c.Float64("qps")),
		Burst:      c.Int("burst"),
	}
	cfg, ns, err := o.RESTConfig()
	if err != nil {
		return nil, nil, "", err
	}
	cs, err := nodeexec.Clientset(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	return cs, cfg, ns, nil
}

// withLogger returns ctx carrying a logger that writes to w at verbosity v
// (nothing at 0). client-go logs through the context's logger too.
func withLogger(ctx context.Context, w io.Writer, v int) context.Context {
	if v <= 0 {
		return ctx
	}
	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(w, strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{Verbosity: v, LogTimestamp: true})
	return logr.NewContext(ctx, log)
}

// positionalBeforeCommand is, for commands whose positional arguments end
// with a remote command, how many positional arguments precede it: run
// none, shell one (NODE). A flag after the command's first word is refused
// (it is ambiguous: `run --all echo -n hi`); the command goes after "--".
var positionalBeforeCommand = map[string]int{"run": 0, "shell": 1}

// permuteArgs returns args (args[0] the program) reordered so that
// urfave/cli parses flags given anywhere before "--", as kubectl does.
//
// urfave/cli v2 (v2.27) cannot do this itself: it parses a command's flags
// with the standard flag package (flag.FlagSet.Parse), which stops at the
// first argument that is not a flag, and v2 has no setting to change that
// (UseShortOptionHandling only splits -abc, AllowExtFlags only admits go
// test's flags, SkipFlagParsing turns parsing off). Without permuteArgs,
// `shell NODE --profile baseline` would run "--profile baseline" on NODE,
// and a global flag after the command (`run -n ops ...`) would be an
// unknown flag of the command. So, before parsing: the command's flags
// after its positional arguments move before them (`shell NODE --profile baseline`,
// `promote NAME --to all`), and global flags after the command (-n,
// --kubeconfig, ...) move before it. A flag's value stays with it; "--"
// ends the flags, and is put before the positional arguments so that none
// of them is read as a flag. The agent's internal subcommands (all but
// install and uninstall) are left as they are.
func permuteArgs(app *ucli.App, args []string) ([]string, error) {
	// lookup returns the flag of flags that tok names, and whether tok
	// carries its value (--name=value).
	lookup := func(flags []ucli.Flag, tok string) (ucli.Flag, bool) {
		name, _, inline := strings.Cut(strings.TrimLeft(tok, "-"), "=")
		for _, f := range flags {
			if slices.Contains(f.Names(), name) {
				return f, inline
			}
		}
		return nil, inline
	}
	takesValue := func(f ucli.Flag, inline bool) bool {
		_, isBool := f.(*ucli.BoolFlag)
		return f != nil && !isBool && !inline
	}
	isFlag := func(tok string) bool { return strings.HasPrefix(tok, "-") && tok != "-" && tok != "--" }

	i := 1
	for i < len(args) && isFlag(args[i]) {
		if f, inline := lookup(app.Flags, args[i]); takesValue(f, inline) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args, nil
	}
	cmdAt := i
	cmd := app.Command(args[i])
	if cmd == nil {
		return args, nil
	}
	if len(cmd.Subcommands) > 0 {
		if i+1 >= len(args) || !slices.Contains([]string{"install", "uninstall"}, args[i+1]) || cmd.Command(args[i+1]) == nil {
			return args, nil
		}
		i++
		cmd = cmd.Command(args[i])
	}
	// Flags every command has: help, and shell completion.
	builtin := []ucli.Flag{&ucli.BoolFlag{Name: "help", Aliases: []string{"h"}}, &ucli.BoolFlag{Name: "generate-bash-completion"}}
	maxPos, remote := positionalBeforeCommand[cmd.Name]
	global := slices.Clone(args[1:cmdAt])
	var flags, pos []string
	rest := args[i+1:]
	dash := false
	for j := 0; j < len(rest); j++ {
		tok := rest[j]
		if tok == "--" {
			dash = true
			pos = append(pos, rest[j+1:]...)
			break
		}
		if !isFlag(tok) {
			pos = append(pos, tok)
			continue
		}
		if remote && len(pos) > maxPos {
			return nil, fmt.Errorf("flag %s after the command %q: put nodeexec's flags before the command and the command after --, e.g. %s %s [flags] -- %s",
				tok, pos[maxPos], app.Name, strings.Join(append([]string{cmd.Name}, pos[:maxPos]...), " "), strings.Join(append(pos[maxPos:], rest[j:]...), " "))
		}
		dst := &flags
		f, inline := lookup(append(slices.Clone(cmd.Flags), builtin...), tok)
		if f == nil {
			if g, gi := lookup(app.Flags, tok); g != nil {
				f, inline, dst = g, gi, &global
			}
		}
		*dst = append(*dst, tok)
		if takesValue(f, inline) && j+1 == len(rest) {
			// Moved, it would take the next argument as its value.
			if ex := valueExample(f); ex != "" {
				return nil, fmt.Errorf("%s needs a value: give %s", tok, ex)
			}
			return nil, fmt.Errorf("%s needs a value: see %s %s --help", tok, app.Name, cmd.Name)
		}
		if takesValue(f, inline) {
			*dst = append(*dst, rest[j+1])
			j++
		}
	}
	if cmd.Name == "shell" {
		if err := checkShellWords(pos, dash); err != nil {
			return nil, err
		}
	}
	out := append([]string{args[0]}, global...)
	out = append(out, args[cmdAt:i+1]...)
	out = append(out, flags...)
	if len(pos) > 0 || dash {
		out = append(out, "--")
	}
	return append(out, pos...), nil
}
