package cli

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distribution/reference"
	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
	"github.com/nodeexec/nodeexec/internal/envflag"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// Checks of flag values that need no cluster: each error names the flag and
// says what to give instead. Commands call them before building a client,
// so bad input never reaches the API server.

// parseSecretEnv reads --env-from-secret values: NAME:KEY (the variable
// KEY from the Secret's key KEY) or NAME (every key of the Secret).
func parseSecretEnv(values []string) ([]nodeexec.SecretEnv, error) {
	var out []nodeexec.SecretEnv
	for _, v := range values {
		name, key, _ := strings.Cut(v, ":")
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return nil, fmt.Errorf("--env-from-secret %q: %q is not a valid Secret name (%s): give NAME or NAME:KEY", v, name, strings.Join(msgs, "; "))
		}
		if strings.Contains(v, ":") {
			if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
				return nil, fmt.Errorf("--env-from-secret %q: %q is not a valid Secret key (%s): give NAME:KEY, or NAME for every key", v, key, strings.Join(msgs, "; "))
			}
		}
		out = append(out, nodeexec.SecretEnv{Secret: name, Key: key})
	}
	return out, nil
}

// envName is what -e accepts as a variable name: letters, digits and _,
// not starting with a digit (POSIX's portable names, the ones a shell can
// expand).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseEnv reads -e values (envflag.Parse) and refuses names a shell
// cannot use and a variable given twice.
func parseEnv(kvs []string) (map[string]string, error) {
	env, err := envflag.Parse(kvs)
	if err != nil {
		return nil, err
	}
	first := map[string]string{}
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		if !envName.MatchString(k) {
			return nil, fmt.Errorf("--env %q: %q is not a valid variable name: use letters, digits and _, not starting with a digit (e.g. -e MY_VAR=1)", kv, k)
		}
		if prev, ok := first[k]; ok {
			return nil, fmt.Errorf("--env %q: %s is already set by -e %q: give each variable once", kv, k, prev)
		}
		first[k] = kv
	}
	return env, nil
}

// readScript reads --script FILE: a shell script, which runs as one
// argument of `sh -c`: not empty, text (no NUL byte, valid UTF-8) and at
// most nodeexec.MaxArgBytes long.
func readScript(f string) (string, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("cannot read --script file: %w", err)
	}
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("--script file %q is empty", f)
	case len(b) > nodeexec.MaxArgBytes:
		return "", fmt.Errorf("--script %q: %d bytes, too large, at most %d (128 KiB - 1): the script is one argument of sh -c and Linux refuses a longer one (E2BIG); ship the rest as a file the script fetches", f, len(b), nodeexec.MaxArgBytes)
	case bytes.IndexByte(b, 0) >= 0:
		return "", fmt.Errorf("--script %q: a binary file (NUL byte at %d), not a shell script: give a text script, or copy the binary to the node and run it with -- PATH", f, bytes.IndexByte(b, 0))
	case !utf8.Valid(b):
		return "", fmt.Errorf("--script %q: not text (invalid UTF-8), not a shell script: give a text script", f)
	}
	return string(b), nil
}

// checkRunTimeout refuses a --timeout (of run and shell) that is not
// positive, or longer than a pod may live (nodeexec.MaxTimeout).
func checkRunTimeout(c *ucli.Context, example string) error {
	if err := checkTimeoutFlag(c, "timeout", example); err != nil {
		return err
	}
	if d := c.Duration("timeout"); d > nodeexec.MaxTimeout {
		return timeoutTooLarge(d.String())
	}
	return nil
}

// timeoutTooLarge is the error for a --timeout of run or shell above
// nodeexec.MaxTimeout; val is the value as given.
func timeoutTooLarge(val string) error {
	return fmt.Errorf("--timeout %s: too large, at most %s (about 68 years: a pod's activeDeadlineSeconds limit)", val, nodeexec.MaxTimeout)
}

