package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nsenter"
)

// explainFlag is --explain, shared by run and shell.
func explainFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "explain", Usage: "print the pod the backend would create and why (profile, Pod Security level, RBAC, preflight result); create nothing"}
}

// preflightOptions describes backend b to the preflight checks: its RBAC
// (preflight.Requirements by name), the Pod Security level its pod needs and
// the variants that need less, and a dry-run create on node when b has one.
func preflightOptions(b nodeexec.Backend, client kubernetes.Interface, ns, node string) preflight.Options {
	if ns == "" {
		ns = debugpod.DefaultNamespace
	}
	o := preflight.Options{Client: client, Namespace: ns, Backend: b.Name()}
	if p, ok := b.(nodeexec.Preflighter); ok {
		o.DryRun = func(ctx context.Context) error { return p.Preflight(ctx, node) }
	}
	// A wrapper (the resident agents) falls back to the backend it wraps,
	// whose pod, namespace and Pod Security level are what may be created.
	b = unwrap(b)
	if e, ok := b.(*ephemeral.Backend); ok {
		// Its permissions apply in the target pod's namespace (--pod NS/NAME), not -n's.
		o.Namespace = e.Namespace()
	}
	if n, ok := b.(*nsenter.Backend); ok {
		o.Namespace = n.Namespace()
		o.Level = n.PodSecurityLevel()
	}
	if d, ok := b.(*debugpod.Backend); ok {
		o.Namespace = d.Namespace()
		o.Variant = "profile " + d.Profile()
		o.Level = d.PodSecurityLevel()
		o.AlternativeFlag = "--profile"
		o.Alternatives = map[string]string{}
		for _, p := range debugpod.Profiles() {
			if p != d.Profile() {
				o.Alternatives[p] = debugpod.PodSecurityLevel(p)
			}
		}
	}
	return o
}

// runPreflight checks, before anything is created, that the cluster will
// accept what b creates on node. With explain it prints the pod req would
// create and the checks and returns nil (the caller then stops); otherwise
// it returns the refusal (exit 2), or nil.
func runPreflight(ctx context.Context, w io.Writer, b nodeexec.Backend, client kubernetes.Interface, ns string, req nodeexec.Request, explain bool) error {
	report, err := preflight.Check(ctx, preflightOptions(b, client, ns, req.Node))
	if err != nil {
		return err
	}
	if !explain {
		return report.Err()
	}
	return printExplain(ctx, w, b, req, report)
}

// unwrap returns the backend that b wraps (through any number of
// wrappers), or b.
func unwrap(b nodeexec.Backend) nodeexec.Backend {
	for {
		u, ok := b.(interface{ Unwrap() nodeexec.Backend })
		if !ok {
			return b
		}
		b = u.Unwrap()
	}
}

// printExplain writes, as YAML comments, the backend, what its variant grants
// and needs and the preflight result, then the pod it would create.
func printExplain(ctx context.Context, w io.Writer, b nodeexec.Backend, req nodeexec.Request, report *preflight.Report) error {
	comment := func(format string, args ...any) {
		for _, line := range strings.Split(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
			fmt.Fprintln(w, strings.TrimRight("# "+line, " "))
		}
	}
	comment("nodeexec --explain: nothing was created.")
	comment("backend: %s", b.Name())
	if r, ok := b.(*resident.Backend); ok {
		node, argv, err := r.AgentCommand(ctx, req)
		if err != nil {
			comment("resident agents (namespace %s): not used for this request (%v): the pod below is created", r.Namespace(), err)
		} else {
			comment("resident agents (namespace %s): on node %s, when a ready agent runs there, the command runs over exec in it, no pod created:", r.Namespace(), node)
			comment("  %q", argv)
			comment("a node without a ready agent gets the wrapped backend's pod, below")
		}
	}
	b = unwrap(b)
	var perms []string
	for _, p := range report.Permissions {
		perms = append(perms, p.Permission.String())
	}
	if d, ok := b.(*debugpod.Backend); ok {
		comment("profile: %s: %s", d.Profile(), debugpod.ProfileGrants(d.Profile()))
		comment("pod security level needed: %s", d.PodSecurityLevel())
		comment("command (over exec, in the pod's container): %q", d.Argv(req))
	}
	comment("RBAC needed: %s", strings.Join(perms, ", "))
	comment("preflight on node %s:\n%s", req.Node, report.String())
	if n, ok := b.(*nsenter.Backend); ok {
		comment("pod security level needed: %s", n.PodSecurityLevel())
		comment("command (over exec, in the pod's container): %q", n.Argv(req))
	}
	d, ok := b.(interface {
		Pod(nodeexec.Request) (*corev1.Pod, error)
	})
	if !ok {
		comment("backend %s has no pod to show", b.Name())
		return nil
	}
	pod, err := d.Pod(req)
	if err != nil {
		return err
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	out, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "---")
	_, err = w.Write(out)
	return err
}
