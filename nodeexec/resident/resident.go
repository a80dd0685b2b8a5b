// Package resident installs nodeexec's agent on every node as a DaemonSet
// ("resident agents"), finds a node's agent pod, removes them all, and wraps
// the nsenter and runtime backends so that they run their command in the
// node's resident agent instead of creating a pod: the run then costs one
// port-forward request (less than half a `kubectl exec`), not a pod start.
//
// What Install creates, all labelled app.kubernetes.io/managed-by=nodeexec,
// app.kubernetes.io/component=agent and nodeexec.io/run-id=<install ID>:
//
//   - the namespace (default nodeexec-agents, distinct from deploy/'s
//     nodeexec-system that holds the watcher), labelled
//     pod-security.kubernetes.io/enforce=privileged, unless it exists
//     already and nodeexec manages it;
//   - the DaemonSet nodeexec-agent: privileged, hostPID (not hostNetwork),
//     the node's root filesystem read-only at /host (for the runtime
//     sockets), on every Linux node (nodeSelector kubernetes.io/os=linux,
//     no architecture: an image index serves each its own), tolerating
//     every taint, tiny requests (5m CPU, 16Mi
//     memory), no service account token, a configurable
//     priorityClassName; its container runs `nodeexec agent serve`, which
//     listens on 127.0.0.1:agent.ServePort inside the pod's own network
//     namespace (the pods carry agent.AnnotationServe) and keeps one
//     `nodeexec agent warm` process started ahead for the next request.
//
// Resident agents have no deadline: they live until Uninstall, which deletes
// the DaemonSet and, only when Install created it, the namespace (and with
// it every agent pod) and waits until they are gone. Each deletion checks
// the component=agent label first, so neither touches the watcher's objects.
// An agent that cannot start (an image that cannot be pulled) fails Install
// within seconds, and Install rolls back what it created.
//
// All traffic goes through the API server: a run reaches the agent's
// loopback listener through pods/portforward (see Wrap), or over pods/exec
// when nothing was started that way. The listener is reachable from no
// network: not the node's, not the pod network.
//
// # Trust boundary
//
// Whoever may create pods, pods/exec, pods/portforward or
// pods/ephemeralcontainers in the agents' namespace is root on every node:
// bind those rights there to nobody but the people who may run nodeexec
// with --use-resident.
//
// # Permissions
//
// Install and Uninstall: create, get, delete on namespaces; create, get,
// update, delete on daemonsets in the namespace; list pods there (and,
// optional, list events, for the registry's reason of a failed pull). Using
// the agents (FindAgent, Wrap): get daemonsets, list pods, and create and
// get pods/portforward (or create pods/exec, the fallback) in the
// namespace.
package resident

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// Names and labels.
const (
	// DefaultNamespace holds the DaemonSet and its pods. It is distinct from
	// deploy/'s nodeexec-system (the watcher), so that either installs and
	// uninstalls without touching the other.
	DefaultNamespace = "nodeexec-agents"
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
	// DefaultRollbackTimeout bounds Install's rollback after an agent that
	// cannot start.
	DefaultRollbackTimeout = 30 * time.Second
	// ListPageSize is the page size of the agent pod lists of ListAgents
	// and ReadyNodes: a client holds at most this many decoded pods at once.
	ListPageSize = 500
)

// Options configure Install, Uninstall and BuildDaemonSet.
type Options struct {
	// Namespace for the DaemonSet; created by Install, deleted by Uninstall.
	// Defaults to DefaultNamespace.
	Namespace string
	// Image is the agent image. Defaults to agent.DefaultImage.
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
	// Transport is how clients reach the agents. Defaults to
	// TransportPortForward.
	Transport Transport
}

// Transport is how clients reach the resident agents (Options.Transport),
// and with it what the API server's audit log records of a run.
type Transport string

const (
	// TransportPortForward: each agent listens on agent.ServePort (loopback,
	// in its pod's network namespace) and clients reach it through
	// pods/portforward, with pods/exec as the fallback. The fastest warm
	// path. The audit log records a port-forward to the agent pod (user,
	// pod, node through the pod), not the command.
	TransportPortForward Transport = "portforward"
	// TransportExec: the agents do not listen (their main process only
	// holds the pod, `nodeexec agent hold`), so every command reaches them
	// over pods/exec, whose audit record holds the command line in its
	// requestURI (command= parameters): who ran what, where, in the API
	// server's audit log, which the user cannot leave out. A port-forward
	// to an agent pod finds nothing to talk to. A run that passes
	// environment variables (never put on an exec's command line) gets a
	// pod of the wrapped backend instead. RBAC for clients: create
	// pods/exec.
	TransportExec Transport = "exec"
	// TransportRecorded: as TransportPortForward, but each agent starts a
	// port-forwarded command only with its run record (see agent.ConsumeRecord):
	// a Lease the client creates in the agents' namespace for the node and
	// the command line just before it connects, which the API server's
	// audit log attributes to the user, with the command line when the
	// audit policy records Lease creations at the Request level. The agent
	// reads and deletes it (one command per record) with its own service
	// account (RecordServiceAccount: get and delete leases in the
	// namespace, nothing else). Commands over the exec fallback need no
	// record: an exec's audit event holds its command line. RBAC for
	// clients: create (and delete, for records no agent used) leases in
	// the namespace, and TransportPortForward's.
	TransportRecorded Transport = "recorded"
)

