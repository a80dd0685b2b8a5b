//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// nodeScriptObject is a NodeScript selecting no node, from the YAML of its
// spec's other fields (indented by four spaces, under spec:).
func nodeScriptObject(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	doc := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n" +
		"  nodeSelector: {matchLabels: {nodeexec-e2e: none}}\n" + spec
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return &unstructured.Unstructured{Object: m}
}

// installPolicy applies deploy/policy until the test ends and waits until
// the API server enforces it: a dry-run create of probe is refused.
func installPolicy(ctx context.Context, t *testing.T, dyn dynamic.Interface, probe *unstructured.Unstructured) {
	t.Helper()
	remove := applyKustomization(ctx, t, dyn, "../deploy/policy", nil)
	t.Cleanup(func() {
		remove()
		// The API server drops the policy a moment after its objects are
		// gone; until then it refuses every NodeScript (no parameters).
		if !waitFor(30*time.Second, func() bool {
			_, err := dyn.Resource(v1alpha1.Resource).Create(context.Background(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil
		}) {
			t.Errorf("the policy still refuses %s 30 s after its removal", probe.GetName())
		}
	})
	var err error
	if !waitFor(30*time.Second, func() bool {
		_, err = dyn.Resource(v1alpha1.Resource).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}) {
		t.Fatalf("the policy did not refuse %s 30 s after it was created", probe.GetName())
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "nodeexec-nodescripts") {
		t.Fatalf("probe %s: %v, want the policy's refusal", probe.GetName(), err)
	}
}

// TestAdmissionPolicyDefaultImage: with deploy/policy's parameters
// (allowedImagePrefixes nodeexec.local/), a NodeScript that names no image
// is checked against the image that would run: debugpod's default,
// busybox:stable, is refused, naming spec.backend.image and that image;
// nsenter's default, the agent image nodeexec.local/agent:..., is
// admitted. Both go straight to the API server (dynamic client).
func TestAdmissionPolicyDefaultImage(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	suffix := randomSuffix()
	debug := nodeScriptObject(t, "e2e-policy-default-debugpod-"+suffix, "  script: 'true'\n  backend: {name: debugpod}\n")
	nsenter := nodeScriptObject(t, "e2e-policy-default-nsenter-"+suffix, "  script: 'true'\n  backend: {name: nsenter}\n")
	cleanupNodeScript(t, dyn, debug.GetName())
	cleanupNodeScript(t, dyn, nsenter.GetName())
	installPolicy(ctx, t, dyn, debug)

	_, err := dyn.Resource(v1alpha1.Resource).Create(ctx, debug, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("debugpod without an image: %v, want Forbidden", err)
	}
	for _, want := range []string{"spec.backend.image is not set", "the debugpod backend would run its default image busybox:stable", "[nodeexec.local/]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("debugpod without an image: the refusal lacks %q:\n%v", want, err)
		}
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, debug.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused NodeScript exists (%v)", err)
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, nsenter, metav1.CreateOptions{}); err != nil {
		t.Errorf("nsenter without an image (its default, under nodeexec.local/): %v", err)
	}
	// The bare backend default too: no backend at all is debugpod.
	bare := nodeScriptObject(t, "e2e-policy-default-bare-"+suffix, "  script: 'true'\n")
	if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, bare, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "busybox:stable") {
		t.Errorf("no backend at all: %v, want the refusal of busybox:stable", err)
	}
}

// TestAdmissionPolicyKeepsControls: a NodeScript created before the
// policy, with an image the policy refuses, can still be paused, resumed,
// promoted, given and cleared a run-now override, and deleted once the
// policy is in force: the watcher removes its finalizer and the object is
// gone. A change of its spec (the image, the script) is still refused.
func TestAdmissionPolicyKeepsControls(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	name := "e2e-policy-controls-" + randomSuffix()
	cleanupNodeScript(t, dyn, name)
	obj := nodeScriptObject(t, name, "  script: 'true'\n  backend: {name: nsenter, image: 'evil.example/root:1'}\n"+
		"  rollout: {promotion: Manual}\n  window: {start: '22:00', end: '23:00'}\n")
	if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("before the policy: %v", err)
	}
	if !waitFor(30*time.Second, func() bool {
		ns, err := nodescripts.Get(ctx, dyn, name)
		return err == nil && slices.Contains(ns.Finalizers, v1alpha1.Finalizer)
	}) {
		t.Fatalf("the watcher put no finalizer on %s", name)
	}
	probe := obj.DeepCopy()
	probe.SetName(name + "-probe")
	installPolicy(ctx, t, dyn, probe)

	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"pause", func() error { _, err := nodescripts.SetPaused(ctx, dyn, name, true); return err }},
		{"resume", func() error { _, err := nodescripts.SetPaused(ctx, dyn, name, false); return err }},
		{"promote", func() error { // (it carries the resourceVersion read; the watcher writes the status)
			return retry.RetryOnConflict(retry.DefaultRetry, func() error { _, err := nodescripts.Promote(ctx, dyn, name, "all"); return err })
		}},
		{"run-now", func() error {
			_, err := nodescripts.RunNow(ctx, env.client, dyn, name, nodescripts.RunNowOptions{})
			return err
		}},
		{"run-now --cancel", func() error {
			_, err := nodescripts.RunNow(ctx, env.client, dyn, name, nodescripts.RunNowOptions{Cancel: true})
			return err
		}},
	} {
		if err := step.do(); err != nil {
			t.Errorf("%s under the policy: %v", step.what, err)
		}
	}
	for what, patch := range map[string]string{
		"image":  `{"spec":{"backend":{"image":"evil.example/root:2"}}}`,
		"script": `{"spec":{"script":"id"}}`,
	} {
		_, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.backend.image evil.example/root:") {
			t.Errorf("changing the %s under the policy: %v, want the policy's refusal", what, err)
		}
	}
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	var err error
	if !waitFor(60*time.Second, func() bool {
		_, err = dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		ns, _ := nodescripts.Get(ctx, dyn, name)
		t.Fatalf("%s is still there 60 s after its deletion (finalizers %v): %v", name, ns.Finalizers, err)
	}
}

