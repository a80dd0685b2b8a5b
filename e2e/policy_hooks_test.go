//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestAdmissionPolicyHookJobs: under deploy/policy, a user who may create
// NodeScripts but not Jobs in the run namespace is refused a NodeScript
// with a spec.hooks Job (the watcher would create it there with the
// template's image and service account), with the policy's message naming
// the namespace and the user; the same NodeScript with annotation gates
// only is admitted, and a user who may create Jobs there is admitted with
// the hook. Server-side dry runs: nothing is created.
func TestAdmissionPolicyHookJobs(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	suffix := randomSuffix()
	user := "e2e-hook-author-" + suffix
	cleanupCtx := context.WithoutCancel(ctx)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"nodescripts"}, Verbs: []string{"create", "get"}},
	}}
	if _, err := env.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoles().Delete(cleanupCtx, user, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}}
	if _, err := env.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoleBindings().Delete(cleanupCtx, user, metav1.DeleteOptions{}) })
	cfg := rest.CopyConfig(env.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	author, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	backend := "  backend: {name: nsenter, image: 'nodeexec.local/agent:0.2.0', namespace: nodeexec-system}\n"
	hook := "  hooks:\n    preNode:\n      template: {spec: {template: {spec: {containers: [{name: h, image: 'busybox:stable'}]}}}}\n"
	gates := "  hooks:\n    beforeRun: {annotations: [example.com/ready]}\n"
	probe := nodeScriptObject(t, "e2e-policy-probe-"+suffix, "  script: 'true'\n  backend: {name: nsenter, image: 'evil.example/root:1'}\n")
	installPolicy(ctx, t, dyn, probe)
	dryRun := func(c dynamic.Interface, name, spec string) error {
		_, err := c.Resource(v1alpha1.Resource).Create(ctx, nodeScriptObject(t, name+suffix, "  script: 'true'\n"+backend+spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// RBAC reaches the authorizer within a moment: wait until the author
	// may create a NodeScript without hooks.
	if !waitFor(30*time.Second, func() bool { return dryRun(author, "e2e-hooks-plain-", "") == nil }) {
		t.Fatalf("%s cannot create a plain NodeScript: %v", user, dryRun(author, "e2e-hooks-plain-", ""))
	}
	err = dryRun(author, "e2e-hooks-job-", hook)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a preNode hook Job by a user who may not create Jobs: %v, want the policy's refusal", err)
	}
	for _, want := range []string{"spec.hooks: the watcher would create the hooks' Jobs in nodeexec-system", user + " may not create Jobs there", "nodeexec-nodescripts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	if err := dryRun(author, "e2e-hooks-gates-", gates); err != nil {
		t.Errorf("annotation gates only, by %s: %v, want admitted (they create no Job)", user, err)
	}
	if err := dryRun(dyn, "e2e-hooks-admin-", hook); err != nil {
		t.Errorf("a preNode hook Job by a user who may create Jobs in nodeexec-system: %v, want admitted", err)
	}
}