// RecordServiceAccount is the service account of TransportRecorded's
// agent pods, bound to the Role of the same name (get and delete leases in
// the agents' namespace: the run records).
const RecordServiceAccount = "nodeexec-agent"

// ErrRecordRefused is wrapped by the error of a run that an agent requiring
// run records refused for its record (none found, used already, stale, or
// for another node or command line; see agent.ConsumeRecord): nothing ran.
// It wraps podexec.ErrNotStarted; Run does not fall back to exec or a pod
// for it.
var ErrRecordRefused = fmt.Errorf("the resident agent refused the run's record: %w", errRefused)

// withDefaults fills in defaults and validates o.
func (o Options) withDefaults(now time.Time) (Options, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return o, fmt.Errorf("resident: invalid namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Image == "" {
		o.Image = agent.DefaultImage
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
	switch o.Transport {
	case "":
		o.Transport = TransportPortForward
	case TransportPortForward, TransportExec, TransportRecorded:
	default:
		return o, fmt.Errorf("resident: invalid transport %q: want %s, %s or %s", o.Transport, TransportPortForward, TransportExec, TransportRecorded)
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
			Name:                     agent.ContainerName,
			Image:                    o.Image,
			ImagePullPolicy:          o.ImagePullPolicy,
			Command:                  agentCommand(o.Transport),
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			Resources:                corev1.ResourceRequirements{Requests: o.Requests},
			SecurityContext:          &corev1.SecurityContext{Privileged: ptr.To(true)},
			VolumeMounts:             []corev1.VolumeMount{agent.HostRootMount()},
		}},
		Volumes: []corev1.Volume{agent.HostRootVolumeSource()},
		HostPID: true,
		// Every Linux node, whatever its architecture (the image's index
		// has a manifest per platform); none of another OS, where the
		// static Linux agent cannot run.
		NodeSelector:                  map[string]string{corev1.LabelOSStable: "linux"},
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		PriorityClassName:             o.PriorityClassName,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
	}
	if o.Transport == TransportRecorded {
		pod.ServiceAccountName = RecordServiceAccount
		pod.AutomountServiceAccountToken = ptr.To(true)
		pod.Containers[0].Env = []corev1.EnvVar{
			{Name: agent.EnvNodeName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: agent.EnvNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		}
	}
	for _, name := range o.ImagePullSecrets {
		pod.ImagePullSecrets = append(pod.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: o.Namespace, Labels: l},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: agentAnnotations(o.Transport)},
				Spec:       pod,
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))},
			},
		},
	}
}

// agentCommand is the agent container's command for transport t: serve
// (listening for port-forwarded clients) or, for TransportExec, hold.
func agentCommand(t Transport) []string {
	switch t {
	case TransportExec:
		return []string{agent.Path, "agent", "hold"}
	case TransportRecorded:
		return []string{agent.Path, "agent", "serve", "--listen", agent.ServeAddress(), "--require-record"}
	}
	return []string{agent.Path, "agent", "serve", "--listen", agent.ServeAddress()}
}

// agentAnnotations are the agent pods' annotations for transport t: the
// port clients port-forward to (agent.AnnotationServe), none for
// TransportExec, whose clients then use exec (Agent.ServePort 0).
func agentAnnotations(t Transport) map[string]string {
	switch t {
	case TransportExec:
		return nil
	case TransportRecorded:
		return map[string]string{agent.AnnotationServe: strconv.Itoa(agent.ServePort), agent.AnnotationNsenterEnv: "true", agent.AnnotationRecord: agent.RecordRequired}
	}
	return map[string]string{agent.AnnotationServe: strconv.Itoa(agent.ServePort), agent.AnnotationNsenterEnv: "true"}
}

