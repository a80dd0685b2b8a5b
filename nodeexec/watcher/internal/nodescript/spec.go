package nodescript

import (
	"crypto/sha256"
	"encoding/hex"
	"k8s.io/apimachinery/pkg/util/validation"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// What the controller and the client verbs both read of a NodeScript and a
// node: the spec hash, selection, names, and what a node waits for.

// RunningState is the state of a node whose state was prev while its run
// or check pod goes: Running, with the pod's spec hash (run ID), attempt,
// creation time and boot ID; the attempts before a rerun and the watcher's
// cordon carried over from prev. The pod is the record of a run while it
// goes: this state is kept in memory (Watcher.note), not written, and read
// back from the pod after a restart (adopt) and by Status. It is a pure
// function.
func RunningState(prev NodeState, pod *corev1.Pod) NodeState {
	hash := pod.Labels[nodeexec.LabelRunID]
	attempt, _ := strconv.Atoi(pod.Annotations[v1alpha1.AnnotationAttempt])
	return NodeState{
		Hash: hash, Phase: v1alpha1.PhaseRunning, Attempts: attempt, AttemptsBefore: AttemptsBefore(prev, hash), Since: pod.CreationTimestamp.Time,
		Pod: pod.Name, BootID: StartBootID(pod, prev), CordonedByUs: prev.CordonedByUs, Cordoned: prev.Cordoned && prev.CordonedByUs,
		Silences: prev.Silences,
	}
}

// AttemptsBefore is s's AttemptsBefore when s is a record of hash, else 0.
func AttemptsBefore(s NodeState, hash string) int {
	if s.Hash != hash {
		return 0
	}
	return s.AttemptsBefore
}

// StartBootID is the boot ID run pod was created on: its v1alpha1.AnnotationBootID,
// else (a pod created before the annotation) the one recorded in s when s
// names the pod; "" when unknown.
func StartBootID(pod *corev1.Pod, s NodeState) string {
	if b := pod.Annotations[v1alpha1.AnnotationBootID]; b != "" {
		return b
	}
	if s.Pod == pod.Name {
		return s.BootID
	}
	return ""
}

// Selects reports whether the spec Selects the node named name with
// labels: sel (the spec's parsed nodeSelector) matches and the node is not
// excluded.
func Selects(s *v1alpha1.NodeScriptSpec, sel labels.Selector, name string, nodeLabels map[string]string) bool {
	return !slices.Contains(s.ExcludeNodes, name) && sel.Matches(labels.Set(nodeLabels))
}

// SelectsNode reports whether NodeScript ns (sel its parsed nodeSelector)
// Selects node n: Selects, and n does not carry ns's IgnoreAnnotation.
func SelectsNode(ns *v1alpha1.NodeScript, sel labels.Selector, n *corev1.Node) bool {
	return !Ignored(n, ns.Name) && Selects(&ns.Spec, sel, n.Name, n.Labels)
}

// Ignored reports whether node n carries NodeScript name's IgnoreAnnotation.
func Ignored(n *corev1.Node, name string) bool {
	if len(n.Annotations) == 0 {
		return false
	}
	// IgnoreAnnotation(name), built on the stack: a reconcile asks this of
	// every node, and m[string(b)] does not allocate.
	var buf [128]byte
	_, ok := n.Annotations[string(AppendIgnoreAnnotation(buf[:0], name))]
	return ok
}

// OutputOf is node's output record's data in records, by the node
// annotation (nil when it has none).
func OutputOf(records []corev1.ConfigMap, node string) map[string]string {
	for i := range records {
		if records[i].Annotations[v1alpha1.AnnotationNode] == node {
			return records[i].Data
		}
	}
	return nil
}

// RunNamespace is the namespace of a NodeScript's run pods and output
// records: spec.backend.namespace, v1alpha1.DefaultNamespace when empty.
func RunNamespace(spec *v1alpha1.NodeScriptSpec) string {
	if spec.Backend.Namespace != "" {
		return spec.Backend.Namespace
	}
	return v1alpha1.DefaultNamespace
}

// FindCondition is a copy of node n's condition typ, or nil.
func FindCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return &c
		}
	}
	return nil
}

// ConditionType is the type of NodeScript name's condition on the nodes
// it Selects: "nodeexec.io/NAME", a Kubernetes qualified name (NodeScript
// names are DNS labels of at most 63 characters, the limit of a qualified
// name's part after the slash), so at most 75 characters.
func ConditionType(name string) corev1.NodeConditionType {
	return corev1.NodeConditionType(v1alpha1.ConditionPrefix + name)
}

