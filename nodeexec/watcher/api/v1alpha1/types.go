package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GroupVersion is the API group and version of NodeScript.
var GroupVersion = schema.GroupVersion{Group: "nodeexec.io", Version: "v1alpha1"}

// Resource is the plural resource name, for dynamic clients.
var Resource = GroupVersion.WithResource("nodescripts")

// NodeScript applies Spec.Script to every node Spec.NodeSelector matches,
// now and to each node that joins later, as a controlled rollout.
//
// Trust boundary: the script runs as root on every selected node, with the
// image spec.backend.image names, through the watcher's account. The right
// to create or update NodeScripts is the right to be root on the nodes:
// grant it like cluster-admin (ClusterRole nodeexec-nodescript-author), and
// restrict images and run namespaces with deploy/policy's admission policy.
// Anyone who can read NodeScripts reads the scripts.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nscript,categories=nodeexec
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.status.stage`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="NotNeeded",type=integer,JSONPath=`.status.notNeeded`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Halted",type=string,JSONPath=`.status.conditions[?(@.type=="Halted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeScript struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeScriptSpec   `json:"spec"`
	Status NodeScriptStatus `json:"status,omitempty"`
}

// NodeScriptList is a list of NodeScripts.
//
// +kubebuilder:object:root=true
type NodeScriptList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeScript `json:"items"`
}