// BuildRecordRBAC returns TransportRecorded's service account for the
// agent pods, its Role (get and delete leases in the namespace: the run
// records; nothing else) and the RoleBinding between them, all named
// RecordServiceAccount. o must have its defaults filled in. A pure function.
func BuildRecordRBAC(o Options) (*corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: RecordServiceAccount, Namespace: o.Namespace, Labels: objectLabels(o.InstallID)}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: meta()}
	role := &rbacv1.Role{ObjectMeta: meta(), Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{coordinationv1.GroupName},
		Resources: []string{"leases"},
		Verbs:     []string{"get", "delete"},
	}}}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: meta(),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RecordServiceAccount},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: RecordServiceAccount, Namespace: o.Namespace}},
	}
	return sa, role, binding
}

// recordRBACObject is one of BuildRecordRBAC's objects (all named
// RecordServiceAccount), with the API calls that manage it.
type recordRBACObject struct {
	kind   string
	create func(context.Context) error
	get    func(context.Context) (metav1.Object, error)
	update func(ctx context.Context, cur metav1.Object) error // to BuildRecordRBAC's
	delete func(ctx context.Context, opts metav1.DeleteOptions) error
}

// recordRBACObjects are BuildRecordRBAC(o)'s objects in the order they are
// created (the reverse of their deletion).
func recordRBACObjects(client kubernetes.Interface, o Options) []recordRBACObject {
	sa, role, binding := BuildRecordRBAC(o)
	sas, roles, bindings := client.CoreV1().ServiceAccounts(o.Namespace), client.RbacV1().Roles(o.Namespace), client.RbacV1().RoleBindings(o.Namespace)
	return []recordRBACObject{{
		kind:   "serviceaccount",
		create: func(ctx context.Context) error { _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); return err },
		get:    func(ctx context.Context) (metav1.Object, error) { return sas.Get(ctx, sa.Name, metav1.GetOptions{}) },
		update: func(ctx context.Context, cur metav1.Object) error {
			c := cur.(*corev1.ServiceAccount)
			c.Labels = sa.Labels
			_, err := sas.Update(ctx, c, metav1.UpdateOptions{})
			return err
		},
		delete: func(ctx context.Context, opts metav1.DeleteOptions) error { return sas.Delete(ctx, sa.Name, opts) },
	}, {
		kind:   "role",
		create: func(ctx context.Context) error { _, err := roles.Create(ctx, role, metav1.CreateOptions{}); return err },
		get: func(ctx context.Context) (metav1.Object, error) {
			return roles.Get(ctx, role.Name, metav1.GetOptions{})
		},
		update: func(ctx context.Context, cur metav1.Object) error {
			c := cur.(*rbacv1.Role)
			c.Labels, c.Rules = role.Labels, role.Rules
			_, err := roles.Update(ctx, c, metav1.UpdateOptions{})
			return err
		},
		delete: func(ctx context.Context, opts metav1.DeleteOptions) error { return roles.Delete(ctx, role.Name, opts) },
	}, {
		kind: "rolebinding",
		create: func(ctx context.Context) error {
			_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		get: func(ctx context.Context) (metav1.Object, error) {
			return bindings.Get(ctx, binding.Name, metav1.GetOptions{})
		},
		update: func(ctx context.Context, cur metav1.Object) error {
			c := cur.(*rbacv1.RoleBinding)
			if c.RoleRef != binding.RoleRef { // immutable: recreate
				if err := bindings.Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
					return err
				}
				_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
				return err
			}
			c.Labels, c.Subjects = binding.Labels, binding.Subjects
			_, err := bindings.Update(ctx, c, metav1.UpdateOptions{})
			return err
		},
		delete: func(ctx context.Context, opts metav1.DeleteOptions) error {
			return bindings.Delete(ctx, binding.Name, opts)
		},
	}}
}

// applyRecordRBAC creates BuildRecordRBAC's objects, or updates those that
// carry the agent labels; it refuses one that exists without them. It
// returns the kinds it created, for the rollback.
func applyRecordRBAC(ctx context.Context, client kubernetes.Interface, o Options) (created []string, err error) {
	for _, obj := range recordRBACObjects(client, o) {
		what := obj.kind + " " + o.Namespace + "/" + RecordServiceAccount
		err := obj.create(ctx)
		if err == nil {
			created = append(created, obj.kind)
			continue
		}
		if !apierrors.IsAlreadyExists(err) {
			return created, apiError("creating "+what, err)
		}
		cur, err := obj.get(ctx)
		if err != nil {
			return created, apiError("getting "+what, err)
		}
		if !isAgentObject(cur.GetLabels()) {
			return created, fmt.Errorf("resident: %s exists and is not nodeexec's (labels %s=%s, %s=%s missing): choose another namespace (--namespace)",
				what, nodeexec.LabelManagedBy, nodeexec.ManagedByValue, LabelComponent, ComponentAgent)
		}
		if err := obj.update(ctx, cur); err != nil {
			return created, apiError("updating "+what, err)
		}
	}
	return created, nil
}

