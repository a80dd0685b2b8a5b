package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of a NodeScript's spec: the values the watcher uses for a field
// left out. SetDefaults writes those of them it may (see there); the
// others are read where they are used, from these constants.
const (
	// DefaultCanary is spec.rollout.canary: one canary node.
	DefaultCanary = 1
	// DefaultRetryLimit is spec.retry.limit: retries of a node after an
	// infrastructure failure.
	DefaultRetryLimit = 3
	// DefaultInitialBackoff is spec.retry.initialBackoff.
	DefaultInitialBackoff = 10 * time.Second
	// DefaultMaxBackoff is spec.retry.maxBackoff.
	DefaultMaxBackoff = 5 * time.Minute
	// DefaultTimeout is spec.timeout: one run on one node, pod start
	// included.
	DefaultTimeout = 10 * time.Minute
	// DefaultNamespace is spec.backend.namespace: where the run pods and
	// the output records go.
	DefaultNamespace = "nodeexec-system"
	// DefaultDrainTimeout is spec.onFailure.drainTimeout and
	// spec.maintenance.drain.timeout: how long a drain may take.
	DefaultDrainTimeout = 5 * time.Minute
	// DefaultRebootSentinel is spec.rebootSentinel (kured's).
	DefaultRebootSentinel = "/var/run/reboot-required"
	// DefaultRebootCommand is spec.rebootCommand.
	DefaultRebootCommand = "systemctl reboot"
	// DefaultRebootTimeout is spec.rebootTimeout: how long a node may take
	// to come back from its reboot.
	DefaultRebootTimeout = 15 * time.Minute
)

// SetDefaults fills the fields of ns's spec that are left out with their
// defaults, in place: spec.rollout.canary (DefaultCanary),
// spec.rollout.windowMargin (DefaultWindowMargin), spec.retry.limit
// (DefaultRetryLimit), spec.onFailure.drainTimeout and
// spec.maintenance.drain.timeout (DefaultDrainTimeout), spec.rebootSentinel
// (DefaultRebootSentinel) and spec.rebootTimeout (DefaultRebootTimeout). It
// is idempotent, and a valid NodeScript stays valid with the same errors.
//
// It leaves alone the fields whose absence means something of its own:
// spec.timeout and spec.backend (they enter SpecHash: writing their
// defaults would change every node's recorded hash and run the script
// again), spec.retry.initialBackoff and maxBackoff (Validate compares them,
// and tells a maxBackoff set from its default), spec.rebootCommand (without
// it the watcher's Options.Rebooter may reboot), and the gates', hooks' and
// analysis' own fields (their specs are digested as they are written).
//
// The watcher calls it once on each NodeScript it reads from the API, never
// on what it writes: the stored object keeps what its author wrote.
func SetDefaults(ns *NodeScript) { defaults(ns, true) }

// Defaulted is ns when it needs no default, else a deep copy of ns with
// SetDefaults applied: for functions that take a NodeScript from any
// caller and must not change it.
func Defaulted(ns *NodeScript) *NodeScript {
	if !defaults(ns, false) {
		return ns
	}
	cp := ns.DeepCopy()
	SetDefaults(cp)
	return cp
}

// defaults reports whether a field of ns's spec needs its default, and
// with set, writes it.
func defaults(ns *NodeScript, set bool) bool {
	s := &ns.Spec
	need := false
	if s.Rollout.Canary == nil {
		need = true
		if set {
			s.Rollout.Canary = intPtr(DefaultCanary)
		}
	}
	if s.Retry.Limit == nil {
		need = true
		if set {
			s.Retry.Limit = intPtr(DefaultRetryLimit)
		}
	}
	for _, d := range []struct {
		p *(*metav1.Duration)
		v time.Duration
	}{
		{&s.Rollout.WindowMargin, DefaultWindowMargin},
		{&s.OnFailure.DrainTimeout, DefaultDrainTimeout},
		{&s.RebootTimeout, DefaultRebootTimeout},
		{maintenanceDrainTimeoutField(s), DefaultDrainTimeout},
	} {
		if d.p != nil && *d.p == nil {
			need = true
			if set {
				*d.p = &metav1.Duration{Duration: d.v}
			}
		}
	}
	if s.RebootSentinel == "" {
		need = true
		if set {
			s.RebootSentinel = DefaultRebootSentinel
		}
	}
	return need
}

// maintenanceDrainTimeoutField is where spec.maintenance.drain.timeout is,
// or nil without spec.maintenance.drain.
func maintenanceDrainTimeoutField(s *NodeScriptSpec) **metav1.Duration {
	if s.Maintenance == nil || s.Maintenance.Drain == nil {
		return nil
	}
	return &s.Maintenance.Drain.Timeout
}

func intPtr(v int32) *int32 { return &v }