// CurrentHash is the spec hash of stored NodeScript ns as the watcher
// computes it: v1alpha1.SpecHash of its spec, except with spec.scriptFrom,
// whose hash follows content only the watcher reads: then the hash it
// last wrote in the status (empty before it wrote one).
func CurrentHash(ns *v1alpha1.NodeScript) string {
	if ns.Spec.ScriptFrom != nil {
		return ns.Status.SpecHash
	}
	return v1alpha1.SpecHash(&ns.Spec)
}

// AwaitingAnnotations says what node state s of NodeScript ns on a node
// with annotations ann and labels lbl waits for, for nodeexec status:
// "before-run: k1, k2" (the annotations not yet "true"), "before-run:
// after NAME" (another NodeScript's label is on the node), or "" when it
// waits for nothing.
func AwaitingAnnotations(ns *v1alpha1.NodeScript, s NodeState, ann, lbl map[string]string) string {
	var (
		g     *v1alpha1.AnnotationGate
		label string
		what  string
	)
	switch {
	case s.Phase == v1alpha1.PhaseRunning && s.Awaiting == v1alpha1.AwaitingBeforeRun:
		g, label = AnnotationGate(ns, true)
		what = "before-run"
	case WaitsAfterRun(s):
		g, label = AnnotationGate(ns, false)
		what = "after-run"
		if s.AwaitingSince == nil {
			return what + ": once uncordoned"
		}
	default:
		return ""
	}
	if g == nil {
		return ""
	}
	if owner, ok := lbl[label]; ok && owner != ns.Name {
		return what + ": after nodescript " + owner + " (" + label + "=" + owner + ")"
	}
	if m := MissingAnnotations(g, ann); len(m) > 0 {
		return what + ": " + strings.Join(m, ", ") + ` not yet "true"`
	}
	return what + ": ready"
}

// AnnotationGate is spec.hooks.beforeRun (before true) or afterRun of ns,
// with its label; nil when not set.
func AnnotationGate(ns *v1alpha1.NodeScript, before bool) (*v1alpha1.AnnotationGate, string) {
	h := ns.Spec.Hooks
	switch {
	case h == nil:
		return nil, ""
	case before:
		return h.BeforeRun, v1alpha1.LabelBeforeRun
	default:
		return h.AfterRun, v1alpha1.LabelAfterRun
	}
}

// WaitsAfterRun reports whether Decide counts node state s, of the
// current hash, as still running: Succeeded with spec.hooks.afterRun not
// passed yet.
func WaitsAfterRun(s NodeState) bool {
	return s.Phase == v1alpha1.PhaseSucceeded && s.Awaiting == v1alpha1.AwaitingAfterRun
}

// MissingAnnotations are the keys of gate g whose value on node
// annotations ann is not "true", in g's order. Pure.
func MissingAnnotations(g *v1alpha1.AnnotationGate, ann map[string]string) []string {
	if g == nil {
		return nil
	}
	var missing []string
	for _, k := range g.Annotations {
		if ann[k] != "true" {
			missing = append(missing, k)
		}
	}
	return missing
}

// OutputRecordName is the name of the ConfigMap that keeps the output of
// NodeScript name on node: "NAME.NODE", or, when that is not a valid
// object name (over 253 characters), "NAME.h-" and a hash of the node's
// name. It is a pure function.
func OutputRecordName(name, node string) string {
	n := name + "." + node
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(node))
	return name + ".h-" + hex.EncodeToString(sum[:])[:20]
}

// DefaultRebootSentinel is the file whose existence after a successful run
// asks for a reboot (spec.reboot IfRequired) when spec.rebootSentinel is
// empty.
const DefaultRebootSentinel = "/var/run/reboot-required"

// RebootSentinel is spec.rebootSentinel or DefaultRebootSentinel.
func RebootSentinel(spec *v1alpha1.NodeScriptSpec) string {
	if spec.RebootSentinel != "" {
		return spec.RebootSentinel
	}
	return DefaultRebootSentinel
}

// MaintenanceConditionType is the Node condition under which the watcher
// says that nodeexec holds the node for maintenance:
// "nodeexec.io/Maintenance".
var MaintenanceConditionType = ConditionType(v1alpha1.MaintenanceConditionName)

// PrePulls reports whether ns pulls the run's image on a node before
// cordoning it: spec.maintenance.cordon is set and spec.maintenance.prePull
// is not false.
func PrePulls(ns *v1alpha1.NodeScript) bool {
	m := ns.Spec.Maintenance
	return m != nil && m.Cordon && (m.PrePull == nil || *m.PrePull)
}
