package nodescripts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// ParseNodeScripts reads one or more NodeScripts from YAML or JSON
// documents (separated by ---), strictly: a kind other than NodeScript or
// an apiVersion other than nodeexec.io/v1alpha1 (checked first), an
// unknown field, or a name another document has too is an error naming the
// document(s). Each is then checked with v1alpha1.Validate;
// all errors of all documents are returned together, so that nothing is
// applied when any is wrong.
func ParseNodeScripts(r io.Reader) ([]*v1alpha1.NodeScript, error) {
	return parseDocuments(r, nil, nil)
}

// parseDocuments is ParseNodeScripts; with budgets set, MaintenanceBudget
// documents are accepted too and added to it (parseBudget).
// With calendars set, MaintenanceCalendar documents go there (parseCalendar).
func parseDocuments(r io.Reader, budgets *[]*v1alpha1.MaintenanceBudget, calendars *[]*v1alpha1.MaintenanceCalendar) ([]*v1alpha1.NodeScript, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var (
		out   []*v1alpha1.NodeScript
		errs  []error
		docOf = map[string]int{} // the document of each name seen
	)
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		// The kind first: a ConfigMap's fields are not unknown NodeScript
		// fields, it is the wrong kind of document.
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		if budgets != nil && tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "MaintenanceBudget" {
			errs = append(errs, parseBudget(i, doc, budgets)...)
			continue
		}
		if calendars != nil && tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "MaintenanceCalendar" {
			errs = append(errs, parseCalendar(i, doc, calendars)...)
			continue
		}
		if tm.APIVersion != v1alpha1.GroupVersion.String() || tm.Kind != "NodeScript" {
			errs = append(errs, fmt.Errorf("document %d: apiVersion %q kind %q: want apiVersion %s, kind NodeScript", i, tm.APIVersion, tm.Kind, v1alpha1.GroupVersion))
			continue
		}
		if fe := v1alpha1.ValidateDurationSyntax(doc); len(fe) > 0 {
			errs = append(errs, fmt.Errorf("document %d: %w", i, fe.ToAggregate()))
			continue
		}
		ns := &v1alpha1.NodeScript{}
		if err := yaml.UnmarshalStrict(doc, ns); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		if ns.Name == "" {
			errs = append(errs, fmt.Errorf("document %d: metadata.name: Required value: name the NodeScript", i))
			continue
		}
		if j, dup := docOf[ns.Name]; dup {
			errs = append(errs, fmt.Errorf("documents %d and %d: both are NodeScript %q: give each its own metadata.name, or keep one of them", j, i, ns.Name))
			continue
		}
		docOf[ns.Name] = i
		if fe := v1alpha1.Validate(ns); len(fe) > 0 {
			errs = append(errs, fmt.Errorf("nodescript %q: %w", ns.Name, fe.ToAggregate()))
			continue
		}
		out = append(out, ns)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 && (budgets == nil || len(*budgets) == 0) && (calendars == nil || len(*calendars) == 0) {
		return nil, errors.New("no NodeScript found in the input")
	}
	return out, nil
}

