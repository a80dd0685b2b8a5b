package v1alpha1

// Well-known strings of the NodeScript API: the labels, annotations, node
// condition types, Event reasons, phases, actions, stages, holds, finalizer
// and environment variables that the watcher writes on nodes, pods, Jobs,
// Events and NodeScript status, and that tools (kubectl, alerting, the
// nodeexec CLI, scripts) may read. They are part of the API contract: a
// value never changes within v1alpha1.

// Event reasons and the halt reason of canary analysis.
const (
	// ReasonAnalysisFailed is the reason of a canary's failure and of the
	// Halted condition when the analysis found a regression.
	ReasonAnalysisFailed = "AnalysisFailed"
	// ReasonCanaryRegressed: a check found the canaries worse than the
	// baseline or the threshold, with the numbers (Warning, on the
	// NodeScript).
	ReasonCanaryRegressed = "CanaryRegressed"
	// ReasonAnalysisInconclusive, ReasonAnalysisError: a check could not
	// judge (a canary without a series, no baseline) or failed (the query
	// failed); recorded when the verdict becomes so (Warning, on the
	// NodeScript). Promotion waits.
	ReasonAnalysisInconclusive = "AnalysisInconclusive"
	ReasonAnalysisError        = "AnalysisError"
	// ReasonAnalysisPassed: a check passed after one that did not (or the
	// first check passed) (Normal, on the NodeScript).
	ReasonAnalysisPassed = "AnalysisPassed"
)

// External gates by annotation (spec.hooks.beforeRun, spec.hooks.afterRun;
// docs/nodescript-annotations.md), after Flatcar's update operator: while
// a node waits, it carries the label LabelBeforeRun (or LabelAfterRun) with
// the NodeScript's name, for the controllers that act on it to find it;
// each sets its annotation to "true" when it is done; once all the gate's
// annotations are "true" the watcher removes them and the label, and goes
// on. Progress is NodeState.Awaiting (and AwaitingSince), so a restarted
// watcher resumes the wait.
const (
	// LabelBeforeRun is on a node waiting for spec.hooks.beforeRun; its
	// value is the NodeScript's name.
	LabelBeforeRun = "nodeexec.io/before-run"
	// LabelAfterRun is on a node waiting for spec.hooks.afterRun; its
	// value is the NodeScript's name.
	LabelAfterRun = "nodeexec.io/after-run"
)

// Values of NodeState.Awaiting.
const (
	// AwaitingBeforeRun: Phase Running, labelled LabelBeforeRun, waiting
	// for spec.hooks.beforeRun's annotations (not cordoned yet).
	AwaitingBeforeRun = "BeforeRun"
	// AwaitingBeforeRunDone: Phase Running, the annotations were all
	// "true" and are removed; the run (silences, cordon, drain, pod) starts
	// next.
	AwaitingBeforeRunDone = "BeforeRunDone"
	// AwaitingAfterRun: Phase Succeeded under spec.hooks.afterRun, the
	// gate not yet passed: once the node is uncordoned it is labelled
	// LabelAfterRun (AwaitingSince set) and waits for the annotations.
	// Decide counts the node as running meanwhile.
	AwaitingAfterRun = "AfterRun"
)

// Event reasons of the annotation gates (on the node).
const (
	// ReasonAwaitingAnnotations: the node was labelled and waits for the
	// gate's annotations.
	ReasonAwaitingAnnotations = "AwaitingAnnotations"
	// ReasonAnnotationsReady: every annotation was "true"; they and the
	// label were removed.
	ReasonAnnotationsReady = "AnnotationsReady"
	// ReasonBeforeRunTimeout: spec.hooks.beforeRun.timeout passed: an
	// infrastructure failure (the node's reason too), retried under
	// spec.retry; the node was not cordoned.
	ReasonBeforeRunTimeout = "BeforeRunTimeout"
	// ReasonAfterRunTimeout: spec.hooks.afterRun.timeout passed: the
	// node's run is recorded Failed with this reason (no rollback, cordon
	// or drain), counted against spec.rollout.maxFailures.
	ReasonAfterRunTimeout = "AfterRunTimeout"
)