// TestCRDRefusesBadImageAndNUL: the API server itself (the CRD's schema,
// not nodeexec apply) refuses a NodeScript whose spec.backend.image is
// not an image reference, or one of whose scripts holds a NUL byte, with
// an Invalid error naming the field; a valid one is admitted.
func TestCRDRefusesBadImageAndNUL(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	suffix := randomSuffix()
	create := func(name string, set func(map[string]any)) error {
		u := nodeScriptObject(t, name+suffix, "  script: 'true'\n")
		set(u.Object["spec"].(map[string]any))
		cleanupNodeScript(t, dyn, u.GetName())
		_, err := dyn.Resource(v1alpha1.Resource).Create(ctx, u, metav1.CreateOptions{})
		return err
	}
	for _, img := range []string{"Evil Image:1", "busybox:-x", "x@sha256:12", "BusyBox", strings.Repeat("a", 64)} {
		err := create("e2e-crd-image-", func(s map[string]any) { s["backend"] = map[string]any{"name": "nsenter", "image": img} })
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.backend.image") || !strings.Contains(err.Error(), "not a valid image reference") {
			t.Errorf("image %q: %v, want Invalid naming spec.backend.image", img, err)
		}
	}
	for _, field := range []string{"script", "checkScript", "verifyScript", "rollbackScript", "rebootCommand"} {
		err := create("e2e-crd-nul-"+strings.ToLower(field)+"-", func(s map[string]any) { s[field] = "echo a\x00b" })
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec."+field) || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("NUL in %s: %v, want Invalid naming spec.%s", field, err, field)
		}
	}
	if err := create("e2e-crd-ok-", func(s map[string]any) {
		s["backend"] = map[string]any{"name": "nsenter", "image": "nodeexec.local/agent:0.2.0@sha256:" + strings.Repeat("0", 64)}
		s["checkScript"] = "printf '\\0' | od"
	}); err != nil {
		t.Errorf("a valid NodeScript: %v", err)
	}
}

// TestWatcherCannotWritePolicyParams: deploy/'s RBAC gives the watcher's
// ServiceAccount no write on the admission policy's parameters (the
// ConfigMap the binding's paramRef names, in deploy/policy), while it
// keeps what it needs for its output records in nodeexec-system
// (SubjectAccessReviews, as the API server authorizes the watcher).
func TestWatcherCannotWritePolicyParams(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	var rbac []*unstructured.Unstructured
	for _, u := range renderKustomization(t, "../deploy") {
		if u.GetAPIVersion() == "rbac.authorization.k8s.io/v1" || u.GetKind() == "ServiceAccount" {
			rbac = append(rbac, u)
		}
	}
	t.Cleanup(applyObjects(ctx, t, dyn, rbac))
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	for _, u := range renderKustomization(t, "../deploy/policy") {
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref := binding.Spec.ParamRef
	if ref == nil || ref.Name == "" || ref.Namespace == "" {
		t.Fatalf("deploy/policy's binding names no parameters: %+v", binding.Spec)
	}
	sa := "system:serviceaccount:" + v1alpha1.DefaultNamespace + ":nodeexec-watcher"
	allowed := func(verb, namespace, name string) bool {
		t.Helper()
		r, err := env.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + v1alpha1.DefaultNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps", Namespace: namespace, Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	// RBAC changes reach the authorizer within a moment: wait for what the
	// watcher needs before checking what it must not have.
	record := nodescripts.OutputRecordName("x", "node-1")
	if !waitFor(30*time.Second, func() bool {
		return allowed("create", v1alpha1.DefaultNamespace, "") && allowed("update", v1alpha1.DefaultNamespace, record) && allowed("get", v1alpha1.DefaultNamespace, record)
	}) {
		t.Fatalf("%s cannot create and update its output records in %s", sa, v1alpha1.DefaultNamespace)
	}
	for _, verb := range []string{"update", "patch", "delete"} {
		if allowed(verb, ref.Namespace, ref.Name) {
			t.Errorf("%s may %s the policy's parameters, ConfigMap %s/%s", sa, verb, ref.Namespace, ref.Name)
		}
	}
	if allowed("create", ref.Namespace, "") {
		t.Errorf("%s may create ConfigMaps in %s, the namespace of the policy's parameters", sa, ref.Namespace)
	}
	if ref.Namespace == v1alpha1.DefaultNamespace {
		t.Errorf("the policy's parameters are in %s, where the watcher writes ConfigMaps", ref.Namespace)
	}
}

// renderKustomization builds the kustomization in dir (kustomize's Go API).
func renderKustomization(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// applyObjects server-side applies objs and returns a function deleting
// them (Namespaces and CRDs excepted, as applyKustomization does).
func applyObjects(ctx context.Context, t *testing.T, dyn dynamic.Interface, objs []*unstructured.Unstructured) (remove func()) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.client.Discovery()))
	resource := func(u *unstructured.Unstructured) dynamic.ResourceInterface {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if u.GetNamespace() != "" {
			return dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		return dyn.Resource(mapping.Resource)
	}
	for _, u := range objs {
		if _, err := resource(u).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec-e2e", Force: true}); err != nil {
			t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	return func() {
		for _, u := range objs {
			if k := u.GetKind(); k != "Namespace" && k != "CustomResourceDefinition" {
				_ = resource(u).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
			}
		}
	}
}