// deleteRecordRBAC deletes BuildRecordRBAC's objects in o.Namespace that
// carry the agent labels (of kinds, or all three when kinds is nil), in
// the reverse order of their creation. Absent ones are not an error.
func deleteRecordRBAC(ctx context.Context, client kubernetes.Interface, o Options, kinds []string) error {
	var errs []error
	objects := recordRBACObjects(client, o)
	for _, obj := range slices.Backward(objects) {
		if kinds != nil && !slices.Contains(kinds, obj.kind) {
			continue
		}
		what := obj.kind + " " + o.Namespace + "/" + RecordServiceAccount
		cur, err := obj.get(ctx)
		if apierrors.IsNotFound(err) || (kinds == nil && apierrors.IsForbidden(err)) {
			// Forbidden for Uninstall: a client without rights on RBAC
			// objects installed none (the namespace's deletion, when
			// Install created it, takes any with it).
			continue
		}
		if err != nil {
			errs = append(errs, apiError("getting "+what, err))
			continue
		}
		if !isAgentObject(cur.GetLabels()) {
			continue
		}
		uid := cur.GetUID()
		if err := obj.delete(ctx, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, apiError("deleting "+what, err))
		}
	}
	return errors.Join(errs...)
}

// Install creates (or updates) the namespace and the DaemonSet, then waits
// until the DaemonSet's current generation is rolled out and an agent is
// available on every node it schedules to.
//
// The namespace is created when it does not exist, and then labelled
// app.kubernetes.io/component=agent: Uninstall deletes only a namespace so
// labelled. An existing namespace is used as it is (for example deploy/'s
// nodeexec-system, or one made beforehand to hold an image pull secret), and
// kept by Uninstall; it is refused when its Pod Security enforce label names
// a level other than "privileged". An existing DaemonSet is updated only
// when it carries the agent labels.
//
// The wait watches the agent pods with one informer for the whole Install
// (label selector Selector() in o.Namespace: one list and one watch, RBAC:
// list and watch pods; it holds each pod trimmed to the fields checked
// here) and, every PollInterval, gets the DaemonSet and checks the
// informer's pods in memory (AgentPodFailure): the API requests per check
// are one, whether 5 or 5,000 nodes; at 5,000 the informer's list is the
// one large read.
//
// Errors: API errors wrapped (a Forbidden one also wraps
// nodeexec.ErrForbidden). An agent container that cannot start (an image
// that cannot be pulled, a rejected pull secret, a configuration error) ends
// the wait at once with an error wrapping the agent pod's *nodeexec.PodError
// (errors.Is(err, nodeexec.ErrImagePull) for pull failures; Image and
// Message name the image and the registry's reason), and so does one that
// started and then crash-loops (see AgentPodFailure), after Install rolled
// back what it did: it deletes the DaemonSet or namespace it created, or
// restores the DaemonSet's previous template; the error says which. Agents
// still unavailable after o.Timeout end with an error naming how many are
// available (nothing is rolled back then).
func Install(ctx context.Context, client kubernetes.Interface, o Options) error {
	o, err := o.withDefaults(time.Now())
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	var rb rollback
	ns := BuildNamespace(o)
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return apiError("creating namespace "+o.Namespace, err)
		}
		cur, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
		if err != nil {
			return apiError("getting namespace "+o.Namespace, err)
		}
		if lvl, set := cur.Labels[LabelPodSecurity]; set && lvl != "privileged" {
			return fmt.Errorf("resident: namespace %s enforces Pod Security level %q (label %s) and the agents are privileged pods: "+
				"choose another namespace (--namespace), or allow them: kubectl label namespace %s %s=privileged --overwrite",
				o.Namespace, lvl, LabelPodSecurity, o.Namespace, LabelPodSecurity)
		}
		if cur.DeletionTimestamp != nil {
			return fmt.Errorf("resident: namespace %s is being deleted (a recent uninstall): retry when it is gone", o.Namespace)
		}
	} else {
		rb.namespace = o.Namespace
		log.V(1).Info("created namespace", "namespace", o.Namespace)
	}
	if o.Transport == TransportRecorded {
		created, err := applyRecordRBAC(ctx, client, o)
		rb.rbac, rb.rbacOptions = created, o
		if err != nil {
			return rb.undo(ctx, client, err)
		}
	}
	ds := BuildDaemonSet(o)
	dss := client.AppsV1().DaemonSets(o.Namespace)
	if _, err := dss.Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return rb.undo(ctx, client, apiError("creating daemonset "+o.Namespace+"/"+DaemonSetName, err))
		}
		cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			return apiError("getting daemonset", err)
		}
		if !isAgentObject(cur.Labels) {
			return fmt.Errorf("resident: daemonset %s/%s exists and is not nodeexec's agent DaemonSet (labels %s=%s, %s=%s missing): choose another namespace (--namespace)",
				o.Namespace, DaemonSetName, nodeexec.LabelManagedBy, nodeexec.ManagedByValue, LabelComponent, ComponentAgent)
		}
		prev := cur.DeepCopy()
		cur.Labels, cur.Spec.Template = ds.Labels, ds.Spec.Template
		cur.Spec.UpdateStrategy = ds.Spec.UpdateStrategy
		if _, err := dss.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return apiError("updating daemonset", err)
		}
		rb.previous = prev
		log.V(1).Info("updated daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	} else {
		rb.daemonSet = o.Namespace
		log.V(1).Info("created daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	}
	watched, stop := watchAgentPods(ctx, client, o.Namespace)
	defer stop()
	var last string
	err = wait.PollUntilContextTimeout(ctx, PollInterval, o.Timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			return false, apiError("getting daemonset", err)
		}
		s := cur.Status
		last = fmt.Sprintf("%d of %d agents available, %d updated (generation %d observed %d)", s.NumberAvailable, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, cur.Generation, s.ObservedGeneration)
		if s.ObservedGeneration >= cur.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled {
			return true, nil
		}
		pods, err := watched()
		if err != nil {
			return false, err
		}
		if pe := agentPodFailure(cur, pods); pe != nil {
			pe = podexec.WithPullReason(ctx, client, pe)
			return false, rb.undo(ctx, client, fmt.Errorf("resident: the agent cannot start on node %s: %w", pe.Node, pe))
		}
		return false, nil
	})
	var pe *nodeexec.PodError
	if errors.As(err, &pe) {
		return err
	}
	if err != nil {
		return fmt.Errorf("resident: waiting for the agents in %s: %w (%s; nothing was rolled back: `nodeexec agent uninstall --namespace %s` removes them)", o.Namespace, err, last, o.Namespace)
	}
	return nil
}

