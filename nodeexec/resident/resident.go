// Package resident installs nodeexec's agent on every node as a DaemonSet
// ("resident agents"), finds a node's agent pod, removes them all, and wraps
// the nsenter and runtime backends so that they exec into the node's
// resident agent instead of creating a pod: the run then costs one exec
// (about the time of `kubectl exec`), not a pod start.
//
// What Install creates, all labelled app.kubernetes.io/managed-by=nodeexec,
// app.kubernetes.io/component=agent and nodeexec.io/run-id=<install ID>:
//
//   - the namespace (default nodeexec-system), labelled
//     pod-security.kubernetes.io/enforce=privileged;
//   - the DaemonSet nodeexec-agent: privileged, hostPID, the node's root
//     filesystem read-only at /host (for the runtime sockets), tolerating
//     every taint, tiny requests (5m CPU, 16Mi memory), no service account
//     token, a configurable priorityClassName; its container runs
//     `nodeexec agent hold`, which only waits for SIGTERM.
//
// Resident agents have no deadline: they live until Uninstall, which deletes
// the DaemonSet and the namespace (and with it every agent pod) and waits
// until they are gone.
//
// All traffic goes through the API server (pods/exec): no agent listens on
// any port.
//
// # Permissions
//
// Install and Uninstall: create, get, delete on namespaces; create, get,
// update, delete on daemonsets in the namespace; list pods there. Using the
// agents (Find, Wrap): list pods and create pods/exec in the namespace.
package resident

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Names and labels.
const (
	// DefaultNamespace holds the DaemonSet and its pods.
	DefaultNamespace = "nodeexec-system"
	// DaemonSetName is the DaemonSet's name.
	DaemonSetName = "nodeexec-agent"
	// LabelComponent and ComponentAgent mark the agent objects and pods.
	LabelComponent = "app.kubernetes.io/component"
	ComponentAgent = "agent"
	// LabelPodSecurity is the Pod Security admission label set to "privileged"
	// on the namespace.
	LabelPodSecurity = "pod-security.kubernetes.io/enforce"
	// DefaultTimeout bounds Install's and Uninstall's wait.
	DefaultTimeout = 3 * time.Minute
	// PollInterval is how often Install and Uninstall check progress.
	PollInterval = 500 * time.Millisecond
)

// Options configure Install, Uninstall and BuildDaemonSet.
type Options struct {
	// Namespace for the DaemonSet; created by Install, deleted by Uninstall.
	// Defaults to DefaultNamespace.
	Namespace string
	// Image is the agent image. Defaults to nsenter.DefaultAgentImage.
	Image string
	// ImagePullPolicy defaults to IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets names secrets in Namespace for pulling Image. Optional.
	ImagePullSecrets []string
	// PriorityClassName of the agent pods, e.g. "system-node-critical". Optional.
	PriorityClassName string
	// Requests of the agent container. Defaults to 5m CPU and 16Mi memory.
	Requests corev1.ResourceList
	// InstallID is the nodeexec.LabelRunID value on everything Install
	// creates. Defaults to a timestamp-based ID.
	InstallID string
	// Timeout bounds the wait of Install (every node's agent available) and
	// Uninstall (everything gone). Defaults to DefaultTimeout.
	Timeout time.Duration
}

// withDefaults fills in defaults and validates o.
func (o Options) withDefaults(now time.Time) (Options, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return o, fmt.Errorf("resident: invalid namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Image == "" {
		o.Image = nsenter.DefaultAgentImage
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return o, fmt.Errorf("resident: invalid image pull policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	if o.Requests == nil {
		o.Requests = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("5m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		}
	}
	if o.InstallID == "" {
		o.InstallID = "install-" + now.UTC().Format("20060102t150405")
	}
	if msgs := validation.IsValidLabelValue(o.InstallID); len(msgs) > 0 {
		return o, fmt.Errorf("resident: invalid InstallID %q: %s", o.InstallID, strings.Join(msgs, "; "))
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

func objectLabels(installID string) map[string]string {
	return map[string]string{
		nodeexec.LabelManagedBy: nodeexec.ManagedByValue,
		LabelComponent:          ComponentAgent,
		nodeexec.LabelRunID:     installID,
	}
}

// Selector selects the agent pods (and the DaemonSet).
func Selector() string {
	return labels.SelectorFromSet(labels.Set{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, LabelComponent: ComponentAgent}).String()
}

// BuildNamespace returns the namespace Install creates. o must have its
// defaults filled in (Namespace, InstallID).
func BuildNamespace(o Options) *corev1.Namespace {
	l := objectLabels(o.InstallID)
	l[LabelPodSecurity] = "privileged"
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: l}}
}

// BuildDaemonSet returns the agent DaemonSet (see the package
// documentation). It is a pure function of o, whose defaults must be filled
// in (Install does that).
func BuildDaemonSet(o Options) *appsv1.DaemonSet {
	l := objectLabels(o.InstallID)
	sel := map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, LabelComponent: ComponentAgent}
	pod := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:                     nsenter.AgentContainerName,
			Image:                    o.Image,
			ImagePullPolicy:          o.ImagePullPolicy,
			Command:                  []string{nsenter.AgentPath, "agent", "hold"},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			Resources:                corev1.ResourceRequirements{Requests: o.Requests},
			SecurityContext:          &corev1.SecurityContext{Privileged: ptr.To(true)},
			VolumeMounts:             []corev1.VolumeMount{runtimeexec.HostRootMount()},
		}},
		Volumes:                       []corev1.Volume{runtimeexec.HostRootVolumeSource()},
		HostPID:                       true,
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		PriorityClassName:             o.PriorityClassName,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
	}
	for _, name := range o.ImagePullSecrets {
		pod.ImagePullSecrets = append(pod.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: o.Namespace, Labels: l},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec:       pod,
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))},
			},
		},
	}
}