// The run's place in the rollout, in the environment of the check, run and
// verify pods (docs/nodescript-annotations.md). A script may act on it,
// e.g. `kubeadm upgrade apply` on the first canary and `kubeadm upgrade
// node` on the others.
const (
	// EnvOrdinal is the node's 0-based index in the rollout's
	// deterministic order (Decision.Order: every selected node, sorted by
	// sha256 of node UID, NodeScript UID and spec hash; nodes that need no
	// run included), as a decimal; -1 when the node is not in it (no
	// longer selected).
	EnvOrdinal = "NODESCRIPT_ORDINAL"
	// EnvCanary is "true" on the rollout's canary nodes
	// (spec.rollout.canary, the first in order that need the script),
	// "false" elsewhere.
	EnvCanary = "NODESCRIPT_CANARY"
	// EnvAttempt is the pod's attempt for the spec (1-based;
	// NodeState.Attempts + 1 for a check or run: infrastructure retries
	// and reruns counted).
	EnvAttempt = "NODESCRIPT_ATTEMPT"
	// EnvBootID is the node's status.nodeInfo.bootID when the pod was
	// created (empty when unknown).
	EnvBootID = "NODESCRIPT_BOOT_ID"
)

// ReasonBlockedByPod: a node was not started because a pod matching
// spec.blockingPodSelector is on it (on the node).
const (
	ReasonBlockedByPod = "BlockedByPod"
)

// The other maintainers' marks the budget count reads (see BudgetCount).
const (
	// KuredLockAnnotation is the annotation on kured's DaemonSet holding
	// its reboot lock: one lock {"nodeID": ..., "created": ..., "TTL": ns},
	// or with --concurrency > 1 {"maxOwners": N, "locks": [{"nodeID": ...}]}.
	KuredLockAnnotation = "weave.works/kured-node-lock"
	// KuredRebootAnnotation is the node annotation kured (--annotate-nodes)
	// sets while it reboots the node.
	KuredRebootAnnotation = "weave.works/kured-reboot-in-progress"
)

// Why a node counts against a MaintenanceBudget (BudgetNode.Reasons).
const (
	BudgetUnschedulable = "Unschedulable"
	BudgetNotReady      = "NotReady"
	BudgetKuredLock     = "KuredLock"
	BudgetKuredReboot   = "KuredRebootInProgress"
	// BudgetPlanPrefix + PLAN: a system-upgrade-controller Plan applying.
	BudgetPlanPrefix = "SystemUpgrade/"
	// BudgetNodeScriptPrefix + NAME: in NodeScript NAME's maintenance.
	BudgetNodeScriptPrefix = "NodeScript/"
	// BudgetTaintPrefix + KEY: a disruption taint (DisruptionTaints).
	BudgetTaintPrefix = "Taint/"
)

// Event reasons and condition reasons of the budget and exclusivity.
const (
	// ReasonBudgetExhausted: a NodeScript waits for room on its
	// MaintenanceBudget (on the NodeScript; the Progressing reason).
	ReasonBudgetExhausted = "BudgetExhausted"
	// ReasonExclusiveWait: a node was not started because another
	// NodeScript runs there and one of them is exclusive (on the node).
	ReasonExclusiveWait = "ExclusiveWait"
)

// MaintenanceConditionName is the name under which the watcher keeps the
// Node condition MaintenanceConditionType (as a NodeScript's is kept under
// its name; NodeScript names are lower-case, so they never clash).
const (
	MaintenanceConditionName = "Maintenance"
)

// Reasons of MaintenanceConditionType.
const (
	ReasonHeldByNodeScript = "HeldByNodeScript"
	ReasonInService        = "InService"
)