// NodeScriptSpec is what to run, where, and how to roll it out.
//
// +kubebuilder:validation:XValidation:rule="!has(self.onFailure) || !has(self.onFailure.rollback) || !self.onFailure.rollback || (has(self.rollbackScript) && size(self.rollbackScript) > 0)",message="onFailure.rollback needs rollbackScript"
// +kubebuilder:validation:XValidation:rule="!has(self.rollout) || !has(self.rollout.analysis) || (has(self.rollbackScript) && size(self.rollbackScript) > 0)",message="rollout.analysis needs rollbackScript (run on the canaries when they regressed; 'true' to only halt)"
// +kubebuilder:validation:XValidation:rule="has(self.script) != has(self.scriptFrom)",message="set exactly one of script and scriptFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.startupTaint) || !has(self.startupTaint.effect) || self.startupTaint.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute']",message="startupTaint.effect must be NoSchedule, PreferNoSchedule or NoExecute"
type NodeScriptSpec struct {
	// NodeSelector selects the nodes, now and as they join. An empty
	// selector selects every node.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// ExcludeNodes names nodes never to run on, even when selected.
	// +optional
	// +listType=set
	ExcludeNodes []string `json:"excludeNodes,omitempty"`
	// BlockingPodSelector, when set, holds a node back while a pod matching
	// it (in any namespace, not yet Succeeded or Failed) is on the node, as
	// kured's blocking pod selectors do: the script does not start there
	// (nor its check) until the pod is gone; status.blocked and an Event
	// BlockedByPod on the node say which pod blocks. A run already going is
	// not stopped. It must select something: an empty selector, which would
	// match every pod, is refused. Not part of the spec hash. Defaults to
	// none. RBAC: the watcher lists pods (cluster-wide list).
	// +optional
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="matches every pod, so no node would ever start: give matchLabels or matchExpressions"
	BlockingPodSelector *metav1.LabelSelector `json:"blockingPodSelector,omitempty"`

	// Script is run by `sh -c` on each node (in the node's root filesystem
	// where the backend allows). Exactly one of Script and ScriptFrom is
	// set. At most 131071 bytes (an exec argument; see MaxScriptBytes).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=131071
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	Script string `json:"script,omitempty"`
	// ScriptFrom takes the script from a key of a ConfigMap or a Secret in
	// spec.backend.namespace, read by the watcher on each reconcile (and
	// its resync, 30 s by default): the spec hash follows the content, so
	// editing the key runs the new script where the old one ran. A
	// ConfigMap's script is in the run pods' command, as spec.script is; a
	// Secret's never is: the run pod gets it as the variable
	// NODESCRIPT_SCRIPT (valueFrom.secretKeyRef, read by the kubelet) and
	// runs eval "$NODESCRIPT_SCRIPT", and only a digest of it enters the
	// spec hash. A missing object or key starts nothing (an Event
	// ScriptFromFailed on the NodeScript). RBAC: the watcher gets
	// ConfigMaps and Secrets in spec.backend.namespace.
	// +optional
	ScriptFrom *ScriptSource `json:"scriptFrom,omitempty"`
	// ScriptDigest is set by the watcher, never stored: a digest of the
	// script read through ScriptFrom, for the spec hash.
	ScriptDigest string `json:"-"`
	// CheckScript, when set, runs on a node before Script, in a pod of its
	// own, to tell whether the node needs Script at all (the detector):
	// node-problem-detector's plugin contract. Exit 0: the node is fine,
	// phase NotNeeded (not a failure; no cordon, drain or run; checked again
	// when the spec changes). Exit 1: the node needs Script, which runs.
	// Any other exit (126 and 127, command not found, included) is a failure
	// with reason CheckFailed, counted against the error budget, never read
	// as an answer. It should only read: nothing is cordoned or drained
	// before it. Part of the spec hash when set.
	// +kubebuilder:validation:MaxLength=131071
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	CheckScript string `json:"checkScript,omitempty"`
	// Check says how CheckScript's pod runs: privileged (the default) or
	// unprivileged with the node's directories it reads (CheckSpec,
	// docs/nodescript-detector.md). Only with CheckScript. Part of the spec
	// hash when set.
	// +optional
	Check *CheckSpec `json:"check,omitempty"`
	// VerifyScript, when set, must exit 0 on a canary node after Script
	// succeeded and the soak time passed, before automatic promotion.
	// +kubebuilder:validation:MaxLength=131071
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	VerifyScript string `json:"verifyScript,omitempty"`
	// RollbackScript undoes Script; run on a node where Script failed when
	// OnFailure.Rollback is set.
	// +kubebuilder:validation:MaxLength=131071
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	RollbackScript string `json:"rollbackScript,omitempty"`

	// Backend is how the script reaches a node.
	// +optional
	Backend BackendSpec `json:"backend,omitempty"`
	// Timeout bounds one run of a script on one node, pod start included.
	// Defaults to 10m; at most MaxTimeout (about 68 years, the range of
	// the pod's activeDeadlineSeconds).
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('2147483587s')",message="must be a positive duration (e.g. 10m) of at most 2147483587s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Rollout says in which order and how fast nodes get the script.
	// +optional
	Rollout RolloutSpec `json:"rollout,omitempty"`
	// OnFailure says what happens on a node where the script failed.
	// +optional
	OnFailure FailurePolicy `json:"onFailure,omitempty"`
	// Retry governs retries after infrastructure failures (image pull, pod
	// rejected, node NotReady, preemption, eviction); a non-zero exit of the
	// script itself is a failure, not retried.
	// +optional
	Retry RetryPolicy `json:"retry,omitempty"`
	// SecretEnv sets environment variables of the scripts from Secrets in
	// spec.backend.namespace, which the kubelet reads: the values are never
	// in the NodeScript, the run pods' spec, annotations or status. An entry
	// with a key is the variable of that name; one without, every key of the
	// Secret. Part of the spec hash (the references, not the values: a
	// changed Secret reruns no node).
	// +optional
	// +listType=atomic
	SecretEnv []SecretEnvSource `json:"secretEnv,omitempty"`
	// ConfigMapEnv sets environment variables of the scripts from
	// ConfigMaps in spec.backend.namespace, which the kubelet reads when the
	// run pod starts: an entry with a key is the variable of that name
	// (valueFrom.configMapKeyRef); one without, every key of the ConfigMap
	// (envFrom.configMapRef). Part of the spec hash (the references, not the
	// values: a changed ConfigMap reruns no node; for a script whose content
	// should rerun, use scriptFrom).
	// +optional
	// +listType=atomic
	ConfigMapEnv []ConfigMapEnvSource `json:"configMapEnv,omitempty"`
	// Paused, when true, starts nothing new on any node: runs in progress
	// finish and are recorded; the status says Paused (condition
	// Progressing False, reason Paused). Not part of the spec hash (`nodeexec
	// pause NAME` and `nodeexec resume NAME` set it). Defaults to false.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Window, when set, is the maintenance window: runs start only inside
	// it (a run in progress when it closes finishes); outside it the status
	// says OutsideMaintenanceWindow and status.nextWindow when it opens. Not
	// part of the spec hash. Defaults to none: runs start at any time.
	// +optional
	Window *MaintenanceWindow `json:"window,omitempty"`
	// Maintenance, when set, takes each node out of service around the run:
	// cordon (and drain) before the script (after spec.checkScript, which
	// needs none), uncordon after it succeeded. Not part of the spec hash.
	// Defaults to none: the script runs on a node in service.
	// +optional
	Maintenance *MaintenanceSpec `json:"maintenance,omitempty"`
	// Reboot says whether the node reboots after the script succeeded:
	// Never (the default), Always, or IfRequired: when the script left the
	// file spec.rebootSentinel (kured's convention) or exited with
	// ExitRebootRequired (194). The watcher then reboots the node (a pod
	// running spec.rebootCommand, or the watcher's Options.Rebooter) and
	// waits until the Node reports a new status.nodeInfo.bootID and is
	// Ready, within spec.rebootTimeout; only then is the node Succeeded
	// (and uncordoned under spec.maintenance). A node that does not come
	// back in time is Failed (reason RebootTimeout), counted against the
	// error budget. Not part of the spec hash.
	// +kubebuilder:validation:Enum=Never;IfRequired;Always
	// +optional
	Reboot string `json:"reboot,omitempty"`
	// RebootSentinel is the file whose presence after a successful run asks
	// for a reboot under reboot: IfRequired. Defaults to
	// /var/run/reboot-required.
	// +optional
	RebootSentinel string `json:"rebootSentinel,omitempty"`
	// RebootCommand reboots the node, run like the script (sh -c, on the
	// node). Defaults to "systemctl reboot".
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	RebootCommand string `json:"rebootCommand,omitempty"`
	// RebootTimeout bounds the wait for the node to come back with a new
	// boot ID and Ready. Defaults to 15m.
	// +optional
	RebootTimeout *metav1.Duration `json:"rebootTimeout,omitempty"`
	// Reapply, when set, runs the script again on nodes where the current
	// spec already succeeded: after the node rebooted (onReboot), or once the
	// last success is older than interval (drift correction). The node
	// becomes Pending and runs under the rollout's pace, pause and window,
	// as a rerun does. Not part of the spec hash. Defaults to none: a node
	// runs each spec once.
	// +optional
	Reapply *ReapplyPolicy `json:"reapply,omitempty"`
	// RecordOutput, when true, keeps the end of each run's output (at most
	// 4 KiB per action: the failed run's termination message, or the last
	// Options.SuccessLogLines lines of a successful one), redacted by the
	// rule of watcher.Redact, in a ConfigMap per node in
	// spec.backend.namespace named by watcher.OutputRecordName and owned by
	// this NodeScript (garbage-collected with it). Its readers are those who
	// may get ConfigMaps there; nothing of the output goes into the node's
	// state annotation or the status. Not part of the spec hash. Defaults to
	// false: no output is kept.
	// +optional
	RecordOutput bool `json:"recordOutput,omitempty"`
	// Gates are health gates (see Gate and docs/nodescript-gates.md): all
	// must be open before a node starts and before automatic promotion;
	// runs in progress finish. Not part of the spec hash. Defaults to none.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Gates []Gate `json:"gates,omitempty"`
	// Notify are webhooks told of the rollout's Started, NodeFailed,
	// Halted and Completed events (see Notification and
	// docs/nodescript-notify.md). Not part of the spec hash. Defaults to
	// none.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Notify []Notification `json:"notify,omitempty"`
	// StartupTaint, when set, names a taint that new nodes register with; the
	// watcher removes it from a node only after the script succeeded there,
	// so workloads land only on fixed nodes.
	// +optional
	StartupTaint *corev1.Taint `json:"startupTaint,omitempty"`
	// PostCompleteLabels are labels the watcher puts on a node once the
	// script succeeded there (after spec.reboot and, on canaries, the
	// verifyScript), e.g. {"example.com/kernel": "6.8"}. Not part of the
	// spec hash; see docs/nodescript-prepull.md.
	// +optional
	PostCompleteLabels map[string]string `json:"postCompleteLabels,omitempty"`
	// Hooks are Jobs run around each node and the rollout
	// (docs/nodescript-hooks.md) and external gates by annotation before
	// and after each node's run (docs/nodescript-annotations.md). Not part
	// of the spec hash. Defaults to none.
	// +optional
	Hooks *Hooks `json:"hooks,omitempty"`
	// UninstallScript: see LifecycleFields (types_lifecycle.go).
	LifecycleFields `json:",inline"`
	// MaintenanceBudget, Exclusive, Priority: see types_budget.go's
	// BudgetFields (docs/maintenancebudget.md).
	BudgetFields `json:",inline"`
	// WindowRefs: see types_calendar.go's CalendarFields
	// (docs/maintenancecalendar.md).
	CalendarFields `json:",inline"`
}

