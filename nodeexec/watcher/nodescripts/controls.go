package nodescripts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Operator controls: rerun nodes, ignore nodes, and override the
// maintenance window, without editing the spec (none changes the spec hash).

// Limits of RunNow.
const (
	// DefaultRunNowFor is how long a run-now override lasts by default.
	DefaultRunNowFor = time.Hour
	// MaxRunNowFor is the longest run-now override: a week. An override
	// is for a rollout that cannot wait for its window; a NodeScript
	// that must run outside it for longer wants another spec.window.
	MaxRunNowFor = 7 * 24 * time.Hour
)

// Requester is who asks for an operator control, as the API server
// authenticates them.
type Requester struct {
	// User is the username a SelfSubjectReview (authentication.k8s.io/v1)
	// returns, or UnknownUser.
	User string
	// Unknown says why User is UnknownUser (the review was refused or is
	// not served, as before Kubernetes 1.28); empty otherwise.
	Unknown string
}

// WhoAmI asks the API server who the client is with a SelfSubjectReview
// (which every authenticated user may create). It never fails: when the
// review cannot be made, User is UnknownUser and Unknown says why.
func WhoAmI(ctx context.Context, client kubernetes.Interface) Requester {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	switch {
	case err != nil:
		return Requester{User: v1alpha1.UnknownUser, Unknown: fmt.Sprintf("SelfSubjectReview (authentication.k8s.io/v1) failed: %v", err)}
	case r.Status.UserInfo.Username == "":
		return Requester{User: v1alpha1.UnknownUser, Unknown: "SelfSubjectReview (authentication.k8s.io/v1) returned no username"}
	}
	return Requester{User: r.Status.UserInfo.Username}
}

// RerunResult is what Rerun asked for.
type RerunResult struct {
	// Hash is the spec hash the nodes run again.
	Hash string
	// Nodes are the nodes asked to run it again, by name.
	Nodes []string
}

// Rerun asks the watcher to run the current spec of NodeScript name again
// on the nodes targets name (Nodes), or on those it selects with a record of
// that spec among the nodes a label selector matches (Selector) or among
// all nodes (All): it sets RerunAnnotation to the spec hash on each node,
// and the watcher then forgets the node's record of that spec, so that the
// node runs it again (under the rollout's pace, pause and window; attempts
// keep counting, the retry limit starts again). A run in progress finishes
// first. Every node is checked before any is changed: a node that does not
// exist (nodeexec.ErrNodeNotFound), that the NodeScript does not select,
// or that has no record of the current spec (nothing to run again) is an
// error naming it; a selector matching no such node is
// nodeexec.ErrNoNodes. The API server then accepts every change in a
// dry-run before any is made. RBAC: get on nodescripts, list and patch on
// nodes.
func Rerun(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, name string, targets nodeexec.Targets) (*RerunResult, error) {
	if err := targets.Validate(); err != nil {
		return nil, err
	}
	if err := checkNodeNames(targets.Nodes); err != nil {
		return nil, err
	}
	ns, err := Get(ctx, dyn, name)
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("nodescript %q: spec.nodeSelector: %w", name, err)
	}
	hash := nodescript.CurrentHash(ns)
	target := labels.Everything()
	if targets.Selector != "" {
		target, _ = labels.Parse(targets.Selector) // validated
	}
	nodes, err := listNodes(ctx, client, target.String())
	if err != nil {
		return nil, err
	}
	// check says why node n cannot run ns's current spec again; "" when it can.
	check := func(n *corev1.Node) string {
		if !nodescript.SelectsNode(ns, sel, n) {
			return fmt.Sprintf("node %s is not selected by nodescript %s (spec.nodeSelector, spec.excludeNodes, or nodeexec ignore)", n.Name, name)
		}
		s, err := DecodeState(n.Annotations, name)
		switch {
		case err != nil:
			return fmt.Sprintf("node %s: %v", n.Name, err)
		case s.Hash != hash:
			return fmt.Sprintf("node %s has not run spec %s of nodescript %s yet: nothing to run again (it runs when the rollout reaches it)", n.Name, hash, name)
		}
		return ""
	}
	res := &RerunResult{Hash: hash}
	if len(targets.Nodes) > 0 {
		byName := map[string]*corev1.Node{}
		for _, n := range nodes {
			byName[n.Name] = n
		}
		var missing []string
		var errs []error
		for _, want := range targets.Nodes {
			n := byName[want]
			if n == nil {
				missing = append(missing, want)
			} else if why := check(n); why != "" {
				errs = append(errs, errors.New(why))
			} else if !slices.Contains(res.Nodes, n.Name) {
				res.Nodes = append(res.Nodes, n.Name)
			}
		}
		if len(missing) > 0 {
			errs = append([]error{fmt.Errorf("%w: %q (see `kubectl get nodes`)", nodeexec.ErrNodeNotFound, missing)}, errs...)
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	} else {
		for _, n := range nodes {
			if check(n) == "" {
				res.Nodes = append(res.Nodes, n.Name)
			}
		}
		if len(res.Nodes) == 0 {
			what := "no node"
			if targets.Selector != "" {
				what = fmt.Sprintf("label selector %q matched no node", targets.Selector)
			}
			return nil, fmt.Errorf("%w: %s that nodescript %s selects and that ran its spec %s", nodeexec.ErrNoNodes, what, name, hash)
		}
	}
	if err := patchNodeAnnotations(ctx, client, res.Nodes, RerunAnnotation(name), &hash); err != nil {
		return nil, err
	}
	return res, nil
}