// checkImage validates an image reference with the distribution reference
// grammar (what the kubelet and container runtimes accept), e.g.
// busybox:1.36, registry.example:5000/team/tool@sha256:<64 hex>.
func checkImage(flag, ref string) error {
	if ref == "" {
		return fmt.Errorf("--%s is empty: give an image reference such as busybox:1.36", flag)
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("--%s %q: not a valid image reference (%v): give NAME[:TAG][@DIGEST], such as busybox:1.36", flag, ref, err)
	}
	// The grammar reads a first component with upper-case letters as a
	// registry host ("UPPER/x": host UPPER), which the node then fails to
	// reach, after the pod exists. A registry host has a '.' or a ':', or is
	// localhost; anything else is a repository name, which must be lower
	// case.
	if first, _, ok := strings.Cut(ref, "/"); ok && !strings.ContainsAny(first, ".:") && first != "localhost" && strings.ToLower(first) != first {
		return fmt.Errorf("--%s %q: not a valid image reference: repository name %q must be lowercase (a registry host has a '.' or a ':', or is localhost): give NAME[:TAG][@DIGEST], such as busybox:1.36", flag, ref, first)
	}
	return nil
}

// checkQPS: a number; negative disables client-side rate limiting; NaN and
// infinities are refused (client-go would spin or block).
func checkQPS(qps float64) error {
	if math.IsNaN(qps) || math.IsInf(qps, 0) {
		return fmt.Errorf("--qps %v: give a finite number of requests per second (e.g. 50), or a negative one to disable the limit", qps)
	}
	return nil
}