// AgentPodFailure returns why an agent pod of ds cannot start, as a
// *nodeexec.PodError naming the pod, its node and, for pull failures, the
// image, or nil: a fatal waiting reason of the agent container in any pod
// phase (ErrImagePull, ImagePullBackOff, InvalidImageName,
// CreateContainerConfigError, RunContainerError, ...), or, in a pod of ds's
// current template (label pod-template-generation against ds's annotation
// deprecated.daemonset.template.generation; either missing counts as
// current), an agent container that started and then crash-loops: waiting
// in CrashLoopBackOff, or not ready, not running and restarted at least
// once (Reason the waiting reason, or "CrashLoopBackOff"; Message the
// restart count and the last exit code, reason and message). Only pods ds
// controls (owner reference UID) and not being deleted count; the first
// failing pod in order wins. A pure function.
func AgentPodFailure(ds *appsv1.DaemonSet, pods []corev1.Pod) *nodeexec.PodError {
	ptrs := make([]*corev1.Pod, len(pods))
	for i := range pods {
		ptrs[i] = &pods[i]
	}
	return agentPodFailure(ds, ptrs)
}

// agentPodFailure is AgentPodFailure over pointers (an informer's store).
func agentPodFailure(ds *appsv1.DaemonSet, pods []*corev1.Pod) *nodeexec.PodError {
	for _, p := range pods {
		if !ownedBy(p, ds) || p.DeletionTimestamp != nil {
			continue
		}
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			if cs.Name != agent.ContainerName {
				continue
			}
			if podexec.FatalWaiting(cs.State.Waiting) {
				if pe := podexec.PodFailure(p, cs.Name, p.Spec.NodeName); pe != nil {
					if pe.Node == "" {
						pe.Node = p.Spec.NodeName
					}
					return pe
				}
			}
			if pe := crashLooping(ds, p, cs); pe != nil {
				return pe
			}
		}
	}
	return nil
}

// Labels and annotations that tie a DaemonSet's pod to its template.
const (
	labelPodTemplateGeneration   = "pod-template-generation"
	annotationTemplateGeneration = "deprecated.daemonset.template.generation"
)

