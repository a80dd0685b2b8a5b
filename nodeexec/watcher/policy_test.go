package watcher

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// admissionPolicy is deploy/policy's ValidatingAdmissionPolicy, its CEL
// compiled as the API server does for a custom resource (object,
// oldObject, params and request untyped; Kubernetes' string extensions).
type admissionPolicy struct {
	match, vars, checks []cel.Program
	names               []string // of vars
	messages            []cel.Program
	// jobCreators are the namespaces where the requesting user ("author")
	// may create Jobs, for the policy's authorizer checks (nil: everywhere).
	jobCreators []string
}

// authz answers the policy's authorizer checks for user "author": create
// on jobs in the namespaces of p.jobCreators (every namespace when nil),
// nothing else.
type authz struct{ p *admissionPolicy }

func (a authz) Authorize(_ context.Context, at authorizer.Attributes) (authorizer.Decision, string, error) {
	if at.GetAPIGroup() == "batch" && at.GetResource() == "jobs" && at.GetVerb() == "create" &&
		(a.p.jobCreators == nil || slices.Contains(a.p.jobCreators, at.GetNamespace())) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func loadAdmissionPolicy(t *testing.T) *admissionPolicy {
	t.Helper()
	b, err := os.ReadFile("../../deploy/policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vap admissionv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(strings.Split(string(b), "\n---\n")[0]), &vap); err != nil || vap.Kind != "ValidatingAdmissionPolicy" {
		t.Fatalf("deploy/policy/policy.yaml: %v (kind %q)", err, vap.Kind)
	}
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("params", cel.DynType), cel.Variable("request", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("authorizer", library.AuthorizerType), library.Authz(),
		ext.Strings(ext.StringsVersion(2)),
	)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(what, expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", what, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return prg
	}
	p := &admissionPolicy{}
	for _, m := range vap.Spec.MatchConditions {
		p.match = append(p.match, compile("matchCondition "+m.Name, m.Expression))
	}
	for _, v := range vap.Spec.Variables {
		p.names = append(p.names, v.Name)
		p.vars = append(p.vars, compile("variable "+v.Name, v.Expression))
	}
	for i, v := range vap.Spec.Validations {
		p.checks = append(p.checks, compile("validation "+v.Expression, v.Expression))
		if v.MessageExpression == "" {
			t.Fatalf("validation %d has no messageExpression", i)
		}
		p.messages = append(p.messages, compile("messageExpression "+v.MessageExpression, v.MessageExpression))
	}
	return p
}

// evalPolicy is the outcome of the policy for one request.
type evalPolicy struct {
	applies bool               // every matchCondition is true
	vars    map[string]ref.Val // the variables, by name
	denied  []string           // the messages of the failed validations
}

func toObject(t *testing.T, ns *v1alpha1.NodeScript) any {
	t.Helper()
	if ns == nil {
		return nil
	}
	b, err := json.Marshal(ns)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (p *admissionPolicy) eval(t *testing.T, op string, obj, old *v1alpha1.NodeScript, params map[string]string) evalPolicy {
	t.Helper()
	var paramsObj any
	if params != nil {
		paramsObj = map[string]any{"data": params}
	}
	vars := map[string]any{}
	act := map[string]any{"object": toObject(t, obj), "oldObject": toObject(t, old), "params": paramsObj,
		"request": map[string]any{"operation": op, "userInfo": map[string]any{"username": "author"}}, "variables": vars,
		"authorizer": library.NewAuthorizerVal(&user.DefaultInfo{Name: "author"}, authz{p})}
	run := func(prg cel.Program) ref.Val {
		t.Helper()
		out, _, err := prg.Eval(act)
		if err != nil {
			t.Fatalf("%s of %+v: %v", op, obj.Spec, err)
		}
		return out
	}
	res := evalPolicy{applies: true, vars: map[string]ref.Val{}}
	for _, m := range p.match {
		if run(m) != types.True {
			res.applies = false
		}
	}
	for i, v := range p.vars {
		val := run(v)
		vars[p.names[i]], res.vars[p.names[i]] = val, val
	}
	for i, c := range p.checks {
		if run(c) != types.True {
			res.denied = append(res.denied, run(p.messages[i]).Value().(string))
		}
	}
	return res
}

// TestAdmissionPolicyDefaults pins deploy/policy's image and namespace to
// what the watcher runs: for every node backend, with and without
// spec.backend.image and spec.backend.namespace, the policy's
// variables.image is RunImage (the image in the run pod) and
// variables.runNamespace is RunNamespace. So a NodeScript that leaves the
// image out is checked against the default image that will run, and a new
// backend or a new default (agent.Version) fails here until the policy
// knows it.
func TestAdmissionPolicyDefaults(t *testing.T) {
	p := loadAdmissionPolicy(t)
	for _, backend := range append([]string{""}, backends.NodeNames()...) {
		for _, image := range []string{"", "registry.example/team/tool:1"} {
			for _, namespace := range []string{"", "ops"} {
				ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: v1alpha1.NodeScriptSpec{Script: "true",
					Backend: v1alpha1.BackendSpec{Name: backend, Image: image, Namespace: namespace}}}
				wantImage, err := runImage(&ns.Spec)
				if err != nil {
					t.Fatal(err)
				}
				res := p.eval(t, "CREATE", ns, nil, nil)
				if got := res.vars["image"].Value(); got != wantImage {
					t.Errorf("backend %q image %q: the policy checks image %v, the watcher runs %s", backend, image, got, wantImage)
				}
				if got, want := res.vars["runNamespace"].Value(), nodescript.RunNamespace(&ns.Spec); got != want {
					t.Errorf("backend %q namespace %q: the policy checks namespace %v, the watcher creates its pods in %s", backend, namespace, got, want)
				}
				pod, err := (&Watcher{o: Options{Client: fake.NewClientset(), Backends: backends.NewNode}}).runPod(runPodSpec{NodeScript: ns, Node: "n1", Action: v1alpha1.ActionRun, Attempt: 1})
				if err != nil {
					t.Fatal(err)
				}
				if pod.Spec.Containers[0].Image != wantImage || pod.Namespace != nodescript.RunNamespace(&ns.Spec) {
					t.Errorf("backend %q image %q namespace %q: the run pod is %s/%s running %s, not what the policy checked", backend, image, namespace, pod.Namespace, pod.Name, pod.Spec.Containers[0].Image)
				}
			}
		}
	}
	// A backend the policy knows no default of is refused, not let through.
	res := p.eval(t, "CREATE", &v1alpha1.NodeScript{Spec: v1alpha1.NodeScriptSpec{Backend: v1alpha1.BackendSpec{Name: "ssh"}}}, nil,
		map[string]string{"allowedImagePrefixes": "nodeexec.local/,busybox", "allowedNamespaces": v1alpha1.DefaultNamespace})
	if len(res.denied) != 1 || !strings.Contains(res.denied[0], "knows no default image of backend ssh") {
		t.Errorf("an unknown backend without an image: %q, want one refusal naming it", res.denied)
	}
}

// TestAdmissionPolicyChecks: deploy/policy refuses a NodeScript whose
// image, given or the backend's default, or whose run namespace, given or
// the default, is not allowed, naming spec.backend.image (and the default
// image that would run) or spec.backend.namespace.
func TestAdmissionPolicyChecks(t *testing.T) {
	p := loadAdmissionPolicy(t)
	params := map[string]string{"allowedImagePrefixes": " nodeexec.local/ ,, registry.example/ops/", "allowedNamespaces": "nodeexec-system, ops"}
	for _, c := range []struct {
		backend v1alpha1.BackendSpec
		params  map[string]string
		want    []string // each a substring of one refusal, in order; none: admitted
	}{
		{v1alpha1.BackendSpec{Name: "nsenter"}, params, nil},
		{v1alpha1.BackendSpec{Name: "nsenter", Image: "registry.example/ops/agent:1", Namespace: "ops"}, params, nil},
		{v1alpha1.BackendSpec{}, params, []string{"spec.backend.image is not set, so the debugpod backend would run its default image busybox:stable, which is not allowed on this cluster: NodeScript images must start with one of [nodeexec.local/, registry.example/ops/]: set spec.backend.image to an allowed image"}},
		{v1alpha1.BackendSpec{Name: "debugpod"}, params, []string{"default image busybox:stable"}},
		{v1alpha1.BackendSpec{Name: "debugpod", Image: "nodeexec.local/busybox:1"}, params, nil},
		{v1alpha1.BackendSpec{Name: "nsenter", Image: "evil.example/root:1"}, params, []string{"spec.backend.image evil.example/root:1 is not allowed on this cluster: NodeScript images must start with one of [nodeexec.local/, registry.example/ops/] (ValidatingAdmissionPolicy nodeexec-nodescripts, ConfigMap nodeexec-policy/nodeexec-policy)"}},
		{v1alpha1.BackendSpec{Name: "nsenter", Namespace: "kube-system"}, params, []string{"spec.backend.namespace kube-system is not allowed on this cluster: run pods may be created in [nodeexec-system, ops]"}},
		{v1alpha1.BackendSpec{Name: "nsenter"}, map[string]string{"allowedImagePrefixes": "nodeexec.local/", "allowedNamespaces": "ops"},
			[]string{"spec.backend.namespace is not set, so the run pods would be created in the default namespace nodeexec-system, which is not allowed"}},
		{v1alpha1.BackendSpec{Name: "nsenter"}, map[string]string{}, []string{"must start with one of []", "may be created in []"}},
	} {
		ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: v1alpha1.NodeScriptSpec{Script: "true", Backend: c.backend}}
		res := p.eval(t, "CREATE", ns, nil, c.params)
		ok := res.applies && len(res.denied) == len(c.want)
		for i := 0; ok && i < len(c.want); i++ {
			ok = strings.Contains(res.denied[i], c.want[i])
		}
		if !ok {
			t.Errorf("backend %+v, params %v: applies %v, refusals %q; want %q", c.backend, c.params, res.applies, res.denied, c.want)
		}
	}
}

