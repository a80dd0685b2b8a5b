package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// BudgetResource is MaintenanceBudget's plural resource name, for dynamic
// clients.
var BudgetResource = GroupVersion.WithResource("maintenancebudgets")

// MaintenanceBudget bounds how many of the nodes it selects may be out of
// service at once, whoever takes them out: the NodeScripts that name it
// (spec.maintenanceBudget) start a node that their run takes out of
// service (spec.maintenance.cordon, or spec.reboot) only while fewer than
// spec.maxUnavailable of its nodes are out of service for any reason:
// cordoned by anyone, NotReady, holding kured's reboot lock, under a
// system-upgrade-controller Plan that is applying, in a NodeScript's
// maintenance, or carrying a cluster-autoscaler or Karpenter disruption
// taint. The watcher writes its status. See docs/maintenancebudget.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=mbudget,categories=nodeexec
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Max",type=string,JSONPath=`.spec.maxUnavailable`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Unavailable",type=integer,JSONPath=`.status.unavailable`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MaintenanceBudget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MaintenanceBudgetSpec   `json:"spec"`
	Status MaintenanceBudgetStatus `json:"status,omitempty"`
}

// MaintenanceBudgetList is a list of MaintenanceBudgets.
//
// +kubebuilder:object:root=true
type MaintenanceBudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MaintenanceBudget `json:"items"`
}

// MaintenanceBudgetSpec says which nodes share the budget and how many of
// them may be out of service at once.
type MaintenanceBudgetSpec struct {
	// NodeSelector selects the nodes the budget covers. An empty selector
	// selects every node.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// MaxUnavailable is how many of the selected nodes may be out of
	// service at once: a count (1 or more) or a percentage of the selected
	// nodes (1% to 100%, rounded down, at least 1). Required.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="want a count of 1 or more, or a percentage from 1% to 100%"
	MaxUnavailable intstr.IntOrString `json:"maxUnavailable"`
}

// MaintenanceBudgetStatus is what the watcher last counted.
type MaintenanceBudgetStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Selected is the number of nodes the budget selects.
	Selected int32 `json:"selected"`
	// Unavailable is the number of selected nodes out of service.
	Unavailable int32 `json:"unavailable"`
	// MaxUnavailable is spec.maxUnavailable as a count of Selected.
	MaxUnavailable int32 `json:"maxUnavailable"`
	// Nodes lists the selected nodes out of service, by name, each with
	// why (see docs/maintenancebudget.md for the reasons).
	// +optional
	// +listType=map
	// +listMapKey=name
	Nodes []BudgetNode `json:"nodes,omitempty"`
	// Error, when set, is why the budget could not be counted (a source
	// that could not be read): while it is set, no NodeScript naming the
	// budget starts a node.
	// +optional
	Error string `json:"error,omitempty"`
}

// BudgetNode is one node out of service and why.
type BudgetNode struct {
	// Name of the node.
	Name string `json:"name"`
	// Reasons it is out of service, e.g. Unschedulable, NotReady,
	// KuredLock, SystemUpgrade/PLAN, NodeScript/NAME, Taint/KEY.
	// +listType=atomic
	Reasons []string `json:"reasons"`
}

// Bounds of spec.priority.
const (
	MinPriority = -1000000
	MaxPriority = 1000000
)

// BudgetFields are the NodeScript's fields that share nodes with other
// maintainers (inlined in NodeScriptSpec). None is part of the spec hash.
type BudgetFields struct {
	// MaintenanceBudget names the MaintenanceBudget this NodeScript's runs
	// count against: a node whose run takes it out of service
	// (spec.maintenance.cordon, or spec.reboot other than Never) starts only
	// while the budget has room; a node already out of service costs
	// nothing more. While it has none the NodeScript waits (condition
	// Progressing False, reason BudgetExhausted, naming the budget and the
	// nodes that use it). A budget that does not exist, or cannot be
	// counted, starts nothing (closed). Defaults to none.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	MaintenanceBudget string `json:"maintenanceBudget,omitempty"`
	// Exclusive, when true, never runs this NodeScript on a node while any
	// other NodeScript runs there, and no other NodeScript starts on a node
	// while this one runs there (the nodes' recorded states tell). Defaults
	// to false: only exclusive NodeScripts are kept apart from it.
	// +optional
	Exclusive bool `json:"exclusive,omitempty"`
	// Priority orders the NodeScripts waiting for room on the same
	// MaintenanceBudget: the higher starts first; ties go by name. From
	// -1000000 to 1000000. Defaults to 0.
	// +kubebuilder:validation:Minimum=-1000000
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	Priority int32 `json:"priority,omitempty"`
}
