package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Run records (see also package nodeexec/resident, TransportRecorded)
// close the port-forward path's audit gap. A run through a
// resident agent's listener is one pods/portforward request, whose audit
// event names the user and the agent pod but not the command. With agents
// installed with `agent install --transport recorded`, the client first creates, for each node
// of a run, a run record: a coordination.k8s.io/v1 Lease in the agents'
// namespace (RecordNamePrefix + a random name) whose annotations hold the
// node, the agent command line (recordedCommand, with AnnotationCommand) and
// its digest (AnnotationRecordDigest). The API server attributes that
// create, with its body at the Request audit level, to the user. The agent
// then reads the record named in the request, checks it (ConsumeRecord),
// deletes it — each record starts one command, once — and only then starts
// the command. The audit log so holds, for every command an agent started
// over a port-forward: who (the record's creator, the port-forward's user),
// what (the command line), where (the node, the agent pod) and when.

const (
	// EnvNodeName and EnvNamespace name the agent's node and namespace in
	// the environment of an agent that requires run records (the
	// DaemonSet sets them from the downward API).
	EnvNodeName  = "NODEEXEC_NODE_NAME"
	EnvNamespace = "NODEEXEC_NAMESPACE"
	// labelComponent is the well-known label that marks run records
	// ComponentRunRecord.
	labelComponent = "app.kubernetes.io/component"
	// RecordNamePrefix begins the name of every run record.
	RecordNamePrefix = "nodeexec-record-"
	// ComponentRunRecord is the LabelComponent value of run records.
	ComponentRunRecord = "run-record"
	// AnnotationRecordDigest holds the SHA-256 (lowercase hex) of the
	// record's command line and environment variable names (RecordDigest):
	// what the agent compares with the request it gets.
	AnnotationRecordDigest = "nodeexec.io/command-sha256"
	// AnnotationRecordEnv lists the names (a JSON array, sorted) of the
	// environment variables the command is given; their values are never
	// recorded. Absent: none.
	AnnotationRecordEnv = "nodeexec.io/env-names"
	// DefaultRecordTTL is how long after its creation (the API server's
	// creationTimestamp) an agent accepts a run record: the client creates
	// it just before it connects.
	DefaultRecordTTL = time.Minute
	// RecordClockSkew is the difference between the API server's clock and
	// a node's that ConsumeRecord tolerates on top of the TTL.
	RecordClockSkew = 30 * time.Second
	// maxRecordedCommand bounds AnnotationCommand on a run record, in
	// bytes (annotations hold 256 KiB in all); a longer command line is
	// recorded truncated, and the digest covers all of it.
	maxRecordedCommand = 128 << 10
)

// RecordSpec is what a run record holds.
type RecordSpec struct {
	// Name is the record's name: RecordNamePrefix and a random suffix.
	Name string
	// Namespace is the agents' namespace.
	Namespace string
	// Node is the node whose agent may start the command.
	Node string
	// Command is the agent command line (the form a record holds: without the inserted --spool and --timeout).
	Command []string
	// EnvNames are the names of the command's environment variables
	// (WireRequest.Env); any order.
	EnvNames []string
	// RunID labels the record (nodeexec.LabelRunID).
	RunID string
	// Holder is the client, recorded in spec.holderIdentity
	// ("<hostname>/<pid>").
	Holder string
	// TTL is how long the agent accepts the record; DefaultRecordTTL when 0.
	TTL time.Duration
}

// RecordDigest is the SHA-256, lowercase hex, of the JSON of the agent
// command line argv (without the --spool and --timeout inserted after the
// subcommand) and the sorted names of the
// command's environment variables. A pure function.
func RecordDigest(argv []string, envNames []string) string {
	names := append([]string{}, envNames...) // none: [], never null
	slices.Sort(names)
	b, _ := json.Marshal(struct {
		Command  []string `json:"command"`
		EnvNames []string `json:"envNames"`
	}{recordedCommand(argv), names})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// BuildRecord returns the run record of s, created at now (client clock:
// spec.acquireTime and the nodeexec.AnnotationDeadline). A pure function.
func BuildRecord(s RecordSpec, now time.Time) *coordinationv1.Lease {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = DefaultRecordTTL
	}
	names := slices.Clone(s.EnvNames)
	slices.Sort(names)
	cmd, _ := json.Marshal(recordedCommand(s.Command))
	if len(cmd) > maxRecordedCommand {
		cmd = append(cmd[:maxRecordedCommand:maxRecordedCommand], []byte("...(truncated)")...)
	}
	ann := map[string]string{
		nodeexec.AnnotationNode:     s.Node,
		nodeexec.AnnotationCommand:  string(cmd),
		AnnotationRecordDigest:      RecordDigest(s.Command, names),
		nodeexec.AnnotationDeadline: now.Add(ttl).UTC().Format(time.RFC3339),
	}
	if len(names) > 0 {
		b, _ := json.Marshal(names)
		ann[AnnotationRecordEnv] = string(b)
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name,
			Namespace: s.Namespace,
			Labels: map[string]string{
				nodeexec.LabelManagedBy: nodeexec.ManagedByValue,
				labelComponent:          ComponentRunRecord,
				nodeexec.LabelRunID:     s.RunID,
			},
			Annotations: ann,
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(s.Holder),
			LeaseDurationSeconds: ptr.To(int32(ttl / time.Second)),
			AcquireTime:          &metav1.MicroTime{Time: now},
		},
	}
}

