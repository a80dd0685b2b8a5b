package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Notification events (spec.notify[].webhook.events), the "event" of each
// payload (docs/nodescript-notify.md).
const (
	// NotifyStarted: the first node of a spec hash starts (its checkScript
	// or its run).
	NotifyStarted = "Started"
	// NotifyNodeFailed: a node's run failed for good: spec.script exited
	// non-zero or timed out, spec.verifyScript failed, or spec.checkScript
	// failed (exit other than 0 and 1, or timed out), or an infrastructure
	// failure (pod lost, node not Ready) past spec.retry.limit. Sent when
	// the failure is recorded, before any rollback runs (its outcome is
	// in status and Events); an infrastructure failure with retries left
	// is not sent.
	NotifyNodeFailed = "NodeFailed"
	// NotifyHalted: the rollout became Halted (error budget, canary,
	// drain blocked, analysis).
	NotifyHalted = "Halted"
	// NotifyCompleted: the rollout became Complete.
	NotifyCompleted = "Completed"
)

// NotifyEvents are the events spec.notify may name, in the order a
// rollout sends them.
func NotifyEvents() []string {
	return []string{NotifyStarted, NotifyNodeFailed, NotifyHalted, NotifyCompleted}
}

// Notification is one target of spec.notify. Exactly one kind is set;
// today that is webhook.
type Notification struct {
	// Webhook POSTs each event as JSON to a URL.
	Webhook *WebhookNotification `json:"webhook"`
}

// WebhookNotification POSTs a NodeScriptNotification JSON document
// (Content-Type application/json; see docs/nodescript-notify.md) to URL
// for each event it names, asynchronously: a receiver that is slow, down or
// refusing never holds or fails the rollout.
type WebhookNotification struct {
	// URL is the receiver: an absolute http:// or https:// URL, without
	// user info or fragment, unique among spec.notify. http:// is allowed
	// (an in-cluster receiver); the payload then travels in clear, and
	// the signature (secretRef) still proves who sent it and that it was
	// not altered. Redirects are followed only to the same host.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/?#]+`
	URL string `json:"url"`
	// SecretRef names a key of a Secret in spec.backend.namespace (the run
	// pods' namespace, default nodeexec-system) holding an HMAC key: each
	// POST carries X-Nodeexec-Signature: sha256=HEX, the HMAC-SHA256 of the
	// request body under the key's bytes (as GitHub's webhooks). Unset:
	// the POST is not signed. A Secret or key that cannot be read fails
	// the delivery (retried, then NotificationFailed).
	// +optional
	SecretRef *NotifySecretRef `json:"secretRef,omitempty"`
	// Events are the events sent: Started, NodeFailed, Halted, Completed.
	// Empty (the default) sends them all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Enum=Started;NodeFailed;Halted;Completed
	Events []string `json:"events,omitempty"`
}

// NotifySecretRef is a key of a Secret in spec.backend.namespace.
type NotifySecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key in the Secret's data whose value is the HMAC key.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// NotificationStatus is what the watcher last did for one target of
// spec.notify (status.notifications, keyed by url).
type NotificationStatus struct {
	// URL of the target (spec.notify[].webhook.url).
	URL string `json:"url"`
	// SpecHash is the rollout Sent is about.
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// Sent are the rollout events (Started, Halted, Completed) of
	// SpecHash handed to delivery for this target: each is sent at most
	// once per spec hash, across watcher restarts.
	// +optional
	// +listType=atomic
	Sent []string `json:"sent,omitempty"`
	// LastEvent is the last event delivered (answered 2xx), with its node
	// for NodeFailed, its spec hash and when.
	// +optional
	LastEvent string `json:"lastEvent,omitempty"`
	// +optional
	LastNode string `json:"lastNode,omitempty"`
	// +optional
	LastSpecHash string `json:"lastSpecHash,omitempty"`
	// +optional
	LastDelivered *metav1.Time `json:"lastDelivered,omitempty"`
	// LastError is the last failed attempt's error ("EVENT: ERROR
	// (attempt N of M)"), and when; cleared by the next delivery.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// +optional
	LastErrorTime *metav1.Time `json:"lastErrorTime,omitempty"`
}