// crashLooping reports an agent container of p (a pod of ds) that started
// and then keeps exiting, or nil; pods of an older template of ds do not
// count (they are being replaced).
func crashLooping(ds *appsv1.DaemonSet, p *corev1.Pod, cs *corev1.ContainerStatus) *nodeexec.PodError {
	w := cs.State.Waiting
	looping := w != nil && w.Reason == "CrashLoopBackOff" ||
		cs.RestartCount > 0 && !cs.Ready && cs.State.Running == nil
	if !looping {
		return nil
	}
	if want, ok := ds.Annotations[annotationTemplateGeneration]; ok {
		if got, ok := p.Labels[labelPodTemplateGeneration]; ok && got != want {
			return nil
		}
	}
	reason := "CrashLoopBackOff"
	if w != nil && w.Reason != "" {
		reason = w.Reason
	}
	msg := fmt.Sprintf("container %q started and exited, restarted %d times", cs.Name, cs.RestartCount)
	if t := cs.LastTerminationState.Terminated; t != nil {
		msg += fmt.Sprintf("; last exit code %d", t.ExitCode)
		if t.Reason != "" {
			msg += " (" + t.Reason + ")"
		}
		if t.Message != "" {
			msg += ": " + strings.TrimSpace(t.Message)
		}
	} else if t := cs.State.Terminated; t != nil {
		msg += fmt.Sprintf("; exit code %d (%s)", t.ExitCode, t.Reason)
	}
	return &nodeexec.PodError{Node: p.Spec.NodeName, Namespace: p.Namespace, Pod: p.Name, Reason: reason, Message: msg}
}

// watchAgentPods starts one informer on the agent pods in namespace (label
// selector Selector(): one list, then one watch, resumed by client-go after
// a cut) and returns a function that gives its pods (an error while it has
// not synced and the API server refused it, e.g. RBAC list/watch pods
// Forbidden; nil pods and no error while it is still listing), and a stop
// function that ends the informer and waits for it. Each pod is held
// trimmed to what AgentPodFailure reads.
func watchAgentPods(ctx context.Context, client kubernetes.Interface, namespace string) (func() ([]*corev1.Pod, error), func()) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = Selector() }),
		informers.WithTransform(trimAgentPod))
	inf := f.Core().V1().Pods().Informer()
	var mu sync.Mutex
	var watchErr error
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		mu.Lock()
		watchErr = err
		mu.Unlock()
	})
	f.StartWithContext(ctx) // the logger of ctx, as the rest of Install
	pods := func() ([]*corev1.Pod, error) {
		if !inf.HasSynced() {
			mu.Lock()
			err := watchErr
			mu.Unlock()
			if err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) {
				return nil, apiError("watching agent pods", err)
			}
			return nil, nil
		}
		objs := inf.GetStore().List()
		out := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				out = append(out, p)
			}
		}
		return out, nil
	}
	return pods, func() {
		cancel()
		f.Shutdown()
	}
}

// trimAgentPod keeps of an agent pod what AgentPodFailure and
// podexec.PodFailure read, so that the informer of a 5,000-node Install
// holds a few hundred bytes per pod.
func trimAgentPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a deleted-final-state tombstone
	}
	t := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message, ContainerStatuses: p.Status.ContainerStatuses},
	}
	for _, c := range p.Spec.Containers {
		t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return t, nil
}

// rollback is what Install did, to undo on a failure that will not resolve.
type rollback struct {
	namespace string            // created, with everything in it
	daemonSet string            // namespace of the DaemonSet created in an existing namespace
	previous  *appsv1.DaemonSet // the DaemonSet before Install updated it
	rbac      []string          // kinds of BuildRecordRBAC's objects created
	// rbacOptions are the Options rbac was created with.
	rbacOptions Options
}

// undo rolls back and returns cause extended with what was done or is left.
// It runs even when ctx has ended, bounded by DefaultRollbackTimeout.
func (rb rollback) undo(ctx context.Context, client kubernetes.Interface, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultRollbackTimeout)
	defer cancel()
	prop := metav1.DeletePropagationForeground
	if rb.namespace == "" && len(rb.rbac) > 0 {
		if err := deleteRecordRBAC(ctx, client, rb.rbacOptions, rb.rbac); err != nil {
			cause = fmt.Errorf("%w; rolling back failed: the agents' service account, Role or RoleBinding %s may be left: %w", cause, RecordServiceAccount, err)
		} else {
			cause = fmt.Errorf("%w; rolled back: deleted the agents' %s %s, which this install created", cause, strings.Join(rb.rbac, ", "), RecordServiceAccount)
		}
	}
	switch {
	case rb.namespace != "":
		if err := client.CoreV1().Namespaces().Delete(ctx, rb.namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%w; rolling back failed: namespace %s (created by this install) is left: %w", cause, rb.namespace, err)
		}
		return fmt.Errorf("%w; rolled back: deleted namespace %s, which this install created (its deletion finishes in the background)", cause, rb.namespace)
	case rb.daemonSet != "":
		err := client.AppsV1().DaemonSets(rb.daemonSet).Delete(ctx, DaemonSetName, metav1.DeleteOptions{PropagationPolicy: &prop})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%w; rolling back failed: daemonset %s/%s is left: %w", cause, rb.daemonSet, DaemonSetName, err)
		}
		return fmt.Errorf("%w; rolled back: deleted daemonset %s/%s, which this install created", cause, rb.daemonSet, DaemonSetName)
	case rb.previous != nil:
		dss := client.AppsV1().DaemonSets(rb.previous.Namespace)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Labels, cur.Spec.Template, cur.Spec.UpdateStrategy = rb.previous.Labels, rb.previous.Spec.Template, rb.previous.Spec.UpdateStrategy
			_, err = dss.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("%w; rolling back failed: daemonset %s/%s keeps the new template: %w", cause, rb.previous.Namespace, DaemonSetName, err)
		}
		return fmt.Errorf("%w; rolled back: daemonset %s/%s has its previous template again", cause, rb.previous.Namespace, DaemonSetName)
	}
	return cause
}

