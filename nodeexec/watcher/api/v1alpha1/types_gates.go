package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults and bounds of spec.gates.
const (
	// DefaultGateInterval is a gate's interval when it sets none.
	DefaultGateInterval = 30 * time.Second
	// MinGateInterval is the shortest interval a gate may set.
	MinGateInterval = time.Second
	// ConditionGated is the NodeScript condition type that is True while a
	// gate of spec.gates is closed (its message names the gates and what
	// each saw), False when all are open.
	ConditionGated = "Gated"
)

// Gate is a health gate (spec.gates): a signal read from Prometheus, from
// Alertmanager, or from Kubernetes objects through CEL, that must be open
// before a node starts, before automatic promotion and through the soak.
// A closed gate starts nothing new (runs in progress finish). A gate that
// cannot be read (server down, timeout, an answer it cannot use, a CEL
// evaluation error) is closed, with the error in status.gates. Exactly one
// of prometheus, alerts and cel is set.
//
// +kubebuilder:validation:XValidation:rule="(has(self.prometheus) ? 1 : 0) + (has(self.alerts) ? 1 : 0) + (has(self.cel) ? 1 : 0) == 1",message="set exactly one of prometheus, alerts and cel"
type Gate struct {
	// Name of the gate, unique among spec.gates: a DNS label (e.g.
	// no-critical-alerts). Status, Events and metrics name the gate by it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// For is how long the gate must be open without a break before it
	// counts as open (no flapping): an open gate that closes, even for one
	// check, starts the count again. Defaults to 0: open as soon as seen
	// open.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration of 0 or more, e.g. 2m"
	// +optional
	For *metav1.Duration `json:"for,omitempty"`
	// Interval is how often the gate is read: at most one query per
	// interval, whatever the number of nodes and reconciles. Defaults to
	// 30s; at least 1s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s, e.g. 30s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Prometheus is a PromQL instant query.
	// +optional
	Prometheus *PrometheusGate `json:"prometheus,omitempty"`
	// Alerts reads the firing alerts of an Alertmanager.
	// +optional
	Alerts *AlertsGate `json:"alerts,omitempty"`
	// CEL is an expression over Kubernetes objects.
	// +optional
	CEL *CELGate `json:"cel,omitempty"`
}

// PrometheusGate is open when its instant query returns no series (an
// alert-style query such as `ALERTS{severity="critical"}`), or, with
// Condition, when the query returns at least one value and every value
// satisfies it. The query runs at the time of the check (GET
// /api/v1/query).
type PrometheusGate struct {
	// URL of the Prometheus server (http or https), e.g.
	// http://prometheus.monitoring:9090.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Query is a PromQL expression, parsed at apply (an instant vector or
	// a scalar).
	// +kubebuilder:validation:MinLength=1
	Query string `json:"query"`
	// Condition, when set, is what every value must satisfy: an operator
	// (<, <=, >, >=, ==, !=) and a number, e.g. "< 0.05". Without it the
	// gate is open when the query returns no series.
	// +optional
	Condition string `json:"condition,omitempty"`
}

// AlertsGate is closed while Alertmanager has a firing alert (active: not
// silenced, not inhibited) that matches every matcher of Matchers and no
// matcher of Ignore (GET /api/v2/alerts).
type AlertsGate struct {
	// URL of the Alertmanager (http or https), e.g.
	// http://alertmanager.monitoring:9093.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Matchers an alert must all match to close the gate, in Alertmanager's
	// syntax: NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX (e.g.
	// severity=critical). Empty: every firing alert.
	// +optional
	// +listType=atomic
	Matchers []string `json:"matchers,omitempty"`
	// Ignore lists matchers, in the same syntax, of alerts that never close
	// the gate (an alert matching any of them is left out), e.g.
	// alertname=Watchdog.
	// +optional
	// +listType=atomic
	Ignore []string `json:"ignore,omitempty"`
}

// CELGate evaluates Expression over the object named by Resource (as
// `object`) or over the objects it selects (as the list `objects`); the
// gate is open when the expression is true. The expression is compiled
// and type-checked at apply in Kubernetes' CEL environment (its libraries:
// quantity, lists, regex, urls, ip, cidr, semver, format...), and its
// evaluation is cost-limited. RBAC: the watcher gets (name) or lists
// (selector) the resource: grant it that (see docs/nodescript-gates.md).
type CELGate struct {
	// Resource names the object(s) the expression reads.
	Resource GateResource `json:"resource"`
	// Expression is a CEL expression over `object` (resource.name set) or
	// `objects` (otherwise) whose result is a bool, e.g.
	// object.status.availableReplicas == object.spec.replicas, or
	// objects.filter(n, n.status.conditions.exists(c, c.type == 'Ready' && c.status != 'True')).size() <= 1.
	// +kubebuilder:validation:MinLength=1
	Expression string `json:"expression"`
}

// GateResource names Kubernetes objects: one by Name, or those matching
// Selector (every object of the kind when neither is set), in Namespace
// for a namespaced kind (every namespace when it is empty and Name is not
// set).
// +kubebuilder:validation:XValidation:rule="!(has(self.name) && has(self.selector))",message="set name or selector, not both"
type GateResource struct {
	// APIVersion of the kind, e.g. apps/v1 or v1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind, e.g. Deployment or Node.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Namespace of the object(s), for a namespaced kind.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of one object: the expression reads it as `object`.
	// +optional
	Name string `json:"name,omitempty"`
	// Selector of the objects: the expression reads them as `objects`.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// GateStatus is what the watcher last saw of a gate.
type GateStatus struct {
	// Name of the gate (spec.gates[].name).
	Name string `json:"name"`
	// Open is whether the gate counts as open: seen open, continuously for
	// its spec `for`.
	Open bool `json:"open"`
	// SeenOpen is whether the last check saw the gate open (Open then
	// waits for its spec `for` from Since).
	// +optional
	SeenOpen bool `json:"seenOpen,omitempty"`
	// Value is what the last check saw, short: the values of a query, the
	// firing alerts, the expression's result, or "error".
	// +optional
	Value string `json:"value,omitempty"`
	// Message says why the gate is open or closed, with the error of a
	// check that failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Since is when the checks last turned from closed to open or back
	// (SeenOpen changed): the start of its `for`. Kept in the status, it
	// survives a restart of the watcher.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastChecked is when the gate was last read.
	// +optional
	LastChecked *metav1.Time `json:"lastChecked,omitempty"`
}