// SetIgnored makes NodeScript name ignore the nodes named (ignore true) or
// stop ignoring them (false), without editing its spec: it sets or removes
// IgnoreAnnotation on each node, with who asked (WhoAmI) as the value. An
// ignored node is not selected, as if in spec.excludeNodes: it does not
// count in the rollout, nothing new starts there (a run in progress
// finishes and is recorded), and it loses the NodeScript's condition; its
// state is kept, so no longer ignored it runs only what it has not run.
// Every node must exist (nodeexec.ErrNodeNotFound names those that do
// not), a node to ignore must be one the NodeScript selects
// (spec.nodeSelector, spec.excludeNodes: an error names it and the
// selector), and the API server must accept every change in a dry-run
// before any is made. It returns who was recorded as asking. RBAC: get on nodescripts,
// get and patch on nodes; create on selfsubjectreviews (every
// authenticated user has it).
func SetIgnored(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, name string, nodes []string, ignore bool) (Requester, error) {
	if len(nodes) == 0 {
		return Requester{}, errors.New("no node named: name the nodes (--node)")
	}
	if err := checkNodeNames(nodes); err != nil {
		return Requester{}, err
	}
	ns, err := Get(ctx, dyn, name)
	if err != nil {
		return Requester{}, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector)
	if err != nil {
		return Requester{}, fmt.Errorf("nodescript %q: spec.nodeSelector: %w", name, err)
	}
	var (
		missing     []string
		notSelected []error
	)
	for _, n := range nodes {
		node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, n)
		case err != nil:
			return Requester{}, fmt.Errorf("node %s: %w", n, err)
		case ignore && !nodescript.Selects(&ns.Spec, sel, node.Name, node.Labels):
			notSelected = append(notSelected, fmt.Errorf("node %s is not selected by nodescript %s (spec.nodeSelector %q, spec.excludeNodes %q): there is nothing to ignore; name a node it selects",
				n, name, metav1.FormatLabelSelector(&ns.Spec.NodeSelector), ns.Spec.ExcludeNodes))
		}
	}
	if len(missing) > 0 {
		return Requester{}, fmt.Errorf("%w: %q (see `kubectl get nodes`)", nodeexec.ErrNodeNotFound, missing)
	}
	if len(notSelected) > 0 {
		return Requester{}, errors.Join(notSelected...)
	}
	var who Requester
	var value *string
	if ignore {
		who = WhoAmI(ctx, client)
		value = &who.User
	}
	return who, patchNodeAnnotations(ctx, client, slices.Compact(slices.Sorted(slices.Values(nodes))), IgnoreAnnotation(name), value)
}

// RunNowOptions say what RunNow does.
type RunNowOptions struct {
	// For is how long runs may start outside the maintenance window, from
	// now. Defaults to DefaultRunNowFor; must not be negative nor more
	// than MaxRunNowFor.
	For time.Duration
	// Cancel removes the override instead (For must then be 0).
	Cancel bool
	// Clock tells the time. Defaults to the real clock.
	Clock clock.PassiveClock
}

