package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// MaxRecordedOutput is the most of one action's output an output record
// keeps, in bytes: the end of the output, from a line start when one falls
// within it.
const MaxRecordedOutput = 4 << 10

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

// RunNamespace is the namespace of a NodeScript's run pods and output
// records: spec.backend.namespace, DefaultNamespace when empty.
func RunNamespace(spec *v1alpha1.NodeScriptSpec) string {
	if spec.Backend.Namespace != "" {
		return spec.Backend.Namespace
	}
	return DefaultNamespace
}

// OutputRecordName is the name of the ConfigMap that keeps the output of
// NodeScript name on node: "NAME.NODE", or, when that is not a valid
// object name (over 253 characters), "NAME.h-" and a hash of the node's
// name. It is a pure function.
func OutputRecordName(name, node string) string {
	n := name + "." + node
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(node))
	return name + ".h-" + hex.EncodeToString(sum[:])[:20]
}

// OutputRecord is the ConfigMap that keeps the output of NodeScript ns's
// runs on node, as opted into by spec.recordOutput: data holds, per action
// (ActionRun, ActionVerify, ActionRollback), the end of its last output
// after Redact, at most MaxRecordedOutput bytes. It is owned by the
// NodeScript, so the garbage collector deletes it with the NodeScript. It
// is a pure function.
func OutputRecord(ns *v1alpha1.NodeScript, node, hash string, outputs map[string]string, now time.Time) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      OutputRecordName(ns.Name, node),
			Namespace: RunNamespace(&ns.Spec),
			Labels: map[string]string{
				nodeexec.LabelManagedBy: nodeexec.ManagedByValue,
				LabelNodeScript:         ns.Name,
			},
			Annotations: map[string]string{
				AnnotationNode:       node,
				AnnotationSpecHash:   hash,
				AnnotationRecordedAt: now.UTC().Format(time.RFC3339),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript", Name: ns.Name, UID: ns.UID,
			}},
		},
		Data: map[string]string{},
	}
	for action, out := range outputs {
		cm.Data[action] = tail(Redact(out), MaxRecordedOutput)
	}
	return cm
}

// writeOutputRecord sets action's output in node's output record for ns,
// creating the record or updating it (the other actions' outputs kept; a
// record of an older spec hash is replaced). RBAC: configmaps create, get
// and update in the run namespace.
func writeOutputRecord(ctx context.Context, client kubernetes.Interface, ns *v1alpha1.NodeScript, node, hash, action, output string, now time.Time) error {
	want := OutputRecord(ns, node, hash, map[string]string{action: output}, now)
	cms := client.CoreV1().ConfigMaps(want.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, want, metav1.CreateOptions{FieldManager: "nodeexec-watcher"})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), want.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		if next.Annotations[AnnotationSpecHash] != hash || next.Data == nil {
			next.Data = map[string]string{}
		}
		next.Labels, next.OwnerReferences = want.Labels, want.OwnerReferences
		next.Annotations = want.Annotations
		next.Data[action] = want.Data[action]
		_, err = cms.Update(ctx, next, metav1.UpdateOptions{FieldManager: "nodeexec-watcher"})
		return err
	})
	if err != nil {
		return fmt.Errorf("output record %s/%s of nodescript %s: %w", want.Namespace, want.Name, ns.Name, err)
	}
	return nil
}

// truncate is nodescript.Truncate.
func truncate(s string, n int) string { return nodescript.Truncate(s, n) }

// outputOf is node's output record's data in records, by the node
// annotation (nil when it has none).
func outputOf(records []corev1.ConfigMap, node string) map[string]string {
	for i := range records {
		if records[i].Annotations[AnnotationNode] == node {
			return records[i].Data
		}
	}
	return nil
}
