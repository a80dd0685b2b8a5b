package preflight

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestAllows(t *testing.T) {
	tests := []struct {
		ns, pod string
		want    bool
	}{
		{"", LevelPrivileged, true},
		{LevelPrivileged, LevelPrivileged, true},
		{LevelPrivileged, LevelRestricted, true},
		{LevelBaseline, LevelPrivileged, false},
		{LevelBaseline, LevelBaseline, true},
		{LevelBaseline, LevelRestricted, true},
		{LevelRestricted, LevelBaseline, false},
		{LevelRestricted, LevelRestricted, true},
		{"bogus", LevelRestricted, false},
		{LevelPrivileged, "bogus", false},
	}
	for _, tt := range tests {
		if got := Allows(tt.ns, tt.pod); got != tt.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", tt.ns, tt.pod, got, tt.want)
		}
	}
}

// fakeClient has namespace ns with labels and answers every
// SelfSubjectAccessReview with allowed unless denied names the permission
// (Permission.String() without the cluster suffix).
func fakeClient(ns string, labels map[string]string, denied ...string) (*fake.Clientset, *[]authv1.ResourceAttributes) {
	c := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}})
	var seen []authv1.ResourceAttributes
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview)
		attrs := *r.Spec.ResourceAttributes
		seen = append(seen, attrs)
		p := Permission{Verb: attrs.Verb, Group: attrs.Group, Resource: attrs.Resource, Subresource: attrs.Subresource}
		out := r.DeepCopy()
		out.Status.Allowed = true
		for _, d := range denied {
			if p.String() == d {
				out.Status.Allowed = false
				out.Status.Reason = "no RBAC policy matched"
			}
		}
		return true, out, nil
	})
	return c, &seen
}

