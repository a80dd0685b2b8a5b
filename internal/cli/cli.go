// Package cli is the nodeexec command line: urfave/cli flags mapped one to one
// onto library options, then one library call. All printing happens here.
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Streams are the process's standard streams.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// exitCoder carries a process exit code out of an Action without printing.
type exitCoder struct{ code int }

func (e exitCoder) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Run runs the command line args (args[0] is the program name) and returns
// the process exit code: 0 on success; for `run` on one node, that node's exit
// code (124 on timeout, 125 when its outcome was lost); on several nodes, 1 if
// any failed; 2 for bad usage or a run that could not start.
func Run(ctx context.Context, streams Streams, args []string) int {
	app := newApp(streams)
	err := app.RunContext(ctx, permuteArgs(app, args))
	var ec exitCoder
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.code
	default:
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return 2
	}
}

func newApp(streams Streams) *ucli.App {
	name := filepath.Base(os.Args[0])
	if strings.HasPrefix(name, "kubectl-") {
		name = "kubectl " + strings.TrimPrefix(name, "kubectl-")
	}
	return &ucli.App{
		Name:      name,
		Usage:     "run commands and scripts on Kubernetes nodes",
		Reader:    streams.In,
		Writer:    streams.Out,
		ErrWriter: streams.ErrOut,
		// Errors are printed by Run, once.
		ExitErrHandler:       func(*ucli.Context, error) {},
		EnableBashCompletion: true,
		HideVersion:          true, // --version is versionFlag: urfave's own would take -v, our verbosity
		Flags:                append(clientFlags(), versionFlag()),
		Action:               rootAction(streams),
		Commands: []*ucli.Command{runCommand(streams), shellCommand(streams), gcCommand(streams),
			applyCommand(streams), statusCommand(streams), promoteCommand(streams), watchCommand(streams),
			imageCommand(streams), agentCommand(streams, agentExtraCommands(streams)...),
			versionCommand(streams), completionCommand(streams)},
	}
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

// interspersedCommands accept flags after their positional arguments, as
// kubectl does (`nodeexec promote NAME --to all`); urfave/cli stops at the
// first argument, so permuteArgs moves their flags first.
var interspersedCommands = []string{"apply", "status", "promote", "watch", "gc"}

// permuteArgs returns args (args[0] the program) with the flags of an
// interspersedCommands command moved before its positional arguments.
// A flag's value is kept with it; "--" ends the flags.
func permuteArgs(app *ucli.App, args []string) []string {
	takesValue := func(flags []ucli.Flag, tok string) bool {
		name := strings.TrimLeft(tok, "-")
		if strings.Contains(name, "=") {
			return false
		}
		for _, f := range flags {
			for _, n := range f.Names() {
				if n == name {
					_, isBool := f.(*ucli.BoolFlag)
					return !isBool
				}
			}
		}
		return false
	}
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		if takesValue(app.Flags, args[i]) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil || !slices.Contains(interspersedCommands, cmd.Name) {
		return args
	}
	var flags, pos []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		tok := rest[j]
		if tok == "--" {
			pos = append(pos, rest[j:]...)
			break
		}
		if strings.HasPrefix(tok, "-") && tok != "-" {
			flags = append(flags, tok)
			if takesValue(cmd.Flags, tok) && j+1 < len(rest) {
				flags = append(flags, rest[j+1])
				j++
			}
			continue
		}
		pos = append(pos, tok)
	}
	out := append(slices.Clone(args[:i+1]), flags...)
	return append(out, pos...)
}
