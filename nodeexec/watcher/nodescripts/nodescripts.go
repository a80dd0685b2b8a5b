package nodescripts

import (
	"context"
	corev1 "k8s.io/api/core/v1"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
)

// ErrCRDNotInstalled is returned when the API server does not serve
// nodescripts.nodeexec.io: install deploy/crd first (kubectl apply -f
// deploy/crd/, or kubectl apply -k deploy/). It is the same error value
// as watcher.ErrCRDNotInstalled, so errors.Is matches either.
var ErrCRDNotInstalled = nodescript.ErrCRDNotInstalled

// Get reads one NodeScript. ErrCRDNotInstalled (wrapped) when the API
// server does not serve NodeScripts. RBAC: get on nodescripts.
func Get(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.NodeScript, error) {
	return nodescript.Get(ctx, dyn, name)
}

// NodeState is one node's record of one NodeScript, as the watcher keeps
// it in the node's annotation StateAnnotation(name): phase, exit code,
// attempts, spec hash, times and reasons; never the run's output. Its
// encoding is at most MaxStateBytes bytes.
type NodeState = nodescript.NodeState

// HeldSilence is a silence the watcher created for a node and has not
// expired yet (NodeState.Silences).
type HeldSilence = nodescript.HeldSilence

// UninstallRecord is a node's progress of spec.uninstallScript
// (NodeState.Uninstall).
type UninstallRecord = nodescript.UninstallRecord

// MaxStateBytes bounds the encoded NodeState of one NodeScript on a node.
const MaxStateBytes = nodescript.MaxStateBytes

// DecodeState reads NodeScript name's state from a node's annotations: a
// Pending state when there is none, an error when the annotation is not a
// state this version reads. It is a pure function.
func DecodeState(annotations map[string]string, name string) (NodeState, error) {
	return nodescript.DecodeState(annotations, name)
}

// StateAnnotation is the node annotation key holding the state of
// NodeScript name: "NAME.nodescript.nodeexec.io/state".
func StateAnnotation(name string) string { return nodescript.StateAnnotation(name) }

// RerunAnnotation is the node annotation asking the watcher to run
// NodeScript name again on the node (Rerun sets it):
// "NAME.nodescript.nodeexec.io/rerun", its value the spec hash to run again.
func RerunAnnotation(name string) string { return nodescript.RerunAnnotation(name) }

// IgnoreAnnotation is the node annotation excluding the node from
// NodeScript name (SetIgnored sets it): "NAME.nodescript.nodeexec.io/ignore",
// its value who asked.
func IgnoreAnnotation(name string) string { return nodescript.IgnoreAnnotation(name) }

// Opening is one span of time a rollout may run in, [Start, End).
type Opening = nodescript.Opening

// OpeningsHorizon is how far ahead Openings and CalendarOpenings look: 400
// days.
const OpeningsHorizon = nodescript.OpeningsHorizon

// RunNowUntil reads the run-now override of ns
// (v1alpha1.AnnotationRunNow): when it ends, whether it is set, and an
// error when it is set but not an RFC 3339 time. It is a pure function.
func RunNowUntil(ns *v1alpha1.NodeScript) (until time.Time, set bool, err error) {
	return nodescript.RunNowUntil(ns)
}

// ConditionType is the type of NodeScript name's condition on the nodes it
// selects: "nodeexec.io/NAME", at most 75 characters.
func ConditionType(name string) corev1.NodeConditionType { return nodescript.ConditionType(name) }

// MaintenanceConditionType is the Node condition by which the watcher says
// that nodeexec holds the node for maintenance (a budget's or a
// NodeScript's drain, run, reboot): "nodeexec.io/Maintenance".
var MaintenanceConditionType = nodescript.MaintenanceConditionType

// OutputRecordName is the name of the ConfigMap, in the run namespace, that
// keeps the output of NodeScript name on node (spec.recordOutput):
// "NAME.NODE", or "NAME.h-" and a hash of the node's name when that is over
// 253 characters. It is a pure function.
func OutputRecordName(name, node string) string { return nodescript.OutputRecordName(name, node) }

// RebootSentinel is the file whose existence after a successful run asks
// for a reboot (spec.reboot IfRequired): spec.rebootSentinel, or
// "/var/run/reboot-required".
func RebootSentinel(spec *v1alpha1.NodeScriptSpec) string { return nodescript.RebootSentinel(spec) }

// PrePulls reports whether the watcher pulls ns's run image on a node
// before cordoning it: spec.maintenance.cordon is set and
// spec.maintenance.prePull is not false.
func PrePulls(ns *v1alpha1.NodeScript) bool { return nodescript.PrePulls(ns) }