func TestCheckAllowed(t *testing.T) {
	c, seen := fakeClient("ops", map[string]string{LabelEnforce: LevelPrivileged})
	dry := 0
	r, err := Check(t.Context(), Options{Client: c, Namespace: "ops", Backend: "debugpod", Permissions: podBackend(), Level: LevelPrivileged,
		DryRun: func(context.Context) error { dry++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if dry != 1 || !r.DryRunDone {
		t.Errorf("dry-run made %d times (done %v), want once", dry, r.DryRunDone)
	}
	// One review per permission of the table, namespaced except nodes.
	var got []string
	for _, a := range *seen {
		got = append(got, a.Namespace+":"+a.Verb+" "+a.Resource+"/"+a.Subresource)
	}
	want := []string{"ops:create pods/", "ops:get pods/", "ops:list pods/", "ops:watch pods/", "ops:delete pods/",
		"ops:create leases/", "ops:get leases/", "ops:update leases/", "ops:delete leases/",
		"ops:create pods/exec", "ops:list events/", "ops:watch events/", ":list nodes/"}
	// The reviews are made concurrently: compare as sets.
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("access reviews (-want +got):\n%s", diff)
	}
	// The report keeps the table's order.
	var order []string
	for _, p := range r.Permissions {
		order = append(order, p.Permission.String())
	}
	var table []string
	for _, p := range podBackend() {
		table = append(table, p.String())
	}
	if diff := cmp.Diff(table, order); diff != "" {
		t.Errorf("report order (-want +got):\n%s", diff)
	}
	if s := r.String(); !strings.Contains(s, "nothing will be refused") || !strings.Contains(s, "dry-run create: admitted") {
		t.Errorf("String() lacks the verdicts:\n%s", s)
	}
}

func TestCheckRefusals(t *testing.T) {
	profiles := map[string]string{"baseline": LevelBaseline, "restricted": LevelRestricted, "netadmin": LevelPrivileged}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("denied"))
	tests := []struct {
		name      string
		labels    map[string]string
		level     string
		denied    []string
		dryRun    error
		want      []string // in Err()
		notWant   []string
		wantFits  []string
		forbidden bool
	}{
		{
			name:   "pod security baseline refuses privileged",
			labels: map[string]string{LabelEnforce: LevelBaseline, LabelEnforceVersion: "v1.37"},
			level:  LevelPrivileged, dryRun: errors.Join(nodeexec.ErrForbidden, forbidden),
			want: []string{`namespace "ops" enforces Pod Security level "baseline" (version v1.37)`, `backend debugpod with profile sysadmin needs "privileged"`,
				"--profile baseline or --profile restricted fits this namespace", "pod-security.kubernetes.io/enforce=privileged"},
			notWant:  []string{"dry-run", "RBAC"},
			wantFits: []string{"baseline", "restricted"}, forbidden: true,
		},
		{
			name:   "restricted namespace",
			labels: map[string]string{LabelEnforce: LevelRestricted},
			level:  LevelBaseline,
			want:   []string{`enforces Pod Security level "restricted"`, "--profile restricted fits"}, wantFits: []string{"restricted"}, forbidden: true,
		},
		{
			name:   "no exec permission",
			labels: map[string]string{LabelEnforce: LevelBaseline}, level: LevelBaseline,
			denied:  []string{"create pods/exec", "list nodes"},
			want:    []string{`RBAC: backend debugpod with profile sysadmin needs create pods/exec, list nodes (cluster-wide) in namespace "ops"`},
			notWant: []string{"Pod Security"}, wantFits: []string{"baseline", "restricted"}, forbidden: true,
		},
		{
			name:   "dry-run refused for another reason",
			labels: nil, level: LevelPrivileged,
			dryRun: errors.New("admission webhook said no"),
			want:   []string{"dry-run create: admission webhook said no"}, wantFits: []string{"baseline", "netadmin", "restricted"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := fakeClient("ops", tt.labels, tt.denied...)
			r, err := Check(t.Context(), Options{Client: c, Namespace: "ops", Backend: "debugpod", Permissions: podBackend(), Variant: "profile sysadmin",
				Level: tt.level, Alternatives: profiles, AlternativeFlag: "--profile",
				DryRun: func(context.Context) error { return tt.dryRun }})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantFits, r.Fits); diff != "" {
				t.Errorf("Fits (-want +got):\n%s", diff)
			}
			rerr := r.Err()
			if rerr == nil {
				t.Fatal("Err() = nil, want a refusal")
			}
			if got := errors.Is(rerr, nodeexec.ErrForbidden); got != tt.forbidden {
				t.Errorf("errors.Is(ErrForbidden) = %v, want %v: %v", got, tt.forbidden, rerr)
			}
			for _, s := range tt.want {
				if !strings.Contains(rerr.Error(), s) {
					t.Errorf("Err() lacks %q:\n%v", s, rerr)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(rerr.Error(), s) {
					t.Errorf("Err() has %q:\n%v", s, rerr)
				}
			}
			if !strings.Contains(r.String(), "result: ") {
				t.Errorf("String() has no result line:\n%s", r)
			}
		})
	}
}

func TestCheckInconclusive(t *testing.T) {
	// The namespace cannot be read and the reviews fail: reported as unknown, not refused.
	c := fake.NewClientset()
	c.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "ops", errors.New("no"))
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	r, err := Check(t.Context(), Options{Client: c, Namespace: "ops", Backend: "debugpod", Permissions: podBackend(), Level: LevelPrivileged})
	if err != nil {
		t.Fatal(err)
	}
	if r.NamespaceErr == nil || !r.LevelFits() || len(r.Missing()) != 0 || r.DryRunDone {
		t.Errorf("namespace err %v, fits %v, missing %v, dry-run %v; want an error, inconclusive fit, none missing, no dry-run",
			r.NamespaceErr, r.LevelFits(), r.Missing(), r.DryRunDone)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if s := r.String(); !strings.Contains(s, "pod security: unknown") || !strings.Contains(s, "unknown: SelfSubjectAccessReview") {
		t.Errorf("String() does not say unknown:\n%s", s)
	}
}

func TestCheckOptions(t *testing.T) {
	c := fake.NewClientset()
	for _, o := range []Options{
		{Namespace: "a", Backend: "debugpod", Permissions: podBackend()},
		{Client: c, Backend: "debugpod", Permissions: podBackend()},
		{Client: c, Namespace: "a", Permissions: podBackend()},
		{Client: c, Namespace: "a", Backend: "nosuch"}, // no Permissions
		{Client: c, Namespace: "a", Backend: "debugpod", Permissions: podBackend(), Level: "root"},
	} {
		if _, err := Check(t.Context(), o); err == nil {
			t.Errorf("Check(%+v) = nil error, want one", o)
		}
	}
	// Any backend: its permissions are all Check needs.
	c2, _ := fakeClient("a", nil, "create pods/attach")
	r, err := Check(t.Context(), Options{Client: c2, Namespace: "a", Backend: "future", Permissions: Attach()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Permission{{Verb: "create", Resource: "pods", Subresource: "attach"}}, r.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
}

// podBackend is the RBAC of a pod backend (debugpod, nsenter), as they
// declare it in their Requirements.
func podBackend() []Permission {
	return slices.Concat(PodLifecycle(), RunLease(), Exec(), Events(), Nodes())
}

func TestPermissionBlocks(t *testing.T) {
	got := []string{}
	for _, p := range podBackend() {
		got = append(got, p.String())
	}
	want := []string{"create pods", "get pods", "list pods", "watch pods", "delete pods",
		"create leases.coordination.k8s.io", "get leases.coordination.k8s.io", "update leases.coordination.k8s.io", "delete leases.coordination.k8s.io",
		"create pods/exec",
		"list events", "watch events", "list nodes (cluster-wide)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod backend permissions (-want +got):\n%s", diff)
	}
	if s := EphemeralContainers()[0].String(); s != "patch pods/ephemeralcontainers" {
		t.Errorf("EphemeralContainers = %q", s)
	}
}

type requirer struct{ dryRuns *[]string }

func (requirer) Name() string { return "fake" }
func (requirer) Run(context.Context, nodeexec.Request) (nodeexec.Result, error) {
	return nodeexec.Result{}, nil
}
func (requirer) Requirements() nodeexec.Requirements {
	return nodeexec.Requirements{Namespace: "ops", PodSecurityLevel: LevelBaseline, Permissions: Exec(), VariantKind: "profile", Variant: "x",
		Alternatives: map[string]string{"y": LevelRestricted}, AlternativeFlag: "--profile"}
}
func (r requirer) Preflight(_ context.Context, node string) error {
	*r.dryRuns = append(*r.dryRuns, node)
	return nil
}

// wrapped declares nothing itself: what For finds is the inner backend's.
type wrapped struct{ inner nodeexec.Backend }

func (w wrapped) Name() string { return w.inner.Name() }
func (wrapped) Run(context.Context, nodeexec.Request) (nodeexec.Result, error) {
	return nodeexec.Result{}, nil
}
func (w wrapped) Unwrap() nodeexec.Backend { return w.inner }

// For reads a backend's Requirements and dry-run, also through a wrapper.
func TestFor(t *testing.T) {
	var dryRuns []string
	c := fake.NewClientset()
	for _, b := range []nodeexec.Backend{requirer{&dryRuns}, wrapped{inner: requirer{&dryRuns}}} {
		o := For(b, c, "node-a")
		if o.Namespace != "ops" || o.Level != LevelBaseline || o.Variant != "profile x" || o.AlternativeFlag != "--profile" ||
			o.Alternatives["y"] != LevelRestricted || !cmp.Equal(o.Permissions, Exec()) || o.Backend != "fake" || o.DryRun == nil {
			t.Errorf("For(%T) = %+v", b, o)
			continue
		}
		_ = o.DryRun(t.Context())
	}
	if !cmp.Equal(dryRuns, []string{"node-a", "node-a"}) {
		t.Errorf("dry runs %v", dryRuns)
	}
}

func TestCheckSecrets(t *testing.T) {
	c, _ := fakeClient("ops", nil)
	if _, err := c.CoreV1().Secrets("ops").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ops"},
		Data: map[string][]byte{"b": []byte("2"), "a": []byte("1")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gets := 0
	c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) { gets++; return false, nil, nil })
	r, err := Check(t.Context(), Options{Client: c, Namespace: "ops", Backend: "debugpod", Permissions: podBackend(), Level: LevelPrivileged,
		Secrets: []nodeexec.SecretEnv{{Secret: "s", Key: "a"}, {Secret: "s", Key: "c"}, {Secret: "gone"}, {Secret: "gone", Key: "x"}, {Secret: "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	if gets != 2 || r.SecretsChecked != 2 || r.SecretsErr != nil {
		t.Errorf("%d GETs, %d Secrets checked, err %v; want one GET per Secret, both checked", gets, r.SecretsChecked, r.SecretsErr)
	}
	err = r.Err()
	if err == nil || errors.Is(err, nodeexec.ErrForbidden) || !apierrors.IsNotFound(err) {
		t.Fatalf("Err() = %v; want the missing Secret's NotFound, not ErrForbidden", err)
	}
	for _, want := range []string{`SecretEnv[1]: Secret ops/s has no key "c" (its keys: a, b)`, `SecretEnv[2]: secrets "gone" not found in namespace "ops": create the Secret there`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v\nwant it to say %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), `"gone"`); n != 1 {
		t.Errorf("the missing Secret is named %d times, want once: %v", n, err)
	}
	if s := r.String(); !strings.Contains(s, "secrets: 2 read: MISSING") {
		t.Errorf("String() does not report the Secrets:\n%s", s)
	}

	// Not allowed to read Secrets: the kubelet decides.
	c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "gone", errors.New("no"))
	})
	r, err = Check(t.Context(), Options{Client: c, Namespace: "ops", Backend: "debugpod", Permissions: podBackend(), Level: LevelPrivileged,
		Secrets: []nodeexec.SecretEnv{{Secret: "gone"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Err() != nil || r.SecretsErr == nil || len(r.SecretErrs) != 0 {
		t.Errorf("Err() %v, SecretsErr %v, SecretErrs %v; want no refusal and the read's error kept", r.Err(), r.SecretsErr, r.SecretErrs)
	}
	if s := r.String(); !strings.Contains(s, "secrets: 0 read, the others not checked") {
		t.Errorf("String() does not say the Secrets were not checked:\n%s", s)
	}
}
