package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Silence is an Alertmanager silence the watcher creates for a node while
// the node is in maintenance for the NodeScript (spec.maintenance.silences):
// created before the node is cordoned, expired after it is uncordoned. See
// docs/nodescript-silences.md.
type Silence struct {
	// URL is the Alertmanager's base URL (http or https), e.g.
	// http://alertmanager.monitoring:9093; the watcher calls its API v2
	// under it (POST /api/v2/silences, DELETE /api/v2/silence/{id}). At most
	// MaxSilenceURLBytes bytes. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="want an http or https URL, e.g. http://alertmanager.monitoring:9093"
	URL string `json:"url"`
	// Matchers select the alerts silenced, in Alertmanager's matcher
	// syntax (amtool's: NAME=VALUE, NAME!=VALUE, NAME=~REGEX, NAME!~REGEX),
	// e.g. alertname=~"KubeNodeNotReady|KubeNodeUnreachable". Each must
	// have an operator. At least one, unless NodeLabel is set.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Matchers []string `json:"matchers,omitempty"`
	// NodeLabel, when set, adds the matcher NODELABEL="<the node's name>"
	// to Matchers, so that the silence covers only the node in maintenance,
	// e.g. instance or node. Defaults to none (the matchers as given).
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	NodeLabel string `json:"nodeLabel,omitempty"`
	// Duration is how long the silence lasts at most (its endsAt is its
	// creation plus Duration); it is expired earlier, once the node is back
	// in service. Defaults to the node's whole maintenance: the drain
	// timeout (spec.maintenance.drain.timeout, 5m, when draining) plus the
	// run timeout (spec.timeout, 10m) plus the reboot timeout
	// (spec.rebootTimeout, 15m, when spec.reboot is not Never) plus 10m.
	// Must be positive.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be a positive duration, e.g. 1h"
	Duration *metav1.Duration `json:"duration,omitempty"`
	// Comment is the silence's comment, before the watcher's own (which
	// names the NodeScript, the node and the spec hash). Defaults to none.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Comment string `json:"comment,omitempty"`
}