// Events of spec.windowRefs (on the NodeScript).
const (
	// ReasonCalendarClosed: a MaintenanceCalendar the NodeScript names
	// closed (its windows closed, a blackout began, or it went missing).
	ReasonCalendarClosed = "CalendarClosed"
	// ReasonCalendarOpened: a MaintenanceCalendar the NodeScript names opened.
	ReasonCalendarOpened = "CalendarOpened"
)

// ConditionPrefix starts the type of every NodeScript's Node condition.
const (
	ConditionPrefix = "nodeexec.io/"
)

// Reasons of a NodeScript's Node condition (see NodeCondition).
const (
	ConditionApplied  = "Applied"
	ConditionFailed   = "Failed"
	ConditionPending  = "Pending"
	ConditionOutdated = "Outdated"
	// ConditionNotNeeded: spec.checkScript found the node fine (True).
	ConditionNotNeeded = "NotNeeded"
)

// Event reasons recorded on nodes and NodeScripts.
const (
	ReasonSucceeded      = "ScriptSucceeded"
	ReasonFailed         = "ScriptFailed"
	ReasonInfrastructure = "RunInfrastructureFailure"
	ReasonVerified       = "VerifySucceeded"
	ReasonVerifyFailed   = "VerifyFailed"
	ReasonRolledBack     = "RollbackSucceeded"
	ReasonRollbackFailed = "RollbackFailed"
	ReasonCordoned       = "Cordoned"
	ReasonUncordoned     = "Uncordoned"
	ReasonDrained        = "Drained"
	ReasonDrainFailed    = "DrainFailed"
	ReasonTaintRemoved   = "StartupTaintRemoved"
	ReasonHalted         = "Halted"
	ReasonComplete       = "Complete"
	ReasonPodCreate      = "PodCreateFailed"
	// ReasonOutputNotRecorded: spec.recordOutput is set and an output
	// record could not be written (on the NodeScript).
	ReasonOutputNotRecorded = "OutputNotRecorded"
	// ReasonLeftCordoned: the NodeScript that cordoned the node after a
	// failure was deleted; the node stays cordoned (on the node).
	ReasonLeftCordoned = "LeftCordoned"
	// ReasonRerun: a rerun request (nodeexec rerun) was applied: the node
	// runs the spec again (on the node).
	ReasonRerun = "RerunRequested"
	// ReasonRerunDropped: a rerun request for another spec, or on a node
	// not selected, was removed (on the node).
	ReasonRerunDropped = "RerunDropped"
	// ReasonRunNow: a run-now override (nodeexec run-now) is in effect,
	// with who asked and until when (on the NodeScript).
	ReasonRunNow = "RunNow"
	// ReasonCheckNotNeeded, ReasonCheckNeeded: spec.checkScript exited 0
	// (the node is NotNeeded) or 1 (the script runs next) (on the node).
	ReasonCheckNotNeeded = "CheckNotNeeded"
	ReasonCheckNeeded    = "CheckNeeded"
	// ReasonCheckFailed: spec.checkScript exited otherwise (126 or 127:
	// not found), or timed out: a failure, counted against the error budget,
	// with no rollback, cordon or drain (on the node, and the node's reason).
	ReasonCheckFailed = "CheckFailed"
	// ReasonRunNowExpired, ReasonRunNowInvalid, ReasonRunNowCancelled: the
	// run-now override ended, was unreadable, or was removed (on the
	// NodeScript).
	ReasonRunNowExpired   = "RunNowExpired"
	ReasonRunNowInvalid   = "RunNowInvalid"
	ReasonRunNowCancelled = "RunNowCancelled"
)

// Annotations of a NodeScript set by RunNow.
const (
	// AnnotationRunNow, on a NodeScript, is an RFC 3339 time until which
	// runs may start while spec.window is closed (not while spec.paused).
	// The watcher records it in an Event (RunNow, with AnnotationRunNowBy),
	// and removes it once expired (RunNowExpired) or unreadable
	// (RunNowInvalid).
	AnnotationRunNow = "nodeexec.io/run-now"
	// AnnotationRunNowBy says who set AnnotationRunNow: the user a
	// SelfSubjectReview names, or "unknown".
	AnnotationRunNowBy = "nodeexec.io/run-now-by"
)