// Uninstall deletes the agent DaemonSet (only when it carries the agent
// labels) and the namespace (only when Install created it: labelled
// managed-by=nodeexec and component=agent), and waits until they and every
// agent pod are gone. It never deletes a namespace it did not create, such
// as deploy/'s nodeexec-system holding the watcher. Absent objects are not
// an error.
func Uninstall(ctx context.Context, client kubernetes.Interface, o Options) error {
	o, err := o.withDefaults(time.Now())
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	prop := metav1.DeletePropagationForeground
	dss := client.AppsV1().DaemonSets(o.Namespace)
	cur, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return apiError("getting daemonset", err)
	case !isAgentObject(cur.Labels):
		return fmt.Errorf("resident: daemonset %s/%s is not nodeexec's agent DaemonSet (labels %s=%s, %s=%s missing): not deleted", o.Namespace, DaemonSetName,
			nodeexec.LabelManagedBy, nodeexec.ManagedByValue, LabelComponent, ComponentAgent)
	default:
		err := dss.Delete(ctx, DaemonSetName, metav1.DeleteOptions{PropagationPolicy: &prop, Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return apiError("deleting daemonset", err)
		}
		log.V(1).Info("deleted daemonset", "namespace", o.Namespace, "name", DaemonSetName)
	}
	if err := deleteRecordRBAC(ctx, client, o, nil); err != nil {
		return err
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return apiError("getting namespace "+o.Namespace, err)
	case !isAgentObject(ns.Labels):
		log.V(1).Info("namespace not created by agent install: kept", "namespace", o.Namespace)
	default:
		err := client.CoreV1().Namespaces().Delete(ctx, o.Namespace, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ns.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return apiError("deleting namespace "+o.Namespace, err)
		}
		log.V(1).Info("deleted namespace", "namespace", o.Namespace)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, PollInterval, o.Timeout, true, func(ctx context.Context) (bool, error) {
		var left []string
		if d, err := dss.Get(ctx, DaemonSetName, metav1.GetOptions{}); err == nil && isAgentObject(d.Labels) {
			left = append(left, "daemonset")
		} else if err != nil && !apierrors.IsNotFound(err) {
			return false, apiError("getting daemonset", err)
		}
		// One pod is enough to know some are left, so that the check
		// costs the same at 5 or 5,000 agents.
		pods, err := client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector(), Limit: 1})
		if err != nil {
			return false, apiError("listing agent pods", err)
		}
		switch {
		case len(pods.Items) == 0:
		case pods.Continue != "":
			left = append(left, "agent pods")
		default:
			left = append(left, fmt.Sprintf("%d agent pods", len(pods.Items)))
		}
		if ns, err := client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{}); err == nil && isAgentObject(ns.Labels) {
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

// isAgentObject reports whether labels mark an object of the agent
// install: managed-by=nodeexec and component=agent.
func isAgentObject(l map[string]string) bool {
	return l[nodeexec.LabelManagedBy] == nodeexec.ManagedByValue && l[LabelComponent] == ComponentAgent
}

// ownedBy reports whether ds is p's controller (owner reference UID).
func ownedBy(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.UID == ds.UID && ref.Kind == "DaemonSet"
}

// Agent is a node's resident agent.
type Agent struct {
	// Pod is the agent pod's name.
	Pod string
	// ServePort is the loopback port its agent listens on for
	// port-forwarded clients (the pod's agent.AnnotationServe); 0 when it
	// does not listen (an agent image from before the listener): it is
	// reached over exec.
	ServePort int
	// RequiresRecord: its agent starts a port-forwarded command only with
	// a run record (TransportRecorded; the pod's agent.AnnotationRecord).
	RequiresRecord bool
	// NsenterEnv: its agent's nsenter takes agent.EnvFromAgentFlag (the
	// pod's agent.AnnotationNsenterEnv).
	NsenterEnv bool
}

// Find returns the name of a running, ready agent pod on node in namespace
// (DefaultNamespace when empty), and false when there is none (not
// installed, not yet started, or terminating). See FindAgent.
func Find(ctx context.Context, client kubernetes.Interface, namespace, node string) (pod string, ok bool, err error) {
	a, ok, err := FindAgent(ctx, client, namespace, node)
	return a.Pod, ok, err
}

// FindAgent returns the running, ready agent on node in namespace
// (DefaultNamespace when empty), and false when there is none (not
// installed, not yet started, or terminating). Only a pod controlled by the
// agent DaemonSet (its owner reference carries the DaemonSet's UID) counts,
// so a pod that merely copies the agent labels cannot pose as an agent and
// receive users' commands and input. It gets the DaemonSet and lists pods
// with the agent label selector and a spec.nodeName field selector, both
// at once (one round trip; RBAC: get daemonsets, list pods).
func FindAgent(ctx context.Context, client kubernetes.Interface, namespace, node string) (Agent, bool, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	var (
		list    *corev1.PodList
		listErr error
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		list, listErr = client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
			LabelSelector: Selector(),
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
	})
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
	wg.Wait()
	switch {
	case apierrors.IsNotFound(err):
		return Agent{}, false, nil
	case err != nil:
		return Agent{}, false, apiError("getting the agent daemonset in "+namespace, err)
	case !isAgentObject(ds.Labels):
		return Agent{}, false, nil
	case listErr != nil:
		return Agent{}, false, apiError("listing agent pods in "+namespace, listErr)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == node && usable(p, ds) {
			return agentOf(p), true, nil
		}
	}
	return Agent{}, false, nil
}

