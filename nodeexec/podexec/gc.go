package podexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// CollectGarbage deletes the pods nodeexec created whose deadline has passed
// by now: pods labelled nodeexec.LabelManagedBy=nodeexec.ManagedByValue with
// a nodeexec.AnnotationDeadline before now. A run deletes its own pod, even
// when cancelled; such pods are left only by a client that was killed (the
// pod's activeDeadlineSeconds has stopped it by then, but the object stays).
// Pods without a deadline annotation, such as resident agents, are never
// touched. namespace "" means every namespace. It returns the deleted pods
// as "namespace/name". RBAC: list and delete on pods.
func CollectGarbage(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]string, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodeexec pods: %w", err)
	}
	var deleted []string
	var errs []error
	for _, p := range list.Items {
		deadline, err := time.Parse(time.RFC3339, p.Annotations[nodeexec.AnnotationDeadline])
		if err != nil || !deadline.Before(now) {
			continue
		}
		err = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(DeleteGracePeriod),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case err == nil:
			deleted = append(deleted, p.Namespace+"/"+p.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}