// UnknownUser stands for the requester when no SelfSubjectReview could say
// who it is.
const (
	UnknownUser = "unknown"
)

// Stages of a rollout (NodeScriptStatus.Stage).
const (
	StageCanary            = "Canary"
	StageSoaking           = "Soaking"
	StageAwaitingPromotion = "AwaitingPromotion"
	StageRolling           = "Rolling"
	StageComplete          = "Complete"
	StageHalted            = "Halted"
)

// Holds: why a rollout that is not over starts nothing (Decision.Hold).
const (
	HoldPaused        = "Paused"
	HoldOutsideWindow = "OutsideMaintenanceWindow"
	// HoldBudget: the NodeScript's MaintenanceBudget has no room (or
	// cannot be counted) for any node it would start (budget.go).
	HoldBudget = "BudgetExhausted"
	// HoldGated: a gate of spec.gates is closed (Decision.Gates).
	HoldGated = "Gated"
)

// The unprivileged check pod (spec.check.privileged: false).
const (
	// CheckContainer is the name of the unprivileged check pod's container.
	CheckContainer = "check"
)

// Event reasons of the drain checks and of spec.maintenance.drain.onTimeout
// (on the node and on the NodeScript).
const (
	// ReasonDrainBlocked: a node was not cordoned because a dry-run
	// eviction of one of the pods its drain would evict was refused (a
	// PodDisruptionBudget, named), or the check failed; also the Halted
	// condition's reason when spec.maintenance.maxBlockedNodes is reached.
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonDrainSkipped: a drain did not finish within its timeout and
	// spec.maintenance.drain.onTimeout is Skip: the node was uncordoned and
	// is Pending again, until its NextRetry.
	ReasonDrainSkipped = "DrainSkipped"
	// ReasonDrainForced: a drain did not finish within its timeout and
	// spec.maintenance.drain.onTimeout is Force: the pods left are deleted
	// (not evicted), and once they are gone the run goes on.
	ReasonDrainForced = "DrainForced"
)

// HaltDrainBlocked begins Decision.HaltReason when the rollout halts on
// spec.maintenance.maxBlockedNodes.
const (
	HaltDrainBlocked = "drain blocked"
)

// Finalizer is on every NodeScript the watcher has reconciled. Deleting the
// NodeScript first runs spec.uninstallScript where it applies (uninstall.go;
// a node where it failed keeps its state annotation), then removes its annotations (state, rerun, ignore) and its
// condition from every node, then the finalizer; the garbage collector then deletes its run pods and output
// records (both owned by it). A node the NodeScript cordoned after a
// failure stays cordoned (a Warning Event, ReasonLeftCordoned, on the node
// says so). While no watcher runs, a deleted NodeScript waits for it;
// removing the finalizer by hand (kubectl patch nodescript NAME --type=json
// -p '[{"op":"remove","path":"/metadata/finalizers"}]') lets it go and
// leaves its annotations on the nodes.
const (
	Finalizer = "nodeexec.io/node-state"
)

// HoldWindowTooShort: the maintenance window is open, but no node that
// would start fits before it closes (spec.rollout.fitWindow).
const (
	HoldWindowTooShort = "WindowTooShort"
)

// ReasonWindowTooShort: no node fit before the window closes; once per
// window (on the NodeScript).
const (
	ReasonWindowTooShort = "WindowTooShort"
)

// Event reasons of spec.gates, recorded on the NodeScript.
const (
	// ReasonGateClosed: a gate stopped counting as open (or was closed
	// when first read), with what it saw.
	ReasonGateClosed = "GateClosed"
	// ReasonGateOpened: a closed gate counts as open again (seen open
	// continuously for its `for`).
	ReasonGateOpened = "GateOpened"
)