// Install creates (or updates) the namespace and the DaemonSet, then waits
// until the DaemonSet's current generation is rolled out and an agent is
// available on every node it schedules to. API errors are returned wrapped
// (a Forbidden one also wraps nodeexec.ErrForbidden); the wait ends with an
// error naming how many agents are available after o.Timeout.
func Install(ctx context.Context, client kubernetes.Interface, o Options) error {
	o, err := o.withDefaults(time.Now())
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	ns := BuildNamespace(o)
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return apiError("creating namespace "+o.Namespace, err)
		}
		cur, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
		if err != nil {
			return apiError("getting namespace "+o.Namespace, err)
		}
		if cur.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue {
			return fmt.Errorf("resident: namespace %s exists and is not managed by nodeexec: choose another namespace", o.Namespace)
		}
		if cur.DeletionTimestamp != nil {
			return fmt.Errorf("resident: namespace %s is being deleted (a recent uninstall): retry when it is gone", o.Namespace)
		}
	} else {
		log.V(1).Info("created namespace", "namespace", o.Namespace)
	}
	ds := BuildDaemonSet(o)
	dss := client.AppsV1().DaemonSets(o.Namespace)
	if _, err := dss.Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return apiError("creating daemonset "+o.Namespace+"/"+DaemonSetName, err)
		}
		cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			return apiError("getting daemonset", err)
		}
		cur.Labels, cur.Spec.Template = ds.Labels, ds.Spec.Template
		cur.Spec.UpdateStrategy = ds.Spec.UpdateStrategy
		if _, err := dss.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return apiError("updating daemonset", err)
		}
		log.V(1).Info("updated daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	} else {
		log.V(1).Info("created daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, PollInterval, o.Timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			return false, apiError("getting daemonset", err)
		}
		s := cur.Status
		last = fmt.Sprintf("%d of %d agents available, %d updated (generation %d observed %d)", s.NumberAvailable, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, cur.Generation, s.ObservedGeneration)
		return s.ObservedGeneration >= cur.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled, nil
	})
	if err != nil {
		return fmt.Errorf("resident: waiting for the agents in %s: %w (%s)", o.Namespace, err, last)
	}
	return nil
}

// Uninstall deletes the DaemonSet and the namespace (only if nodeexec manages
// it) and waits until both and every agent pod are gone. Absent objects are
// not an error.
func Uninstall(ctx context.Context, client kubernetes.Interface, o Options) error {
	o, err := o.withDefaults(time.Now())
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	prop := metav1.DeletePropagationForeground
	err = client.AppsV1().DaemonSets(o.Namespace).Delete(ctx, DaemonSetName, metav1.DeleteOptions{PropagationPolicy: &prop})
	switch {
	case err == nil:
		log.V(1).Info("deleted daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	case !apierrors.IsNotFound(err):
		return apiError("deleting daemonset", err)
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return apiError("getting namespace "+o.Namespace, err)
	case ns.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue:
		log.V(1).Info("namespace not managed by nodeexec: kept", "namespace", o.Namespace)
	default:
		if err := client.CoreV1().Namespaces().Delete(ctx, o.Namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return apiError("deleting namespace "+o.Namespace, err)
		}
		log.V(1).Info("deleted namespace", "namespace", o.Namespace)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, PollInterval, o.Timeout, true, func(ctx context.Context) (bool, error) {
		var left []string
		if _, err := client.AppsV1().DaemonSets(o.Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{}); err == nil {
			left = append(left, "daemonset")
		} else if !apierrors.IsNotFound(err) {
			return false, apiError("getting daemonset", err)
		}
		pods, err := client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector()})
		if err != nil {
			return false, apiError("listing agent pods", err)
		}
		if n := len(pods.Items); n > 0 {
			left = append(left, fmt.Sprintf("%d agent pods", n))
		}
		if ns, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{}); err == nil && ns.Labels[nodeexec.LabelManagedBy] == nodeexec.ManagedByValue {
			left = append(left, "namespace")
		} else if err != nil && !apierrors.IsNotFound(err) {
			return false, apiError("getting namespace", err)
		}
		last = strings.Join(left, ", ")
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("resident: waiting for the agents in %s to be gone: %w (left: %s)", o.Namespace, err, last)
	}
	return nil
}

// Find returns the name of a running, ready agent pod on node in namespace
// (DefaultNamespace when empty), and false when there is none (not
// installed, not yet started, or terminating). It lists pods with the agent
// label selector and a spec.nodeName field selector (RBAC: list pods).
func Find(ctx context.Context, client kubernetes.Interface, namespace, node string) (pod string, ok bool, err error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: Selector(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return "", false, apiError("listing agent pods in "+namespace, err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && ready(&p) {
			return p.Name, true, nil
		}
	}
	return "", false, nil
}

func ready(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == nsenter.AgentContainerName {
			return cs.Ready && cs.State.Running != nil
		}
	}
	return false
}

func apiError(what string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("resident: %s: %w: %s", what, nodeexec.ErrForbidden, err.Error())
	}
	return fmt.Errorf("resident: %s: %w", what, err)
}

// ErrUnsupported is returned by a Commander when the request cannot be run
// by a resident agent; the wrapped backend runs it instead.
var ErrUnsupported = errors.New("not supported by a resident agent")
