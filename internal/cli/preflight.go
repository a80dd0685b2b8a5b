package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// preflightOptions is preflight.For(b): b's (or the backend it wraps)
// Requirements and dry-run, in ns when b declares no namespace.
func preflightOptions(b nodeexec.Backend, client kubernetes.Interface, ns, node string) preflight.Options {
	o := preflight.For(b, client, node)
	if o.Namespace == "" {
		o.Namespace = cmp.Or(ns, debugpod.DefaultNamespace)
	}
	return o
}

// runPreflight checks, before anything is created, that the cluster will
// accept what b creates on node. With explain it prints the pod req would
// create and the checks and returns nil (the caller then stops); otherwise
// it returns the refusal (exit 2), or nil. Callers skip it for a backend
// that creates nothing on the node (skipPreflight). images are --explain's
// lines on which image each target node gets (platformCheck).
func runPreflight(ctx context.Context, w io.Writer, b nodeexec.Backend, client kubernetes.Interface, ns string, req nodeexec.Request, explain bool, images ...string) error {
	o := preflightOptions(b, client, ns, req.Node)
	o.Secrets = req.SecretEnv
	report, err := preflight.Check(ctx, o)
	if err != nil {
		return err
	}
	if apierrors.IsNotFound(report.NamespaceErr) && o.Namespace == ns {
		return fmt.Errorf("-n/--namespace %q: namespace not found: create it (kubectl create namespace %s) or give an existing one with -n", ns, ns)
	}
	if !explain {
		return report.Err()
	}
	return printExplain(ctx, w, b, req, report, images)
}

// printExplain writes, as YAML comments, the backend, what its variant grants
// and needs and the preflight result, then the pod it would create.
func printExplain(ctx context.Context, w io.Writer, b nodeexec.Backend, req nodeexec.Request, report *preflight.Report, images []string) error {
	comment := func(format string, args ...any) {
		for _, line := range strings.Split(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
			fmt.Fprintln(w, strings.TrimRight("# "+line, " "))
		}
	}
	comment("nodeexec --explain: nothing was created.")
	comment("backend: %s", b.Name())
	if e, ok := nodeexec.As[nodeexec.Explainer](b); ok {
		for _, line := range e.Explain(ctx, req) {
			comment("%s", line)
		}
	}
	var perms []string
	for _, p := range report.Permissions {
		perms = append(perms, p.Permission.String())
	}
	if r, ok := nodeexec.As[nodeexec.Requirer](b); ok {
		req := r.Requirements()
		if req.Variant != "" {
			comment("%s: %s: %s", req.VariantKind, req.Variant, req.Grants)
		}
		if req.PodSecurityLevel != "" {
			comment("pod security level needed: %s", req.PodSecurityLevel)
		}
	}
	if c, ok := nodeexec.As[nodeexec.CommandDescriber](b); ok {
		comment("command (over exec, in the pod's container): %q", c.Argv(req))
	}
	comment("RBAC needed: %s", strings.Join(perms, ", "))
	comment("preflight on node %s:\n%s", req.Node, report.String())
	for _, line := range images {
		comment("%s", line)
	}
	d, ok := nodeexec.As[nodeexec.PodDescriber](b)
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

// skipPreflight reports whether b creates nothing on node that a preflight
// would check (nodeexec.PreflightSkipper: a resident agent runs there): the
// API server authorises the run's own request.
func skipPreflight(ctx context.Context, b nodeexec.Backend, node string) bool {
	s, ok := nodeexec.As[nodeexec.PreflightSkipper](b)
	return ok && s.SkipPreflight(ctx, node)
}

// checkCluster checks, before anything is created, what the API server or
// the kubelet would refuse only after a pod was: a --priority-class that
// does not exist, and --cpu-request or --memory-request above a target
// node's allocatable (the kubelet's OutOfcpu, OutOfmemory). A backend
// that creates no pod of its own (backends.Entry.OwnPod: ephemeral's
// containers) takes neither.
func checkCluster(c *ucli.Context, client kubernetes.Interface, nodes []*corev1.Node) error {
	if e, ok := backends.Lookup(backendName(c)); ok && !e.OwnPod {
		return nil
	}
	if err := checkPriorityClass(c.Context, client, c.String("priority-class")); err != nil {
		return err
	}
	reqs, err := requests(c)
	if err != nil {
		return err
	}
	var tl *preflight.RequestTooLargeError
	if err := preflight.CheckRequests(nodes, reqs); errors.As(err, &tl) {
		flag := "--cpu-request"
		if tl.Resource == corev1.ResourceMemory {
			flag = "--memory-request"
		}
		return fmt.Errorf("%s %s: %w: give at most %s", flag, c.String(strings.TrimPrefix(flag, "--")), err, tl.Allocatable.String())
	} else if err != nil {
		return err
	}
	return nil
}

// checkPriorityClass refuses a --priority-class that does not exist (the
// API server's Priority admission would refuse the pod, as "forbidden"),
// listing the ones that do. A class that cannot be read (RBAC) is left to
// the API server.
func checkPriorityClass(ctx context.Context, client kubernetes.Interface, name string) error {
	if name == "" {
		return nil
	}
	_, err := client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return nil
	}
	exist := ""
	if list, err := client.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{}); err == nil {
		var names []string
		for _, pc := range list.Items {
			names = append(names, pc.Name)
		}
		slices.Sort(names)
		exist = " (there are: " + strings.Join(names, ", ") + ")"
	}
	return fmt.Errorf("--priority-class %q: the PriorityClass does not exist: give one that does%s, or leave the flag out", name, exist)
}