// The hooks of spec.hooks (docs/nodescript-hooks.md).
const (
	HookPreNode     = "preNode"
	HookPostNode    = "postNode"
	HookPreRollout  = "preRollout"
	HookPostRollout = "postRollout"
)

// Labels, annotations and environment of the hook Jobs.
const (
	// LabelHook is the hook a Job runs (HookPreNode, ...): on the Job and
	// its pods.
	LabelHook = "nodeexec.io/hook"
	// AnnotationHookNode is the node a node hook's Job is for.
	AnnotationHookNode = "nodeexec.io/node"
	// EnvHookName, EnvHookNode, EnvHook and EnvHookHash are set in each
	// container of a hook Job: the NodeScript, the node (node hooks only),
	// the hook and the spec hash.
	EnvHookName = "NODESCRIPT_NAME"
	EnvHookNode = "NODESCRIPT_NODE"
	EnvHook     = "NODESCRIPT_HOOK"
	EnvHookHash = "NODESCRIPT_HASH"
)

// Events and reasons of spec.hooks: HookStarted, HookSucceeded and
// HookFailed on the node (node hooks) or the NodeScript (rollout hooks);
// ReasonPreHookFailed is also a node state's reason.
const (
	ReasonHookStarted   = "HookStarted"
	ReasonHookSucceeded = "HookSucceeded"
	ReasonHookFailed    = "HookFailed"
	// ReasonPreHookFailed: the preNode hook Job failed or timed out: an
	// infrastructure failure of the node, retried under spec.retry; the
	// node was not cordoned for it.
	ReasonPreHookFailed = "PreHookFailed"
)

// Holds of spec.hooks.preRollout (Decision.Hold): its Job runs, or it
// failed and runs again after spec.retry's backoff.
const (
	HoldHookRunning = "HookRunning"
	HoldHookFailed  = "HookFailed"
)

// Hook progress: HookStatus.Phase, and the second half of NodeState.Hook
// ("preNode:Running", "postNode:Succeeded", ...).
const (
	HookRunning   = "Running"
	HookSucceeded = "Succeeded"
	HookFailed    = "Failed"
)

// The run's preparation under spec.maintenance (NodeState.Maintenance).
const (
	MaintenanceDraining = "Draining"
	MaintenanceDrained  = "Drained"
)

// Delivery of spec.notify (docs/nodescript-notify.md).
const (
	// ReasonNotificationFailed: a notification could not be delivered
	// after its attempts, or was dropped (Warning, on the NodeScript).
	ReasonNotificationFailed = "NotificationFailed"
	// NotificationAPIVersion and NotificationKind identify the payload.
	NotificationAPIVersion = "nodeexec.io/v1alpha1"
	NotificationKind       = "NodeScriptNotification"
	// HeaderSignature carries "sha256=HEX", the HMAC-SHA256 of the body
	// under the key spec.notify[].webhook.secretRef names (when set).
	HeaderSignature = "X-Nodeexec-Signature"
	// HeaderEvent carries the payload's event.
	HeaderEvent = "X-Nodeexec-Event"
	// HeaderDelivery identifies a delivery: the same on each attempt of it,
	// so a receiver can drop a retry of a POST it already processed.
	HeaderDelivery = "X-Nodeexec-Delivery"
)

// MaxTerminationLogTail is the most of a failed container's log that the
// kubelet keeps as its termination message (terminationMessagePolicy
// FallbackToLogsOnError), in bytes: the last 2,048 bytes of its last 80
// lines, cut anywhere, even inside a line or a character.
const (
	MaxTerminationLogTail = 2048
)

// MaxRecordedOutput is the most of one action's output an output record
// keeps, in bytes: the end of the output, from a line start when one falls
// within it.
const (
	MaxRecordedOutput = 4 << 10
)

