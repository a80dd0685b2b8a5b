package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// outputRecord is the ConfigMap that keeps the output of NodeScript ns's
// runs on node, as opted into by spec.recordOutput: data holds, per action
// (ActionRun, ActionVerify, ActionRollback), the end of its last output
// after Redact, at most MaxRecordedOutput bytes. It is owned by the
// NodeScript, so the garbage collector deletes it with the NodeScript. It
// is a pure function.
func outputRecord(ns *v1alpha1.NodeScript, node, hash string, outputs map[string]string, now time.Time) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      nodescript.OutputRecordName(ns.Name, node),
			Namespace: nodescript.RunNamespace(&ns.Spec),
			Labels: map[string]string{
				nodeexec.LabelManagedBy:  nodeexec.ManagedByValue,
				v1alpha1.LabelNodeScript: ns.Name,
			},
			Annotations: map[string]string{
				v1alpha1.AnnotationNode:       node,
				v1alpha1.AnnotationSpecHash:   hash,
				v1alpha1.AnnotationRecordedAt: now.UTC().Format(time.RFC3339),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript", Name: ns.Name, UID: ns.UID,
			}},
		},
		Data: map[string]string{},
	}
	for action, out := range outputs {
		cm.Data[action] = tail(nodescript.Redact(out), v1alpha1.MaxRecordedOutput)
	}
	return cm
}

// writeOutputRecord sets action's output in node's output record for ns,
// creating the record or updating it (the other actions' outputs kept; a
// record of an older spec hash is replaced). RBAC: configmaps create, get
// and update in the run namespace.
func writeOutputRecord(ctx context.Context, client kubernetes.Interface, ns *v1alpha1.NodeScript, node, hash, action, output string, now time.Time) error {
	want := outputRecord(ns, node, hash, map[string]string{action: output}, now)
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
		if next.Annotations[v1alpha1.AnnotationSpecHash] != hash || next.Data == nil {
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