// TestAdmissionPolicyHookJobs: a NodeScript with spec.hooks Jobs
// (preRollout, preNode, postNode, postRollout) is admitted only when the
// requesting user may create Jobs in its run namespace (the watcher
// creates them there, with the templates' images and service accounts, so
// the hooks give the author nothing it could not do itself); annotation
// gates (beforeRun, afterRun) are not Jobs and need nothing.
func TestAdmissionPolicyHookJobs(t *testing.T) {
	p := loadAdmissionPolicy(t)
	params := map[string]string{"allowedImagePrefixes": "nodeexec.local/", "allowedNamespaces": "nodeexec-system, ops"}
	job := &v1alpha1.HookJob{}
	gate := &v1alpha1.AnnotationGate{Annotations: []string{"example.com/ready"}}
	for _, c := range []struct {
		name        string
		hooks       *v1alpha1.Hooks
		namespace   string
		jobCreators []string
		want        string // a substring of the one refusal; "": admitted
	}{
		{"no hooks, no rights", nil, "", []string{}, ""},
		{"annotation gates only", &v1alpha1.Hooks{BeforeRun: gate, AfterRun: gate}, "", []string{}, ""},
		{"preNode, may create jobs", &v1alpha1.Hooks{PreNode: job}, "", []string{"nodeexec-system"}, ""},
		{"preNode, may not", &v1alpha1.Hooks{PreNode: job}, "", []string{"ops"},
			"spec.hooks: the watcher would create the hooks' Jobs in nodeexec-system with the image and service account their templates name, and author may not create Jobs there"},
		{"postRollout in ops, may in nodeexec-system only", &v1alpha1.Hooks{PostRollout: job}, "ops", []string{"nodeexec-system"}, "Jobs in ops"},
		{"each hook counts", &v1alpha1.Hooks{PostNode: job, PreRollout: job}, "", []string{}, "may not create Jobs there"},
	} {
		p.jobCreators = c.jobCreators
		ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: v1alpha1.NodeScriptSpec{Script: "true",
			Backend: v1alpha1.BackendSpec{Name: "nsenter", Namespace: c.namespace}, Hooks: c.hooks}}
		res := p.eval(t, "CREATE", ns, nil, params)
		if c.want == "" && len(res.denied) > 0 || c.want != "" && (len(res.denied) != 1 || !strings.Contains(res.denied[0], c.want)) {
			t.Errorf("%s: refusals %q; want %q", c.name, res.denied, c.want)
		}
	}
}