// Annotations of an output record (besides LabelNodeScript and nodeexec's
// managed-by label).
const (
	// AnnotationNode names the node an output record is about (node names
	// may be longer than a label value).
	AnnotationNode = "nodeexec.io/node"
	// AnnotationSpecHash is the spec hash of the runs whose output the
	// record holds.
	AnnotationSpecHash = "nodeexec.io/spec-hash"
	// AnnotationRecordedAt is when the record was last written (RFC 3339).
	AnnotationRecordedAt = "nodeexec.io/recorded-at"
)

// Labels and annotations of the watcher's pods, besides nodeexec's own
// (managed-by, run ID = the spec hash, node, deadline, command).
const (
	// LabelNodeScript names the NodeScript a pod runs for.
	LabelNodeScript = "nodeexec.io/nodescript"
	// LabelAction is ActionCheck, ActionRun, ActionVerify or ActionRollback.
	LabelAction = "nodeexec.io/action"
	// AnnotationAttempt is the attempt number of the run (1 for the first).
	AnnotationAttempt = "nodeexec.io/attempt"
	// AnnotationBootID is the node's status.nodeInfo.bootID when the pod
	// was created: while a check or run pod goes, the pod is the node's
	// record of the run (see NodeState), and a failure on a node that
	// rebooted since is an infrastructure failure (NodeRebooted).
	AnnotationBootID = "nodeexec.io/boot-id"
)

// Actions: which of a NodeScript's scripts a pod runs.
const (
	// ActionCheck runs spec.checkScript, before ActionRun, on a node
	// where it is set.
	ActionCheck = "check"
	ActionRun   = "run"
	// ActionReboot runs spec.rebootCommand after a run that asks for a
	// reboot (spec.reboot).
	ActionReboot   = "reboot"
	ActionVerify   = "verify"
	ActionRollback = "rollback"
	// ActionUninstall runs spec.uninstallScript while the NodeScript is
	// deleted (uninstall.go); its pod has no owner reference.
	ActionUninstall = "uninstall"
)

// Environment variables the scripts see.
const (
	// EnvNode is the name of the node the script runs on.
	EnvNode = "NODE_NAME"
	// EnvNodeScript is the name of the NodeScript.
	EnvNodeScript = "NODESCRIPT"
	// EnvScript holds the script of spec.scriptFrom.secretKeyRef, which
	// the run evaluates (the kubelet reads it from the Secret).
	EnvScript = "NODESCRIPT_SCRIPT"
	// EnvRebootSentinel is spec.rebootSentinel, in the run's environment
	// under spec.reboot: IfRequired.
	EnvRebootSentinel = "NODESCRIPT_REBOOT_SENTINEL"
)

// HoldPostCompleteDelay is Decision.Hold while spec.rollout.postCompleteDelay
// has not passed since the last node succeeded: Decision.NextStart is
// when the next node may start.
const (
	HoldPostCompleteDelay = "PostCompleteDelay"
)

// Events and reasons of spec.postCompleteLabels (on the node).
const (
	// ReasonLabeled: the labels were put on the node after its success.
	ReasonLabeled = "PostCompleteLabeled"
	// ReasonLabelFailed: the labels could not be put on the node (the
	// patch failed); retried on the next reconcile.
	ReasonLabelFailed = "PostCompleteLabelFailed"
)

// ActionPrePull labels the pod that pulls a run's image on a node before
// the node is cordoned (spec.maintenance.prePull). It is not a run: its
// outcome is judged by prePullStep, never by PodOutcome, and recorded as
// the node's preparation (NodeState.Maintenance Pulling).
const (
	ActionPrePull = "prepull"
)

// MaintenancePulling is NodeState.Maintenance while the pre-pull pod
// (NodeState.Pod) pulls the run's image on a node that is not cordoned
// yet; the cordon (and drain) follow once it is pulled.
const (
	MaintenancePulling = "Pulling"
)

// Events and reasons of spec.maintenance.prePull (on the node).
const (
	// ReasonPrePulled: the run's image is on the node; it is cordoned next.
	ReasonPrePulled = "PrePulled"
	// ReasonPrePullFailed: the image could not be pulled (or the pod
	// pulling it did not run): an infrastructure failure, retried under
	// spec.retry, with the node never cordoned. Also the node state's reason.
	ReasonPrePullFailed = "PrePullFailed"
)