// RunNowResult is the override RunNow set.
type RunNowResult struct {
	// Until is when the override ends; zero when cancelled.
	Until time.Time
	// By is who was recorded as asking.
	By Requester
}

// RunNow lets the rollout of NodeScript name start runs outside its
// maintenance window (spec.window) for o.For from now: it sets
// AnnotationRunNow to the end of that time and AnnotationRunNowBy to who
// asked (WhoAmI); the watcher records both in an Event on the NodeScript
// and removes them once expired. With o.Cancel it removes them. Neither
// changes the spec hash. It refuses a NodeScript without spec.window
// (nothing to override), a paused one (the override does not lift a
// pause: nodeexec resume), and o.For beyond MaxRunNowFor. RBAC: get and
// patch on nodescripts; create on selfsubjectreviews.
func RunNow(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, name string, o RunNowOptions) (*RunNowResult, error) {
	switch {
	case o.For < 0:
		return nil, fmt.Errorf("RunNowOptions.For is %s: give a positive duration such as 1h, or 0 for the default %s", o.For, DefaultRunNowFor)
	case o.For > MaxRunNowFor:
		return nil, fmt.Errorf("RunNowOptions.For is %s: at most %s (MaxRunNowFor); to run outside the window for longer, change spec.window", o.For, MaxRunNowFor)
	case o.Cancel && o.For != 0:
		return nil, errors.New("RunNowOptions: Cancel removes the override; give For only to set one")
	}
	if o.For == 0 {
		o.For = DefaultRunNowFor
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	ns, err := Get(ctx, dyn, name)
	if err != nil {
		return nil, err
	}
	res := &RunNowResult{}
	ann := map[string]any{v1alpha1.AnnotationRunNow: nil, v1alpha1.AnnotationRunNowBy: nil}
	if !o.Cancel {
		switch {
		case ns.Spec.Window == nil:
			return nil, fmt.Errorf("nodescript %s has no spec.window: its runs start at any time, there is no maintenance window to override", name)
		case ns.Spec.Paused:
			return nil, fmt.Errorf("nodescript %s is paused (spec.paused): run-now overrides only the maintenance window; resume it first: nodeexec resume %s", name, name)
		}
		res.By = WhoAmI(ctx, client)
		res.Until = o.Clock.Now().Add(o.For).UTC().Truncate(time.Second)
		ann = map[string]any{v1alpha1.AnnotationRunNow: res.Until.Format(time.RFC3339), v1alpha1.AnnotationRunNowBy: res.By.User}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return nil, err
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec"}); err != nil {
		return nil, fmt.Errorf("nodescript %q: setting annotation %s: %w", name, v1alpha1.AnnotationRunNow, err)
	}
	return res, nil
}

// checkNodeNames refuses names that cannot be node names.
func checkNodeNames(nodes []string) error {
	for i, n := range nodes {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			return fmt.Errorf("Nodes[%d] %q: not a node name (%s)", i, n, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// listNodes lists the nodes matching the label selector, page by page.
func listNodes(ctx context.Context, client kubernetes.Interface, selector string) ([]*corev1.Node, error) {
	var out []*corev1.Node
	opts := metav1.ListOptions{LabelSelector: selector, Limit: 500}
	for {
		list, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}

// patchNodeAnnotations sets annotation key to *value on each node (nil
// removes it): all in a server-side dry-run first, so that a refusal
// (RBAC, admission) changes no node, then for real.
func patchNodeAnnotations(ctx context.Context, client kubernetes.Interface, nodes []string, key string, value *string) error {
	var v any
	if value != nil {
		v = *value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		return err
	}
	for _, dry := range []bool{true, false} {
		o := metav1.PatchOptions{FieldManager: "nodeexec"}
		if dry {
			o.DryRun = []string{metav1.DryRunAll}
		}
		for _, n := range nodes {
			if _, err := client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, o); err != nil {
				if dry {
					return fmt.Errorf("node %s: annotation %s refused (nothing changed): %w", n, key, err)
				}
				return fmt.Errorf("node %s: annotation %s: %w", n, key, err)
			}
		}
	}
	return nil
}