// TestAdmissionPolicyUpdates: an UPDATE is checked only when it changes
// the spec beyond spec.paused and spec.rollout.promoteTo; metadata (the
// finalizer, the run-now annotations) is never the spec. So a NodeScript
// the parameters no longer allow can be paused, resumed, promoted, given a
// run-now override and deleted (the watcher removes its finalizer), while
// a change of what runs is checked.
func TestAdmissionPolicyUpdates(t *testing.T) {
	p := loadAdmissionPolicy(t)
	old := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x", Finalizers: []string{v1alpha1.Finalizer}}, Spec: v1alpha1.NodeScriptSpec{
		Script: "true", Backend: v1alpha1.BackendSpec{Name: "nsenter", Image: "evil.example/root:1"},
		Rollout: v1alpha1.RolloutSpec{Promotion: v1alpha1.PromotionManual}}}
	for _, c := range []struct {
		name    string
		change  func(*v1alpha1.NodeScript)
		checked bool
	}{
		{"nothing", func(*v1alpha1.NodeScript) {}, false},
		{"pause", func(n *v1alpha1.NodeScript) { n.Spec.Paused = true }, false},
		{"promote", func(n *v1alpha1.NodeScript) { n.Spec.Rollout.PromoteTo = "all" }, false},
		{"finalizer removed", func(n *v1alpha1.NodeScript) { n.Finalizers = nil; n.DeletionTimestamp = &metav1.Time{} }, false},
		{"run-now", func(n *v1alpha1.NodeScript) {
			n.Annotations = map[string]string{v1alpha1.AnnotationRunNow: "2026-11-21T22:00:00Z", v1alpha1.AnnotationRunNowBy: "alice"}
		}, false},
		{"labels", func(n *v1alpha1.NodeScript) { n.Labels = map[string]string{"team": "a"} }, false},
		{"image", func(n *v1alpha1.NodeScript) { n.Spec.Backend.Image = "evil.example/root:2" }, true},
		{"script", func(n *v1alpha1.NodeScript) { n.Spec.Script = "id" }, true},
		{"selector", func(n *v1alpha1.NodeScript) { n.Spec.NodeSelector.MatchLabels = map[string]string{"a": "b"} }, true},
		{"pause and script", func(n *v1alpha1.NodeScript) { n.Spec.Paused = true; n.Spec.Script = "id" }, true},
		{"promote and canary", func(n *v1alpha1.NodeScript) { n.Spec.Rollout.PromoteTo = "all"; n.Spec.Rollout.Canary = new(int32) }, true},
		{"promotion mode", func(n *v1alpha1.NodeScript) { n.Spec.Rollout.Promotion = "" }, true},
		{"window", func(n *v1alpha1.NodeScript) {
			n.Spec.Window = &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"}
		}, true},
	} {
		for _, from := range []bool{false, true} { // from a paused, promoted NodeScript back too
			o := old.DeepCopy()
			if from {
				o.Spec.Paused, o.Spec.Rollout.PromoteTo = true, "all"
			}
			n := o.DeepCopy()
			c.change(n)
			if from && !c.checked { // the reverse control: resume, unpromote
				n.Spec.Paused, n.Spec.Rollout.PromoteTo = false, ""
			}
			res := p.eval(t, "UPDATE", n, o, map[string]string{"allowedImagePrefixes": "nodeexec.local/", "allowedNamespaces": v1alpha1.DefaultNamespace})
			if res.applies != c.checked {
				t.Errorf("UPDATE %s (from paused: %v): checked %v, want %v", c.name, from, res.applies, c.checked)
			}
			if c.checked && (len(res.denied) == 0 || !strings.Contains(res.denied[0], "spec.backend.image evil.example/root")) {
				t.Errorf("UPDATE %s: refusals %q, want the image's", c.name, res.denied)
			}
		}
	}
	if res := p.eval(t, "CREATE", old, nil, nil); !res.applies || len(res.denied) != 2 {
		t.Errorf("CREATE: applies %v, refusals %q; want both checks to refuse", res.applies, res.denied)
	}
	if !slices.Contains(p.names, "image") || !slices.Contains(p.names, "runNamespace") {
		t.Errorf("the policy's variables %v lack image or runNamespace", p.names)
	}
}