// CreateRecord creates s's run record (RBAC: create leases in s.Namespace).
// Errors: the API error, wrapped (a Forbidden one also wraps
// nodeexec.ErrForbidden).
func CreateRecord(ctx context.Context, client kubernetes.Interface, s RecordSpec, now time.Time) error {
	_, err := client.CoordinationV1().Leases(s.Namespace).Create(ctx, BuildRecord(s, now), metav1.CreateOptions{})
	if err != nil {
		return recordAPIError("creating run record "+s.Namespace+"/"+s.Name, err)
	}
	return nil
}

// DeleteRecord deletes the run record name, if it is still there (RBAC:
// delete leases): a record that no agent consumed.
func DeleteRecord(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	err := client.CoordinationV1().Leases(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return recordAPIError("deleting run record "+namespace+"/"+name, err)
	}
	return nil
}

// ConsumeRecord is the agent's side: it gets the run record name in
// namespace (the agent's own), checks that it is a run record
// (labels), for node, for the request's command line and environment
// variable names (RecordDigest), created (API server clock) no more than
// its leaseDurationSeconds plus RecordClockSkew before now, and deletes it
// with preconditions on its UID and resourceVersion, so that a record
// starts one command once even when two requests name it. RBAC: get and
// delete leases in namespace.
//
// Errors say why the record is refused (missing, used, stale, for another
// node or command line) or could not be checked (an API error, wrapped):
// either way the agent starts nothing, and sends RecordRefusedPrefix and
// the error to the client, where it wraps ErrRecordRefused.
func ConsumeRecord(ctx context.Context, client kubernetes.Interface, namespace, name, node string, req WireRequest, now time.Time) error {
	if name == "" {
		return fmt.Errorf("the request names no run record, and this agent starts commands only with one (create a Lease %s... first: nodeexec does this for agents installed with --transport recorded)", RecordNamePrefix)
	}
	leases := client.CoordinationV1().Leases(namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("run record %s/%s not found (never created, or used already)", namespace, name)
	case err != nil:
		return fmt.Errorf("getting run record %s/%s: %w", namespace, name, err)
	}
	if l.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue || l.Labels[labelComponent] != ComponentRunRecord {
		return fmt.Errorf("Lease %s/%s is not a run record (labels %s=%s, %s=%s)", namespace, name, nodeexec.LabelManagedBy, nodeexec.ManagedByValue, labelComponent, ComponentRunRecord)
	}
	if got := l.Annotations[nodeexec.AnnotationNode]; got != node {
		return fmt.Errorf("run record %s/%s is for node %q, not this agent's %q", namespace, name, got, node)
	}
	if got, want := l.Annotations[AnnotationRecordDigest], RecordDigest(req.Command, slices.Collect(maps.Keys(req.Env))); got != want {
		return fmt.Errorf("run record %s/%s holds another command line (%s %s, the request's %s)", namespace, name, AnnotationRecordDigest, got, want)
	}
	ttl := DefaultRecordTTL
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		ttl = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	created := l.CreationTimestamp.Time
	if now.After(created.Add(ttl + RecordClockSkew)) {
		return fmt.Errorf("run record %s/%s is stale: created %s, accepted for %s (and %s of clock skew)", namespace, name, created.UTC().Format(time.RFC3339), ttl, RecordClockSkew)
	}
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return fmt.Errorf("run record %s/%s was used or changed meanwhile", namespace, name)
	case err != nil:
		return fmt.Errorf("deleting run record %s/%s: %w", namespace, name, err)
	}
	return nil
}

// CollectRecords deletes the run records in namespace whose
// nodeexec.AnnotationDeadline has passed at now (records no agent
// consumed: their client died between creating one and connecting), in
// every namespace when namespace is "", and returns their
// "namespace/name"s. RBAC: list and delete leases.
func CollectRecords(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]string, error) {
	list, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + labelComponent + "=" + ComponentRunRecord,
	})
	if err != nil {
		return nil, recordAPIError("listing run records", err)
	}
	var deleted []string
	var errs []error
	for i := range list.Items {
		l := &list.Items[i]
		deadline, perr := time.Parse(time.RFC3339, l.Annotations[nodeexec.AnnotationDeadline])
		if perr == nil && !now.After(deadline.Add(RecordClockSkew)) {
			continue
		}
		err := client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
		switch {
		case err == nil:
			deleted = append(deleted, l.Namespace+"/"+l.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, recordAPIError("deleting run record "+l.Namespace+"/"+l.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// recordAPIError wraps err, from an API request on run records, saying
// what was asked; a Forbidden one also wraps nodeexec.ErrForbidden.
func recordAPIError(what string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: %w: %s", what, nodeexec.ErrForbidden, err.Error())
	}
	return fmt.Errorf("%s: %w", what, err)
}
