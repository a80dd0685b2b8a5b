package v1alpha1

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultHookTimeout bounds a hook Job (its activeDeadlineSeconds) when
// its timeout is not set.
const DefaultHookTimeout = 10 * time.Minute

// Hooks are steps run in the cluster around the rollout (spec.hooks; see
// docs/nodescript-hooks.md): Kubernetes Jobs the watcher creates in
// spec.backend.namespace from the templates given, owned by the NodeScript,
// and external gates by annotation before and after each node's run
// (BeforeRun, AfterRun; docs/nodescript-annotations.md). None is part of
// the spec hash. Defaults to none.
type Hooks struct {
	// PreNode runs before each node's run: after the image pre-pull
	// (spec.maintenance.prePull) and before the silences, cordon and drain.
	// The node waits for it; a Job that fails or times out is an
	// infrastructure failure of the node (reason PreHookFailed), retried
	// under spec.retry; the node is never cordoned for it.
	// Its containers see NODESCRIPT_NAME, NODESCRIPT_NODE, NODESCRIPT_HOOK and
	// NODESCRIPT_HASH.
	// +optional
	PreNode *HookJob `json:"preNode,omitempty"`
	// PostNode runs once the outcome of each node's run attempt is recorded,
	// after a failure too (and after the uncordon of a success). Its failure
	// is a Warning Event and a line of the node's state; the node's outcome
	// does not change.
	// +optional
	PostNode *HookJob `json:"postNode,omitempty"`
	// PreRollout runs before the first node of a spec hash starts: the
	// rollout holds (HookRunning) until it succeeds; a failed Job holds it
	// (HookFailed) and is run again, as a new Job, after spec.retry's
	// backoff.
	// +optional
	PreRollout *HookJob `json:"preRollout,omitempty"`
	// PostRollout runs once per spec hash when the rollout is Complete or
	// Halted; status.hooks.postRollout records that it ran.
	// +optional
	PostRollout *HookJob `json:"postRollout,omitempty"`
	// BeforeRun, when set, holds each node's run until other controllers
	// set every one of its annotations to "true" on the node: after the
	// image pre-pull (and the preNode hook), before the silences, the
	// cordon and the drain. While it waits the watcher labels the node
	// nodeexec.io/before-run=<NodeScript name>; once all are "true" it
	// removes them and the label, and the run starts. Defaults to none: no
	// wait.
	// +optional
	BeforeRun *AnnotationGate `json:"beforeRun,omitempty"`
	// AfterRun, when set, holds a node whose run succeeded (after the
	// reboot and the uncordon) until every one of its annotations is "true"
	// on the node, labelled nodeexec.io/after-run=<NodeScript name>
	// meanwhile; the annotations and the label are then removed. Until then
	// the node counts as running for the rollout's pace (maxConcurrency,
	// batches, canaries). Not after a failure. Defaults to none: no wait.
	// +optional
	AfterRun *AnnotationGate `json:"afterRun,omitempty"`
}

// HookJob is a hook: the Job to run and its timeout.
type HookJob struct {
	// Template is the Job's metadata and spec (a batch/v1 JobTemplateSpec,
	// as in a CronJob): at least one container, restartPolicy Never or
	// OnFailure. The watcher sets the Job's name, namespace, owner and
	// labels, activeDeadlineSeconds (from timeout) and the NODESCRIPT_*
	// variables of each container. Not pruned by the CRD: checked by
	// nodeexec apply (strict decoding) and by the watcher.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Template batchv1.JobTemplateSpec `json:"template"`
	// Timeout bounds the Job (its spec.activeDeadlineSeconds, counted from
	// the Job's start): a Job still going then fails. Defaults to 10m
	// (DefaultHookTimeout); at least 1s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s, e.g. 5m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// HooksStatus is status.hooks: the rollout-wide hooks of the current spec
// hash.
type HooksStatus struct {
	// PreRollout is spec.hooks.preRollout's progress for Hash.
	// +optional
	PreRollout *HookStatus `json:"preRollout,omitempty"`
	// PostRollout is spec.hooks.postRollout's progress for Hash; once it
	// is Succeeded or Failed for the current hash it does not run again.
	// +optional
	PostRollout *HookStatus `json:"postRollout,omitempty"`
}

// HookStatus is one rollout-wide hook's last Job.
type HookStatus struct {
	// Hash is the spec hash the Job ran for.
	Hash string `json:"hash"`
	// Phase is Running, Succeeded or Failed.
	Phase string `json:"phase"`
	// Job is the Job's name (in spec.backend.namespace).
	// +optional
	Job string `json:"job,omitempty"`
	// Attempt numbers the Job for Hash (1 for the first).
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Message says why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Since is when Phase began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}
