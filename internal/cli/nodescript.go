package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
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
