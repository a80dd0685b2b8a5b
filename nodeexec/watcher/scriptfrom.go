package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// resolveScript reads the script of ns's spec.scriptFrom from its
// ConfigMap or Secret in the run namespace and returns a copy of ns as the
// rest of the reconcile is to see it, with the content's digest in
// ScriptDigest so that the spec hash follows it: a ConfigMap's content also
// as spec.script; a Secret's never copied anywhere. ns without scriptFrom is
// returned as it is. A missing object or key, an empty script or one over
// v1alpha1.MaxScriptBytes is an error naming the reference, recorded in an
// Event on ns. RBAC: get configmaps or secrets in the run namespace.
func (c *controller) resolveScript(ctx context.Context, ns *v1alpha1.NodeScript) (*v1alpha1.NodeScript, error) {
	f := ns.Spec.ScriptFrom
	if f == nil {
		return ns, nil
	}
	namespace := nodescript.RunNamespace(&ns.Spec)
	var (
		content string
		err     error
		what    string
	)
	if ref := f.ConfigMapKeyRef; ref != nil {
		what = fmt.Sprintf("spec.scriptFrom.configMapKeyRef: ConfigMap %s/%s key %s", namespace, ref.Name, ref.Key)
		content, err = configMapKey(ctx, c, namespace, ref)
	} else {
		ref := f.SecretKeyRef
		what = fmt.Sprintf("spec.scriptFrom.secretKeyRef: Secret %s/%s key %s", namespace, ref.Name, ref.Key)
		content, err = secretKey(ctx, c, namespace, ref)
	}
	switch {
	case err != nil:
	case content == "":
		err = fmt.Errorf("the script is empty")
	case len(content) > v1alpha1.MaxScriptBytes:
		err = fmt.Errorf("the script is %d bytes, more than %d (an exec argument)", len(content), v1alpha1.MaxScriptBytes)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonScriptFromFailed, "%v: nothing starts until it can be read", err)
		return nil, err
	}
	out := ns.DeepCopy()
	sum := sha256.Sum256([]byte(content))
	out.Spec.ScriptDigest = hex.EncodeToString(sum[:])
	if f.ConfigMapKeyRef != nil {
		out.Spec.Script = content
	}
	return out, nil
}

func configMapKey(ctx context.Context, c *controller, namespace string, ref *v1alpha1.KeyRef) (string, error) {
	cm, err := c.w.o.Client.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	v, ok := cm.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("no such key")
	}
	return v, nil
}

func secretKey(ctx context.Context, c *controller, namespace string, ref *v1alpha1.KeyRef) (string, error) {
	s, err := c.w.o.Client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("no such key")
	}
	return string(v), nil
}