// checkNodeNames validates --node values (already split on commas): node
// names are DNS subdomains (kubectl get nodes lists them).
func checkNodeNames(c *ucli.Context, nodes []string) error {
	if c.IsSet("node") && len(nodes) == 0 {
		return fmt.Errorf("--node %q: no node name given: name a node (kubectl get nodes), or use --selector or --all", strings.Join(c.StringSlice("node"), ","))
	}
	for _, n := range nodes {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			return fmt.Errorf("--node %q: not a node name (%s): see kubectl get nodes", n, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// checkSelectorFlag refuses an explicitly empty --selector, which would
// otherwise read as "no target given".
func checkSelectorFlag(c *ucli.Context) error {
	if c.IsSet("selector") && strings.TrimSpace(c.String("selector")) == "" {
		return errors.New("--selector is empty: give a label selector such as pool=gpu, or --all for every node")
	}
	if sel := c.String("selector"); sel != "" {
		if _, err := labels.Parse(sel); err != nil {
			return fmt.Errorf("--selector %q: invalid label selector: %v (kubectl syntax, e.g. pool=gpu,zone!=a)", sel, err)
		}
	}
	return nil
}

// maxQuantityLen bounds a quantity flag's length; the longest real
// request is well under it (e.g. 0.000000001 or 9223372036854775807).
const maxQuantityLen = 64

// quantityExponent finds a quantity's decimal exponent ("1e3", "5E-2"),
// submatch 1 being its digits.
var quantityExponent = regexp.MustCompile(`[eE][+-]?([0-9]+)$`)

// parseQuantity reads a resource quantity flag such as --cpu-request 10m:
// Kubernetes quantity syntax, not negative.
func parseQuantity(flag, s string) (resource.Quantity, error) {
	// resource.ParseQuantity's time and memory grow with the size of a
	// decimal exponent (1e-999999999 takes minutes and gigabytes), so a
	// value no request could need is refused before it is parsed.
	if len(s) > maxQuantityLen {
		return resource.Quantity{}, fmt.Errorf("--%s: %d characters is too long for a quantity: give at most %d (e.g. 100m, 64Mi)", flag, len(s), maxQuantityLen)
	}
	if m := quantityExponent.FindStringSubmatch(s); m != nil && len(strings.TrimLeft(m[1], "0")) > 2 {
		return resource.Quantity{}, fmt.Errorf("--%s %q: exponent %s is out of range: give one between e-99 and e99, or a suffix (e.g. 100m, 64Mi)", flag, s, m[0])
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, fmt.Errorf("--%s %q: %w (e.g. 100m, 0.5, 64Mi, 1Gi)", flag, s, err)
	}
	if q.Sign() < 0 {
		return q, fmt.Errorf("--%s %q: is negative: give 0 or more (e.g. 100m, 64Mi)", flag, s)
	}
	// A value past what a Quantity holds exactly (above about 2^63 in its
	// canonical unit, e.g. 10000000E) is printed, and so sent to the API
	// server, as a different number: refuse it rather than ask for another.
	if again, err := resource.ParseQuantity(q.String()); err != nil || again.Cmp(q) != 0 {
		return q, fmt.Errorf("--%s %q: too large to be sent as given (it would be read as %s): give a smaller value (e.g. 100m, 64Mi)", flag, s, q.String())
	}
	return q, nil
}

// parseCountOrPercentFlag reads --batch or --max-errors values: a count
// (>= 1, or >= 0 when zeroOK) or a percentage (1% or 0% to 100%).
func parseCountOrPercentFlag(flag, s string, zeroOK bool) (intstr.IntOrString, error) {
	v, err := nodeexec.ParseCountOrPercent(s)
	if err != nil {
		return v, fmt.Errorf("--%s: %w", flag, err)
	}
	if err := nodeexec.CheckCountOrPercent(v, zeroOK); err != nil {
		return v, fmt.Errorf("--%s %q: %w", flag, s, err)
	}
	return v, nil
}

// checkDNSNames validates flags that name Kubernetes objects by DNS
// subdomain (priority classes, secrets).
func checkDNSNames(c *ucli.Context, flags ...string) error {
	for _, f := range flags {
		var vals []string
		if _, ok := lookupFlag(c, f).(*ucli.StringSliceFlag); ok {
			vals = c.StringSlice(f)
		} else if v := c.String(f); v != "" {
			vals = []string{v}
		}
		for _, v := range vals {
			if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
				return fmt.Errorf("--%s %q: not a valid object name (%s)", f, v, strings.Join(msgs, "; "))
			}
		}
	}
	return nil
}

// lookupFlag returns the flag named name of c's command, or nil.
func lookupFlag(c *ucli.Context, name string) ucli.Flag {
	if c.Command == nil {
		return nil
	}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// checkClientFlags validates the global client flags.
func checkClientFlags(c *ucli.Context) error {
	if err := checkQPS(c.Float64("qps")); err != nil {
		return err
	}
	if v := c.Int("v"); v < 0 {
		return fmt.Errorf("-v %d: give 0 or more (0: no logs, 1: pods created and deleted, 2: every exec attempt)", v)
	}
	if b := c.Int("burst"); b < 0 {
		return fmt.Errorf("--burst %d: give 0 or more (0 for the default %d)", b, nodeexec.DefaultBurst)
	}
	if ns := c.String("namespace"); ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return fmt.Errorf("--namespace %q: not a namespace name (%s)", ns, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// noArgs refuses positional arguments for commands that take none.
func noArgs(c *ucli.Context, hint string) error {
	if c.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments (got %q)%s", c.Command.Name, c.Args().Slice(), hint)
	}
	return nil
}

// checkTimeoutFlag refuses a zero or negative duration flag.
func checkTimeoutFlag(c *ucli.Context, flag, example string) error {
	if d := c.Duration(flag); d <= 0 {
		return fmt.Errorf("--%s %s: give a positive duration such as %s", flag, d, example)
	}
	return nil
}

// checkResidentFlags validates the flags of agent install (install true)
// and agent uninstall.
func checkResidentFlags(c *ucli.Context, install bool) error {
	if err := noArgs(c, ""); err != nil {
		return err
	}
	if err := checkTimeoutFlag(c, "timeout", "2m"); err != nil {
		return err
	}
	if msgs := validation.IsDNS1123Label(c.String("namespace")); len(msgs) > 0 {
		return fmt.Errorf("--namespace %q: not a namespace name (%s)", c.String("namespace"), strings.Join(msgs, "; "))
	}
	if !install {
		return nil
	}
	if err := checkImage("agent-image", c.String("agent-image")); err != nil {
		return err
	}
	switch p := c.String("image-pull-policy"); p {
	case "Always", "IfNotPresent", "Never":
	default:
		return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", p)
	}
	return checkDNSNames(c, "image-pull-secret", "priority-class")
}

// envOr is the environment variable name when it is set and not empty,
// else def: an exported-but-empty NODEEXEC_IMAGE means "not set", while
// --image ” is refused (checkImage).
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// onUsageError replaces urfave/cli's handling of a command line the flag
// package cannot parse (the message, then the command's help, on stdout)
// with one error naming the flag and what to give instead, which Run prints
// on stderr with exit status 2.
func onUsageError(c *ucli.Context, err error, _ bool) error {
	var flags []ucli.Flag
	help := c.App.Name
	if c.Command != nil {
		flags = c.Command.Flags
		if c.Command.HelpName != "" {
			help = c.Command.HelpName
		}
	}
	return flagParseError(flags, help, err)
}

// flagParseError rewrites an error of the flag package (which urfave/cli
// parses with) for the flags of one command; help is that command's name,
// for "see ... --help". Errors it does not recognise are returned as they
// are.
func flagParseError(flags []ucli.Flag, help string, err error) error {
	msg := err.Error()
	// dashed spells a flag name the way the help does: -n, --timeout.
	dashed := func(name string) string {
		name = strings.TrimLeft(name, "-")
		if len(name) == 1 {
			return "-" + name
		}
		return "--" + name
	}
	find := func(name string) ucli.Flag {
		name = strings.TrimLeft(name, "-")
		for _, f := range flags {
			if slices.Contains(f.Names(), name) {
				return f
			}
		}
		return nil
	}
	// The flag package's messages, as of Go 1.21 to 1.25.
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return fmt.Errorf("unknown flag %s: see %s --help for the flags it takes", dashed(name), help)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		if ex := valueExample(find(name)); ex != "" {
			return fmt.Errorf("%s needs a value: give %s", dashed(name), ex)
		}
		return fmt.Errorf("%s needs a value: see %s --help", dashed(name), help)
	}
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		// invalid boolean value "maybe" for -all: parse error
		val, name, _ := strings.Cut(rest, " for ")
		name, _, _ = strings.Cut(name, ":")
		return fmt.Errorf("%s=%s: want true or false (or %s alone for true)", dashed(name), strings.Trim(val, `"`), dashed(name))
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "soon" for flag -timeout: parse error
		i := strings.LastIndex(rest, " for flag ")
		if i < 0 {
			return err
		}
		val := rest[:i]
		name, reason, _ := strings.Cut(rest[i+len(" for flag "):], ": ")
		f := find(name)
		what := "not a valid value"
		if isDurationFlag(f) && durationcheck.Overflows(strings.Trim(val, `"`)) {
			if strings.TrimLeft(name, "-") == "timeout" && (strings.HasSuffix(help, " run") || strings.HasSuffix(help, " shell")) {
				return timeoutTooLarge(strings.Trim(val, `"`))
			}
			return fmt.Errorf("%s %s: too large, at most %s", dashed(name), val, time.Duration(math.MaxInt64))
		}
		switch {
		case strings.Contains(reason, "out of range"):
			what = "out of range"
		case isDurationFlag(f):
			what = "not a duration"
		case isIntFlag(f):
			what = "not a whole number"
		case isFloatFlag(f):
			what = "not a number"
		case reason != "" && reason != "parse error":
			what = reason
		}
		if ex := valueExample(f); ex != "" {
			return fmt.Errorf("%s %s: %s: give %s", dashed(name), val, what, ex)
		}
		return fmt.Errorf("%s %s: %s: see %s --help", dashed(name), val, what, help)
	}
	return err
}

func isDurationFlag(f ucli.Flag) bool {
	_, ok := f.(*ucli.DurationFlag)
	return ok
}

func isIntFlag(f ucli.Flag) bool {
	switch f.(type) {
	case *ucli.IntFlag, *ucli.Int64Flag, *ucli.UintFlag, *ucli.Uint64Flag:
		return true
	}
	return false
}

func isFloatFlag(f ucli.Flag) bool {
	_, ok := f.(*ucli.Float64Flag)
	return ok
}

// valueExample says what a flag's value looks like, by the flag's type
// ("" for types whose values have no one shape, such as strings).
func valueExample(f ucli.Flag) string {
	switch {
	case isDurationFlag(f):
		return "a duration such as 30s, 5m or 1h30m"
	case isIntFlag(f):
		return "a whole number such as 10"
	case isFloatFlag(f):
		return "a number such as 50 or 0.5"
	}
	return ""
}

// setOnUsageError gives every command (and subcommand) without its own
// OnUsageError handler onUsageError: urfave/cli does not pass the app's
// handler down to commands.
func setOnUsageError(cmds []*ucli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		setOnUsageError(c.Subcommands)
	}
}