// Apply creates or updates each NodeScript with server-side apply (field
// manager "nodeexec"), after validating all of them (v1alpha1.Validate)
// and asking the API server to accept all of them (a server-side dry-run,
// which checks the CRD's OpenAPI and CEL rules), so that nothing is applied
// when any is refused. It returns "created", "configured" or "unchanged"
// per NodeScript. Two scripts of one name are refused. RBAC: get, patch on
// nodescripts. ErrCRDNotInstalled when the API server does not serve them.
func Apply(ctx context.Context, dyn dynamic.Interface, scripts []*v1alpha1.NodeScript) ([]string, error) {
	res := dyn.Resource(v1alpha1.Resource)
	objs := make([]*unstructured.Unstructured, len(scripts))
	for i, ns := range scripts {
		if fe := v1alpha1.Validate(ns); len(fe) > 0 {
			return nil, fmt.Errorf("nodescript %q: %w", ns.Name, fe.ToAggregate())
		}
		if j := slices.IndexFunc(scripts[:i], func(o *v1alpha1.NodeScript) bool { return o.Name == ns.Name }); j >= 0 {
			return nil, fmt.Errorf("nodescript %q: scripts[%d] and scripts[%d] have that name: give each its own, or apply one of them", ns.Name, j, i)
		}
		cp := ns.DeepCopy()
		cp.Status = v1alpha1.NodeScriptStatus{}
		cp.APIVersion, cp.Kind = v1alpha1.GroupVersion.String(), "NodeScript"
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		objs[i] = u
	}
	var errs []error
	for _, u := range objs {
		dry := metav1.ApplyOptions{FieldManager: "nodeexec", Force: true, DryRun: []string{metav1.DryRunAll}}
		if _, err := res.Apply(ctx, u.GetName(), u, dry); err != nil {
			if nodescript.CRDMissing(err) {
				return nil, fmt.Errorf("%w (%v)", ErrCRDNotInstalled, err)
			}
			errs = append(errs, fmt.Errorf("nodescript %q refused by the API server: %w", u.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := make([]string, len(objs))
	for i, u := range objs {
		var err error
		if out[i], err = applyOne(ctx, res, "nodescript", u); err != nil {
			return out[:i], err
		}
	}
	return out, nil
}

// applyChecked applies objs, cluster-scoped objects of kind (lowercase, as
// errors name it; Kind as the CRD names it, its resource res), with
// server-side apply (field manager "nodeexec") once a server-side dry run
// of every one passed (the CRD's schema and CEL rules), so that nothing is
// applied when any is refused; with dryRun, only the checks. It returns
// "created", "configured" or "unchanged" per object ("checked" with
// dryRun). Errors: the CRD missing (with the command that installs it),
// every refusal joined, or the first failed apply (with the results
// before it). RBAC: get, patch on res.
func applyChecked(ctx context.Context, res dynamic.ResourceInterface, kind, Kind string, objs []*unstructured.Unstructured, dryRun bool) ([]string, error) {
	var errs []error
	for _, u := range objs {
		if _, err := res.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec", Force: true, DryRun: []string{metav1.DryRunAll}}); err != nil {
			if nodescript.CRDMissing(err) {
				return nil, fmt.Errorf("the %s CRD (%ss.nodeexec.io) is not installed: kubectl apply -f deploy/crd/ (%w)", Kind, kind, err)
			}
			errs = append(errs, fmt.Errorf("%s %q refused by the API server: %w", kind, u.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := make([]string, len(objs))
	for i, u := range objs {
		if dryRun {
			out[i] = "checked"
			continue
		}
		var err error
		if out[i], err = applyOne(ctx, res, kind, u); err != nil {
			return out[:i], err
		}
	}
	return out, nil
}

// applyOne applies u with server-side apply (field manager nodeexec,
// forced) and says what it did: "created", "configured" or "unchanged"
// (the resourceVersion did not move). kind names u in errors. RBAC: get
// and patch on u's resource.
func applyOne(ctx context.Context, res dynamic.ResourceInterface, kind string, u *unstructured.Unstructured) (string, error) {
	before, err := res.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%s %q: %w", kind, u.GetName(), err)
	}
	after, err := res.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec", Force: true})
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", kind, u.GetName(), err)
	}
	switch {
	case before == nil:
		return "created", nil
	case before.GetResourceVersion() == after.GetResourceVersion():
		return "unchanged", nil
	}
	return "configured", nil
}

// Promote sets spec.rollout.promoteTo of a NodeScript with Manual
// promotion to "all" or a label selector, so that the nodes beyond the
// canaries it selects may run. It refuses a halted rollout
// (v1alpha1.ValidatePromotion), a NodeScript whose promotion is Automatic,
// and an invalid selector. The patch carries the resourceVersion read, so a
// concurrent change makes it fail rather than be overwritten. RBAC: get,
// patch on nodescripts.
func Promote(ctx context.Context, dyn dynamic.Interface, name, to string) (*v1alpha1.NodeScript, error) {
	ns, err := Get(ctx, dyn, name)
	if err != nil {
		return nil, err
	}
	if err := v1alpha1.ValidatePromotion(ns, to); err != nil {
		return nil, err
	}
	if ns.Spec.Rollout.Promotion != v1alpha1.PromotionManual {
		return nil, fmt.Errorf("nodescript %q promotes automatically (spec.rollout.promotion is %q): promote applies to promotion: Manual", name, nodescript.CmpOr(ns.Spec.Rollout.Promotion, v1alpha1.PromotionAutomatic))
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": ns.ResourceVersion},
		"spec":     map[string]any{"rollout": map[string]any{"promoteTo": to}},
	})
	u, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec"})
	if err != nil {
		return nil, fmt.Errorf("promoting nodescript %q: %w", name, err)
	}
	return nodescript.ToNodeScript(u)
}

// SetPaused sets spec.paused of NodeScript name: paused, nothing new starts
// on any node (runs in progress finish); resumed, the rollout goes on where
// it stopped. Neither changes the spec hash, so no node runs again. RBAC:
// patch on nodescripts.
func SetPaused(ctx context.Context, dyn dynamic.Interface, name string, paused bool) (*v1alpha1.NodeScript, error) {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"paused": paused}})
	u, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec"})
	if err != nil {
		if nodescript.CRDMissing(err) {
			return nil, fmt.Errorf("%w (%v)", ErrCRDNotInstalled, err)
		}
		return nil, fmt.Errorf("nodescript %q: setting spec.paused: %w", name, err)
	}
	return nodescript.ToNodeScript(u)
}

// NodeReport is one node's line in a Report.
type NodeReport struct {
	Node string `json:"node"`
	// Selected is whether the NodeScript's selector (and exclusions) select the node now.
	Selected bool `json:"selected"`
	// Current is whether State refers to the current spec hash.
	Current bool      `json:"current"`
	State   NodeState `json:"state"`
	// Ignored is set when the node carries the NodeScript's
	// IgnoreAnnotation (nodeexec ignore): it is then not Selected.
	// IgnoredBy is the annotation's value, who asked.
	Ignored   bool   `json:"ignored,omitempty"`
	IgnoredBy string `json:"ignoredBy,omitempty"`
	// Rerun is the spec hash of a rerun request (nodeexec rerun) the
	// watcher has not applied yet; empty without one.
	Rerun string `json:"rerun,omitempty"`
	// Condition is the NodeScript's condition on the node (ConditionType), nil without one.
	Condition *corev1.NodeCondition `json:"condition,omitempty"`
	// Output is the node's output record (spec.recordOutput): per action
	// (run, verify, rollback), the redacted end of its last output. Nil
	// without a record.
	Output map[string]string `json:"output,omitempty"`
	// Awaiting says what the node waits for under spec.hooks.beforeRun or
	// afterRun (AwaitingAnnotations), e.g. `before-run: example.com/ok
	// not yet "true"`; empty when it waits for nothing.
	Awaiting string `json:"awaiting,omitempty"`
}

// Report is a NodeScript with the state of each node that is selected,
// ignored, or has a state for it.
type Report struct {
	NodeScript *v1alpha1.NodeScript `json:"nodeScript"`
	Nodes      []NodeReport         `json:"nodes"`
	// RunsError says why the run pods could not be listed (for example,
	// no right to list pods in the run namespace): a node whose run is
	// going then shows the state before it. Empty otherwise.
	RunsError string `json:"runsError,omitempty"`
	// OutputError says why the output records could not be read (with
	// spec.recordOutput set): for example, no right to list ConfigMaps in
	// the run namespace. Empty otherwise.
	OutputError string `json:"outputError,omitempty"`
	// Budget is spec.maintenanceBudget's MaintenanceBudget, nil without
	// one; BudgetError says why it could not be read.
	Budget      *v1alpha1.MaintenanceBudget `json:"budget,omitempty"`
	BudgetError string                      `json:"budgetError,omitempty"`
}

// Status reads a NodeScript and every node's state for it (one list of
// nodes) and, when spec.recordOutput is set, the output records (one list
// of ConfigMaps in the run namespace; a refusal is reported in
// Report.OutputError, not as an error), and the check and run pods going
// (one list of pods in the run namespace; the pod is a run's record while
// it goes, see WithRunPod; a refusal is reported in Report.RunsError). RBAC:
// get on nodescripts, list on nodes, list on pods and configmaps in the run
// namespace.
func Status(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, name string) (*Report, error) {
	ns, err := Get(ctx, dyn, name)
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.nodeSelector: %w", err)
	}
	hash := nodescript.CurrentHash(ns)
	rep := &Report{NodeScript: ns}
	rep.Budget, rep.BudgetError = reportBudget(ctx, dyn, ns)
	var records []corev1.ConfigMap
	if ns.Spec.RecordOutput {
		l, err := client.CoreV1().ConfigMaps(nodescript.RunNamespace(&ns.Spec)).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + name})
		if err != nil {
			rep.OutputError = fmt.Sprintf("output records in namespace %s: %v", nodescript.RunNamespace(&ns.Spec), err)
		} else {
			records = l.Items
		}
	}
	going, err := nodescript.GoingRuns(ctx, client, ns)
	if err != nil {
		rep.RunsError = err.Error()
	}
	var cont string
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for i := range list.Items {
			n := &list.Items[i]
			_, has := n.Annotations[StateAnnotation(name)]
			by, isIgnored := n.Annotations[IgnoreAnnotation(name)]
			isSel := nodescript.SelectsNode(ns, sel, n)
			if !has && !isSel && !isIgnored {
				continue
			}
			s, err := DecodeState(n.Annotations, name)
			if err != nil {
				s = NodeState{Phase: "Unknown", Reason: err.Error()}
			} else {
				s = WithRunPod(s, going[n.Name])
			}
			rep.Nodes = append(rep.Nodes, NodeReport{
				Node: n.Name, Selected: isSel, Current: s.Hash == hash, State: s, Output: nodescript.OutputOf(records, n.Name),
				Ignored: isIgnored, IgnoredBy: by, Rerun: n.Annotations[RerunAnnotation(name)], Condition: nodescript.FindCondition(n, nodescript.ConditionType(name)),
				Awaiting: nodescript.AwaitingAnnotations(ns, s, n.Annotations, n.Labels),
			})
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	slices.SortFunc(rep.Nodes, func(a, b NodeReport) int { return strings.Compare(a.Node, b.Node) })
	return rep, nil
}

// WithRunPod is a node's state s, as its annotation records it, seen with
// pod, the node's check or run pod that has not finished (nil: none). The
// pod is the record of a run while it goes, and the annotation is written
// when it has finished: a pod s does not name yet makes the node Running
// with the pod's spec hash, attempt, start and boot ID. It is a pure
// function.
func WithRunPod(s NodeState, pod *corev1.Pod) NodeState {
	if pod == nil || s.Pod == pod.Name {
		return s
	}
	return nodescript.RunningState(s, pod)
}