// Reasons a node that succeeded runs the current spec again (spec.reapply):
// its state's Reason while Pending, and the Event's reason on the node.
const (
	// ReasonReapplyOnReboot: the node rebooted (a new status.nodeInfo.bootID)
	// since its last run succeeded, and spec.reapply.onReboot is set.
	ReasonReapplyOnReboot = "ReapplyOnReboot"
	// ReasonReapplyInterval: the node's last success is older than
	// spec.reapply.interval.
	ReasonReapplyInterval = "ReapplyInterval"
	// ReasonReapplySchedule: the node's last success is older than the
	// latest activation of spec.reapply.schedule.
	ReasonReapplySchedule = "ReapplySchedule"
)

// MaintenanceRebooting is NodeState.Maintenance after a run that asked
// for a reboot (spec.reboot), until the node is back.
const (
	MaintenanceRebooting = "Rebooting"
)

// Events and reasons of spec.reboot (on the node).
const (
	// ReasonRebooting: the script succeeded and the node is to reboot.
	ReasonRebooting = "Rebooting"
	// ReasonRebooted: the node is back, Ready, with a new boot ID.
	ReasonRebooted = "Rebooted"
	// ReasonRebootTimeout: the node did not come back with a new boot ID
	// within spec.rebootTimeout: a failure (also the node state's reason).
	ReasonRebootTimeout = "RebootTimeout"
)

// Redacted replaces what Redact removes.
const (
	Redacted = "[REDACTED]"
)

// ReasonScriptFromFailed: spec.scriptFrom could not be read (on the
// NodeScript); nothing starts until it can.
const (
	ReasonScriptFromFailed = "ScriptFromFailed"
)

// Event reasons (on the Node) of spec.maintenance.silences; ReasonSilenceFailed
// is also the reason of the node's failure when a required silence could not
// be created.
const (
	ReasonSilenceCreated = "SilenceCreated"
	ReasonSilenceExpired = "SilenceExpired"
	ReasonSilenceFailed  = "SilenceFailed"
)

// SilenceCreatedBy is the createdBy of every silence the watcher creates.
const (
	SilenceCreatedBy = "nodeexec"
)

// Phases of a node in a rollout.
const (
	PhasePending    = "Pending"
	PhaseRunning    = "Running"
	PhaseSucceeded  = "Succeeded"
	PhaseFailed     = "Failed"
	PhaseRolledBack = "RolledBack"
	// PhaseNotNeeded: spec.checkScript exited 0, the node does not need
	// the script. Not a failure; the rollout counts it as done.
	PhaseNotNeeded = "NotNeeded"
)

// AnnotationPrefix is the domain of the per-node state annotations; a
// NodeScript named N keeps its state on each node under
// "N.nodescript.nodeexec.io/state".
const (
	AnnotationPrefix = "nodescript.nodeexec.io"
)

// Event reasons of spec.uninstallScript, on the node and on the NodeScript.
const (
	// ReasonUninstallStarted: the uninstall script's pod was created on
	// the node (on the node); the uninstall began (on the NodeScript).
	ReasonUninstallStarted = "UninstallStarted"
	// ReasonUninstallSucceeded: it exited 0 on the node (on the node);
	// on every node it was to run on (on the NodeScript).
	ReasonUninstallSucceeded = "UninstallSucceeded"
	// ReasonUninstallFailed: it failed on the node, or the node was not
	// Ready within UninstallNodeWait (a Warning, on the node); on some
	// nodes, named (a Warning, on the NodeScript, when the finalizer is
	// released).
	ReasonUninstallFailed = "UninstallFailed"
)

// Phases of UninstallRecord.
const (
	UninstallPending   = "Pending"
	UninstallRunning   = "Running"
	UninstallSucceeded = "Succeeded"
	UninstallFailed    = "Failed"
)
