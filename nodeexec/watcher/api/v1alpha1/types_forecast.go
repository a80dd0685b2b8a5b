package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults and bounds of the run forecast (spec.rollout.windowMargin,
// spec.rollout.fitWindow, status.durations, status.forecast). See
// docs/nodescript-forecast.md.
const (
	// DefaultWindowMargin is spec.rollout.windowMargin when unset: 5
	// minutes of slack between a node's expected end (the p95 of its
	// learned steps) and the window's close, for what the learned steps do
	// not measure (the cordon, the uncordon, the status write, a slow
	// reconcile) and for the p95 being an estimate from few samples.
	DefaultWindowMargin = 5 * time.Minute
	// MaxDurationSamples is how many samples of each step status.durations
	// keeps: the newest, the oldest dropped first.
	MaxDurationSamples = 50
)

// Steps whose durations are learned (status.durations).
const (
	StepCheck  = "check"
	StepDrain  = "drain"
	StepRun    = "run"
	StepReboot = "reboot"
	StepVerify = "verify"
)

// Durations are the durations the watcher learned of each step of a node's
// maintenance under this NodeScript (whatever its spec hash), from the runs
// it recorded: check (the checkScript pod, creation to finish), drain
// (cordoned to drained), run (the run pod, creation to finish), reboot
// (the script succeeded to the node back with a new boot ID) and verify
// (the verifyScript pod). Infrastructure failures are not samples. Kept in
// the status so that a restarted watcher keeps them.
type Durations struct {
	// +optional
	Check *StepDurations `json:"check,omitempty"`
	// +optional
	Drain *StepDurations `json:"drain,omitempty"`
	// +optional
	Run *StepDurations `json:"run,omitempty"`
	// +optional
	Reboot *StepDurations `json:"reboot,omitempty"`
	// +optional
	Verify *StepDurations `json:"verify,omitempty"`
}

// StepDurations are one step's samples and their percentiles.
type StepDurations struct {
	// Samples are the step's last durations, whole seconds rounded up,
	// oldest first; at most MaxDurationSamples (50).
	// +kubebuilder:validation:MaxItems=50
	Samples []int64 `json:"samples"`
	// P50 is the samples' median, in seconds (nearest rank).
	P50 int64 `json:"p50"`
	// P95 is the samples' 95th percentile, in seconds (nearest rank).
	P95 int64 `json:"p95"`
}

// Forecast is the rollout's expected course: how many nodes are left, how
// many openings of the maintenance window(s) they need at the learned
// median per node and the rollout's concurrency, and when it should be
// done. An estimate; see docs/nodescript-forecast.md for what it counts.
type Forecast struct {
	// NodesLeft are the selected nodes not done yet (pending or running).
	NodesLeft int32 `json:"nodesLeft"`
	// WindowsNeeded is how many openings of the maintenance window(s) the
	// nodes left run in (the one open now counts when a node still fits
	// in it); 0 when unknown (no duration learned yet, or no opening fits
	// a node).
	// +optional
	WindowsNeeded int32 `json:"windowsNeeded,omitempty"`
	// ETA is when the last node should be done; unset when unknown.
	// +optional
	ETA *metav1.Time `json:"eta,omitempty"`
	// Message says the same in words, with the time in the window's time
	// zone, e.g. "14 nodes left ≈ 2 windows, done about Tue 03:10
	// Europe/Berlin", or why there is no ETA.
	// +optional
	Message string `json:"message,omitempty"`
}