// ReadyNodes returns the nodes on which a running, ready agent of the
// DaemonSet in namespace (DefaultNamespace when empty) serves, by the same
// rules as FindAgent, for a whole run at once (ListAgents: one DaemonSet
// get and one pod list; RBAC: get daemonsets, list pods). No DaemonSet: an
// empty set.
func ReadyNodes(ctx context.Context, client kubernetes.Interface, namespace string) (map[string]bool, error) {
	agents, err := ListAgents(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	nodes := make(map[string]bool, len(agents))
	for n := range agents {
		nodes[n] = true
	}
	return nodes, nil
}

// ListAgents returns the running, ready agent of each node (by node name)
// of the DaemonSet in namespace (DefaultNamespace when empty), by the same
// rules as FindAgent, for every node at once: one DaemonSet get and one list
// of the agent pods (label selector; paged by ListPageSize, so at 5,000
// nodes ten requests, each holding at most ListPageSize decoded pods in the
// client; RBAC: get daemonsets, list pods). No DaemonSet, or one without
// the agent labels: an empty map. A node with two usable agent pods (one
// being replaced) gets the first by name.
//
// Errors: API errors wrapped (a Forbidden one also wraps
// nodeexec.ErrForbidden).
func ListAgents(ctx context.Context, client kubernetes.Interface, namespace string) (map[string]Agent, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return map[string]Agent{}, nil
	case err != nil:
		return nil, apiError("getting the agent daemonset in "+namespace, err)
	case !isAgentObject(ds.Labels):
		return map[string]Agent{}, nil
	}
	agents := map[string]Agent{}
	pods := client.CoreV1().Pods(namespace)
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return pods.List(ctx, opts)
	})
	p.PageSize = ListPageSize
	err = p.EachListItem(ctx, metav1.ListOptions{LabelSelector: Selector()}, func(obj runtime.Object) error {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !usable(pod, ds) {
			return nil
		}
		if cur, seen := agents[pod.Spec.NodeName]; !seen || pod.Name < cur.Pod {
			agents[pod.Spec.NodeName] = agentOf(pod)
		}
		return nil
	})
	if err != nil {
		return nil, apiError("listing agent pods in "+namespace, err)
	}
	return agents, nil
}

// agentOf is the Agent of a usable agent pod.
func agentOf(p *corev1.Pod) Agent {
	port, _ := strconv.Atoi(p.Annotations[agent.AnnotationServe])
	if port <= 0 || port > 65535 {
		port = 0
	}
	return Agent{Pod: p.Name, ServePort: port, RequiresRecord: p.Annotations[agent.AnnotationRecord] == agent.RecordRequired,
		NsenterEnv: p.Annotations[agent.AnnotationNsenterEnv] == "true"}
}

// usable: p is an agent of ds that takes runs (running, ready, not being
// deleted).
func usable(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	return ownedBy(p, ds) && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && ready(p)
}

func ready(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == agent.ContainerName {
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
