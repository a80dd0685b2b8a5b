package testcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultServiceAccountTimeout bounds WaitDefaultServiceAccount: kube-controller-manager
// creates a namespace's "default" ServiceAccount within a second on a quiet cluster,
// and after an API server restart once its informers have relisted (tens of seconds).
const DefaultServiceAccountTimeout = 2 * time.Minute

// CreateNamespace creates a namespace named generateName plus a random suffix, with
// labels, and waits (WaitDefaultServiceAccount) until pods can be created in it. It
// returns the namespace's name. Errors are the API server's (create namespaces, get
// serviceaccounts) or the wait's.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, generateName string, labels map[string]string) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("testcluster: create namespace %s*: %w", generateName, err)
	}
	return ns.Name, WaitDefaultServiceAccount(ctx, cs, ns.Name)
}

// WaitDefaultServiceAccount waits up to DefaultServiceAccountTimeout until namespace
// has its "default" ServiceAccount: until then the API server refuses every pod in
// it ("error looking up service account"). It returns nil at once when it exists.
func WaitDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	return poll(ctx, DefaultServiceAccountTimeout, 100*time.Millisecond, "the default ServiceAccount of namespace "+namespace, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}