// ScriptSource is where spec.scriptFrom reads the script: exactly one of
// its fields.
// +kubebuilder:validation:XValidation:rule="has(self.configMapKeyRef) != has(self.secretKeyRef)",message="set exactly one of configMapKeyRef and secretKeyRef"
type ScriptSource struct {
	// ConfigMapKeyRef is a key of a ConfigMap in spec.backend.namespace.
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
	// SecretKeyRef is a key of a Secret in spec.backend.namespace.
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
}

// KeyRef names a key of an object in spec.backend.namespace.
type KeyRef struct {
	// Name of the ConfigMap or Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key in its data.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ConfigMapEnvSource names environment variables kept in a ConfigMap.
type ConfigMapEnvSource struct {
	// ConfigMap is the name of the ConfigMap, in spec.backend.namespace.
	// +kubebuilder:validation:MinLength=1
	ConfigMap string `json:"configMap"`
	// Key of the ConfigMap whose value becomes the variable of that name
	// (valueFrom.configMapKeyRef); empty: every key (envFrom).
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretEnvSource names environment variables kept in a Secret.
type SecretEnvSource struct {
	// Secret is the name of the Secret, in spec.backend.namespace.
	// +kubebuilder:validation:MinLength=1
	Secret string `json:"secret"`
	// Key of the Secret whose value becomes the variable of that name
	// (valueFrom.secretKeyRef); empty: every key (envFrom).
	// +optional
	Key string `json:"key,omitempty"`
}

// BackendSpec chooses and configures the backend.
type BackendSpec struct {
	// Name of the backend: debugpod (kubectl debug's node pod; the script
	// runs in `chroot /host` for profiles that mount the node's root) or
	// nsenter (a privileged hostPID pod entering PID 1's namespaces).
	// Defaults to debugpod.
	// +optional
	Name string `json:"name,omitempty"` // its CRD enum: backends.WatcherNames, written by make generate
	// Namespace for the pods the backend creates; it needs the Pod Security
	// level the backend requires (privileged for debugpod's sysadmin profile
	// and for nsenter). Defaults to nodeexec-system.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Profile is kubectl debug's profile, for debugpod. Defaults to sysadmin.
	// +kubebuilder:validation:Enum=legacy;general;baseline;restricted;netadmin;sysadmin
	// +optional
	Profile string `json:"profile,omitempty"`
	// Image of the pod's container: a reference NAME[:TAG][@DIGEST] in the
	// grammar of github.com/distribution/reference, which Validate and the
	// CRD's rule below both apply (a test pins them together). Defaults to
	// the backend's default (busybox:stable for debugpod, the agent image
	// for nsenter).
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^((?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*)(?::([\w][\w.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}))?$') && !self.matches(r'^[a-f0-9]{64}$') && !self.matches(r'^\[[^/:]*\]/') && (!self.contains('@') || self.matches(r'@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$'))`,message="not a valid image reference: give NAME[:TAG][@DIGEST] (lower-case name; a digest sha256:, sha384: or sha512: with its hex digits), such as busybox:1.36"
	// +optional
	Image string `json:"image,omitempty"`
	// Namespaces to enter, for nsenter (mnt, uts, ipc, net, pid, cgroup).
	// Defaults to mnt, uts, ipc, net, pid.
	// +optional
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
	// ImagePullSecrets are secrets (kubernetes.io/dockerconfigjson) in
	// Namespace for pulling Image from a registry that needs credentials,
	// copied into every run pod's spec.imagePullSecrets. They are not part
	// of the spec hash: changing them reruns no node.
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// Promotion modes.
const (
	PromotionAutomatic = "Automatic"
	PromotionManual    = "Manual"
)

// RolloutSpec is the order and pace of the rollout.
// +kubebuilder:validation:XValidation:rule="!has(self.analysis) || (has(self.soakTime) && duration(self.soakTime) > duration('0s'))",message="analysis needs soakTime > 0: the checks run while the canaries soak"
type RolloutSpec struct {
	// Canary is how many nodes run first; the rest wait for promotion.
	// Defaults to 1.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Canary *int32 `json:"canary,omitempty"`
	// Promotion is Automatic (after SoakTime with VerifyScript passing on the
	// canaries) or Manual (PromoteTo, set by `nodeexec promote`). Defaults to Automatic.
	// +kubebuilder:validation:Enum=Automatic;Manual
	// +optional
	Promotion string `json:"promotion,omitempty"`
	// SoakTime is how long canaries run healthy before automatic promotion.
	// Defaults to 0.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 30s"
	// +optional
	SoakTime *metav1.Duration `json:"soakTime,omitempty"`
	// PromoteTo is "all" or a label selector: the nodes beyond the canaries
	// that may run. Set by `nodeexec promote` for manual promotion.
	// +optional
	PromoteTo string `json:"promoteTo,omitempty"`
	// Batches are the sizes of the stages after the canary, counts or
	// percentages of the selected nodes, e.g. [1, 5, "20%"]; the last repeats.
	// Defaults to one stage of all nodes.
	// +optional
	Batches []intstr.IntOrString `json:"batches,omitempty"`
	// MaxConcurrency is how many nodes run at once, a count or a percentage
	// of the selected nodes (1 to 100%). Defaults to 1.
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// MaxFailures is the error budget, a count or a percentage: once more
	// nodes than this failed, the rollout halts. Defaults to 0.
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
	// PostCompleteDelay is the pause after a node succeeded before another
	// node starts, between nodes and between batches, counted from the
	// last success recorded for the current spec. Defaults to 0.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 30s"
	// +optional
	PostCompleteDelay *metav1.Duration `json:"postCompleteDelay,omitempty"`
	// Analysis, when set, checks a Prometheus metric of the canaries
	// against the other nodes while they soak; a regression halts the
	// rollout and rolls the canaries back (CanaryAnalysis). Defaults to none.
	// +optional
	Analysis *CanaryAnalysis `json:"analysis,omitempty"`
	// WindowMargin is the slack kept before the maintenance window closes:
	// a node starts only if its expected duration (the p95 of the steps it
	// has learned, status.durations) plus WindowMargin ends before the
	// window closes (FitWindow). Defaults to 5m (DefaultWindowMargin).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 5m"
	// +optional
	WindowMargin *metav1.Duration `json:"windowMargin,omitempty"`
	// FitWindow, when a window applies, keeps back the nodes whose
	// expected run would not end before the window closes (hold
	// WindowTooShort when none fits). Set false to start nodes until the
	// window closes, as before. Defaults to true.
	// +optional
	FitWindow *bool `json:"fitWindow,omitempty"`
}

// FailurePolicy is what happens on a node where the script failed.
type FailurePolicy struct {
	// Rollback runs RollbackScript on the failed node.
	// +optional
	Rollback bool `json:"rollback,omitempty"`
	// Cordon marks the failed node unschedulable (remembering whether it
	// already was: nodeexec never uncordons what it did not cordon).
	// +optional
	Cordon bool `json:"cordon,omitempty"`
	// Drain evicts the failed node's pods after cordoning it, within DrainTimeout.
	// +optional
	Drain bool `json:"drain,omitempty"`
	// DrainTimeout bounds the drain. Defaults to 5m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 30s"
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
}

// RetryPolicy governs retries after infrastructure failures.
type RetryPolicy struct {
	// Limit is the number of retries per node. Defaults to 3.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Limit *int32 `json:"limit,omitempty"`
	// InitialBackoff is the first pause, doubled per retry with jitter. Defaults to 10s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 30s"
	// +optional
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`
	// MaxBackoff caps the pause. Defaults to 5m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 30s"
	// +optional
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// Condition types of NodeScriptStatus.
const (
	ConditionProgressing = "Progressing"
	ConditionHalted      = "Halted"
	ConditionComplete    = "Complete"
)

// MaintenanceSpec takes a node out of service for its run.
// +kubebuilder:validation:XValidation:rule="!has(self.drain) || (has(self.cordon) && self.cordon)",message="drain needs cordon: true"
// +kubebuilder:validation:XValidation:rule="!has(self.maxBlockedNodes) || self.maxBlockedNodes == 0 || has(self.drain)",message="maxBlockedNodes needs drain"
type MaintenanceSpec struct {
	// Cordon marks the node unschedulable before the run and schedulable
	// again after it succeeded; a node already cordoned by someone else is
	// run on and left cordoned (nodeexec never uncordons what it did not
	// cordon). After a failure the node stays cordoned when
	// spec.onFailure.cordon is set, and is uncordoned otherwise. Required
	// (true) when Drain is set.
	// +optional
	Cordon bool `json:"cordon,omitempty"`
	// Drain, when set, evicts the node's pods after cordoning it and before
	// the run, as kubectl drain does: through the eviction API (so
	// PodDisruptionBudgets are respected), DaemonSet pods and nodeexec's
	// own pods left alone. A drain that does not finish within its timeout
	// is an infrastructure failure (reason DrainFailed), retried under
	// spec.retry.
	// +optional
	Drain *DrainSpec `json:"drain,omitempty"`
	// MaxUnavailable bounds the selected nodes out of service for this
	// NodeScript at once, a count or a percentage (1 to 100%): nodes
	// cordoned, draining or running for it, and nodes it left cordoned
	// after a failure. No node starts while that many are. Defaults to no
	// bound beyond spec.rollout.maxConcurrency.
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxBlockedNodes halts the rollout (reason DrainBlocked) while this
	// many selected nodes are DrainBlocked at once (see
	// docs/nodescript-drains.md). Needs drain. Defaults to 0: never halts.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxBlockedNodes int32 `json:"maxBlockedNodes,omitempty"`
	// PrePull, under Cordon, pulls the run's image on the node with a
	// short pod before cordoning it: an image that cannot be pulled fails
	// the node (reason PrePullFailed, retried under spec.retry) with the
	// node never cordoned. Defaults to true.
	// +optional
	PrePull *bool `json:"prePull,omitempty"`
	// Silences are Alertmanager silences created for each node before it
	// is cordoned and expired after it is uncordoned (see Silence). They
	// need Cordon. At most MaxSilences.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	Silences []Silence `json:"silences,omitempty"`
	// SilencesRequired, when true (the default), starts no node whose
	// silences could not all be created: the node is not cordoned, and the
	// failure (reason SilenceFailed) is an infrastructure failure retried
	// under spec.retry. False: a Warning Event SilenceFailed, and the node
	// goes on without the silence.
	// +optional
	SilencesRequired *bool `json:"silencesRequired,omitempty"`
}

// DrainSpec is how a node is drained before its run (kubectl drain's flags).
// +kubebuilder:validation:XValidation:rule="!has(self.onTimeout) || self.onTimeout != 'Force' || has(self.timeout)",message="onTimeout: Force needs an explicit timeout"
type DrainSpec struct {
	// Timeout bounds the drain. Defaults to 5m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// PodSelector, when set, evicts only the pods matching this label
	// selector (kubectl drain --pod-selector), e.g. "app!=monitoring".
	// +optional
	PodSelector string `json:"podSelector,omitempty"`
	// DeleteEmptyDirData evicts pods with emptyDir volumes too, whose data
	// is lost (kubectl drain --delete-emptydir-data). Defaults to false:
	// such a pod makes the drain fail.
	// +optional
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`
	// GracePeriodSeconds overrides each pod's termination grace period
	// (kubectl drain --grace-period). Defaults to the pod's own.
	// +kubebuilder:validation:Minimum=0
	// +optional
	GracePeriodSeconds *int32 `json:"gracePeriodSeconds,omitempty"`
	// OnTimeout is what happens to a drain that did not finish within
	// Timeout: Retry (the default: an infrastructure failure, DrainFailed,
	// retried under spec.retry), Skip (uncordon, back to Pending, retried
	// after spec.retry.maxBackoff without counting as a failure) or Force
	// (delete the remaining pods instead of evicting them, ignoring their
	// PodDisruptionBudgets). See docs/nodescript-drains.md.
	// +kubebuilder:validation:Enum=Retry;Skip;Force
	// +optional
	OnTimeout string `json:"onTimeout,omitempty"`
}

// ReapplyPolicy says when a node that ran the current spec successfully
// runs it again. At least one of OnReboot, Interval and Schedule is set;
// any may be combined (a node runs again when any of them makes it due).
// +kubebuilder:validation:XValidation:rule="(has(self.onReboot) && self.onReboot) || has(self.interval) || (has(self.schedule) && size(self.schedule) > 0)",message="set onReboot: true, interval (e.g. 24h), schedule (e.g. '0 3 * * *'), or several"
type ReapplyPolicy struct {
	// Schedule, when set, runs the script again on a node whose last
	// success (of the current spec, or NotNeeded) is older than the
	// schedule's latest activation before now, e.g. "0 3 * * 0" (Sundays
	// at 03:00). A standard 5-field cron expression (minute hour
	// day-of-month month day-of-week, or a descriptor such as @daily; not
	// @every: that is interval), parsed by github.com/robfig/cron/v3's
	// standard parser, in UTC unless it starts with CRON_TZ=ZONE (an IANA
	// zone, e.g. "CRON_TZ=Europe/Berlin 0 3 * * 0"). It must fire at
	// least once in the next 5 years. Defaults to none. See
	// docs/nodescript-lifecycle.md.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule,omitempty"`
	// OnReboot, when true, runs the script again on a node whose
	// status.nodeInfo.bootID differs from the boot ID recorded when its
	// last run succeeded: for changes that do not survive a reboot (a
	// sysctl, a file on tmpfs, a loaded module). Defaults to false.
	// +optional
	OnReboot bool `json:"onReboot,omitempty"`
	// Interval, when set, runs the script again on a node once its last
	// success is this old (drift correction), e.g. 24h. At least 1m.
	// Defaults to none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="must be at least 1m, e.g. 24h"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// MaintenanceWindow is a recurring time of day, on some days of the week,
// in a time zone, when runs may start. Start and End are "HH:MM" (24 h);
// an End at or before Start closes the window the next day (an overnight
// window: 22:00 to 04:00). Days are the days the window opens on. Times
// are wall-clock times in TimeZone, so the window follows daylight saving
// time (a Start that does not exist on the day of a DST change is the
// wall-clock time it normalises to).
type MaintenanceWindow struct {
	// Days the window opens on: Mon, Tue, Wed, Thu, Fri, Sat, Sun. Empty
	// means every day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	Days []string `json:"days,omitempty"`
	// Start is when the window opens, "HH:MM". Required.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// End is when the window closes, "HH:MM"; at or before Start it closes
	// the next day. Required.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`
	// TimeZone is an IANA time zone name, e.g. Europe/Berlin. Defaults to UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// NodeScriptStatus is the observed state of the rollout. Per-node state
// lives in annotations on the nodes (see the watcher package).
type NodeScriptStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SpecHash identifies what runs: script, verify and rollback scripts,
	// backend and timeout. A node that ran this hash is not run again.
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// Stage is Canary, Soaking, AwaitingPromotion, Rolling, Complete or Halted.
	// +optional
	Stage string `json:"stage,omitempty"`
	// Nodes is the number of selected nodes; the counts below are per phase.
	// +optional
	Nodes      int32 `json:"nodes"`
	Pending    int32 `json:"pending"`
	Running    int32 `json:"running"`
	Succeeded  int32 `json:"succeeded"`
	Failed     int32 `json:"failed"`
	RolledBack int32 `json:"rolledBack"`
	// NotNeeded counts the nodes whose spec.checkScript said the script is
	// not needed (exit 0).
	// +optional
	NotNeeded int32 `json:"notNeeded,omitempty"`
	// NextWindow is when spec.window next opens, while it is closed and
	// nodes wait for it. Unset otherwise.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`
	// Blocked lists the nodes held back by spec.blockingPodSelector when
	// last looked at, each as "NODE: NAMESPACE/POD" (the first pod found).
	// +optional
	// +listType=atomic
	Blocked []string `json:"blocked,omitempty"`
	// DrainBlocked lists the nodes not cordoned because their drain would
	// be refused when last checked (spec.maintenance.drain), each as
	// "NODE: PDB NAMESPACE/NAME blocks pod NAMESPACE/NAME" (or the check's
	// error).
	// +optional
	// +listType=atomic
	DrainBlocked []string `json:"drainBlocked,omitempty"`
	// NextStart is when the next node may start under
	// spec.rollout.postCompleteDelay, while nodes wait for it. Unset
	// otherwise.
	// +optional
	NextStart *metav1.Time `json:"nextStart,omitempty"`
	// Gates is what the watcher last saw of each of spec.gates.
	// +optional
	// +listType=map
	// +listMapKey=name
	Gates []GateStatus `json:"gates,omitempty"`
	// Conditions: Progressing, Halted, Complete, Gated.
	// Analysis is the last check of spec.rollout.analysis, when set.
	// +optional
	Analysis *AnalysisStatus `json:"analysis,omitempty"`
	// Calendars is what the watcher last saw of each of spec.windowRefs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Calendars []CalendarStatus `json:"calendars,omitempty"`
	// Durations are the step durations learned from the runs (the newest
	// samples per step, with their p50 and p95).
	// +optional
	Durations *Durations `json:"durations,omitempty"`
	// Forecast is the rollout's expected course (nodes left, windows
	// needed, ETA), while it is not over.
	// +optional
	Forecast *Forecast `json:"forecast,omitempty"`
	// Hooks is the progress of spec.hooks.preRollout and postRollout.
	// +optional
	Hooks *HooksStatus `json:"hooks,omitempty"`
	// Notifications is, per target of spec.notify, what was sent and the
	// last delivery or error.
	// +optional
	// +listType=map
	// +listMapKey=url
	Notifications []NotificationStatus `json:"notifications,omitempty"`
	// Uninstall is the progress of spec.uninstallScript once the
	// NodeScript is being deleted (types_lifecycle.go).
	// +optional
	Uninstall *UninstallStatus `json:"uninstall,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AddToScheme registers NodeScript, MaintenanceBudget and their lists.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NodeScript{}, &NodeScriptList{}, &MaintenanceBudget{}, &MaintenanceBudgetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
