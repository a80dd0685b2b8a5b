package charts_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

const chartDir = "nodeexec"

// Labels the chart adds to every templated object and deploy/ does not
// (docs/helm.md): compared with deploy/, these are removed, and
// app.kubernetes.io/managed-by, Helm here and nodeexec in deploy/, is checked
// on each side and then removed.
var helmOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

const labelManagedBy = "app.kubernetes.io/managed-by"

// object is one parsed manifest, with numbers as JSON gives them (float64)
// on both sides.
type object = map[string]any

func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v %v/%v", o["apiVersion"], o["kind"], md["namespace"], md["name"])
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// render renders the chart as `helm install nodeexec` would with vals (the
// values schema checked first), and returns its objects by key, CRDs
// (crds/) included, and NOTES.txt.
func render(t *testing.T, vals map[string]any) (map[string]object, string, error) {
	t.Helper()
	c := loadChart(t)
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "nodeexec", Namespace: "default", Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Render(c, rv)
	if err != nil {
		return nil, "", err
	}
	objs := map[string]object{}
	add := func(src, doc string) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v\n%s", src, err, doc)
		}
		if len(o) == 0 {
			return
		}
		k := key(o)
		if _, dup := objs[k]; dup {
			t.Fatalf("%s: %s rendered twice", src, k)
		}
		objs[k] = o
	}
	var notes string
	for name, s := range out {
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			notes = s
			continue
		case !strings.HasSuffix(name, ".yaml"):
			continue
		}
		for _, doc := range releaseutil.SplitManifests(s) {
			add(name, doc)
		}
	}
	for _, f := range c.CRDObjects() {
		add(f.Filename, string(f.File.Data))
	}
	return objs, notes, nil
}

// kustomize builds deploy/ and deploy/policy with kustomize's Go API.
func kustomize(t *testing.T) map[string]object {
	t.Helper()
	objs := map[string]object{}
	for _, dir := range []string{"../deploy", "../deploy/policy"} {
		res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		for _, r := range res.Resources() {
			b, err := r.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var o object
			if err := json.Unmarshal(b, &o); err != nil {
				t.Fatal(err)
			}
			objs[key(o)] = o
		}
	}
	return objs
}

// labels returns o's metadata.labels (nil when none).
func labels(o object) map[string]any {
	md, _ := o["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

// dropLabels removes names from o's labels, and the labels map when empty.
func dropLabels(o object, names ...string) {
	l := labels(o)
	for _, n := range names {
		delete(l, n)
	}
	if l != nil && len(l) == 0 {
		delete(o["metadata"].(map[string]any), "labels")
	}
}

func isCRD(o object) bool { return o["kind"] == "CustomResourceDefinition" }

// TestChartMatchesDeploy: with default values the chart renders exactly
// deploy/'s and deploy/policy's objects (kustomize), but for the labels Helm
// adds (helmOnlyLabels, managed-by Helm for nodeexec) and for the CRDs'
// labels, which kustomize adds to deploy/crd and Helm never templates
// (crds/ is installed as is). A change on one side alone fails here.
func TestChartMatchesDeploy(t *testing.T) {
	got, _, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := kustomize(t)
	var gotKeys, wantKeys []string
	for k := range got {
		gotKeys = append(gotKeys, k)
	}
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(gotKeys)
	sort.Strings(wantKeys)
	if d := cmp.Diff(wantKeys, gotKeys); d != "" {
		t.Fatalf("objects (-deploy/ +chart):\n%s", d)
	}
	for _, k := range wantKeys {
		g, w := got[k], want[k]
		if wl := labels(w); wl[labelManagedBy] != "nodeexec" || wl["app.kubernetes.io/part-of"] != "nodeexec" {
			t.Errorf("deploy/ %s: labels %v, want managed-by and part-of nodeexec", k, wl)
		}
		if isCRD(g) {
			dropLabels(w, labelManagedBy, "app.kubernetes.io/part-of")
		} else {
			gl := labels(g)
			want := map[string]any{labelManagedBy: "Helm", "app.kubernetes.io/instance": "nodeexec", "app.kubernetes.io/version": agent.Version, "helm.sh/chart": "nodeexec-" + agent.Version}
			for n, v := range want {
				if gl[n] != v {
					t.Errorf("chart %s: label %s=%v, want %v", k, n, gl[n], v)
				}
			}
			dropLabels(g, append(helmOnlyLabels, labelManagedBy)...)
			dropLabels(w, labelManagedBy)
		}
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s (-deploy/ +chart):\n%s", k, d)
		}
	}
}

// TestChartCRDs: the chart's crds/ are deploy/crd's files, byte for byte
// (make generate writes both).
func TestChartCRDs(t *testing.T) {
	deploy, err := filepath.Glob("../deploy/crd/*.yaml")
	if err != nil || len(deploy) == 0 {
		t.Fatalf("deploy/crd: %v %v", deploy, err)
	}
	inChart, _ := filepath.Glob(chartDir + "/crds/*")
	var names []string
	for _, p := range inChart {
		names = append(names, filepath.Base(p))
	}
	for _, p := range deploy {
		name := filepath.Base(p)
		if !slices.Contains(names, name) {
			t.Errorf("crds/%s missing: run make generate", name)
			continue
		}
		names = slices.DeleteFunc(names, func(n string) bool { return n == name })
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(chartDir, "crds", name))
		if !bytes.Equal(a, b) {
			t.Errorf("crds/%s differs from deploy/crd/%s: run make generate", name, name)
		}
	}
	if len(names) > 0 {
		t.Errorf("crds/ has files deploy/crd does not: %v (run make generate)", names)
	}
}

// TestChartAppVersion: the chart's appVersion, the watcher's default tag, is
// nodeexec's version, so the default image is agent.DefaultImage.
func TestChartAppVersion(t *testing.T) {
	c := loadChart(t)
	if c.Metadata.AppVersion != agent.Version || c.Metadata.Version != agent.Version {
		t.Errorf("Chart.yaml: version %s, appVersion %s; want both %s (agent.Version)", c.Metadata.Version, c.Metadata.AppVersion, agent.Version)
	}
	got, _, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img := container(t, got, "nodeexec-system")["image"]; img != agent.DefaultImage {
		t.Errorf("default image %v, want %s", img, agent.DefaultImage)
	}
}

func deployment(t *testing.T, objs map[string]object, ns string) object {
	t.Helper()
	d, ok := objs["apps/v1 Deployment "+ns+"/nodeexec-watcher"]
	if !ok {
		t.Fatalf("no Deployment %s/nodeexec-watcher", ns)
	}
	return d
}

func podSpec(t *testing.T, objs map[string]object, ns string) map[string]any {
	t.Helper()
	return deployment(t, objs, ns)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

func container(t *testing.T, objs map[string]object, ns string) map[string]any {
	t.Helper()
	return podSpec(t, objs, ns)["containers"].([]any)[0].(map[string]any)
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartValues renders non-default values and checks the objects.
func TestChartValues(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	vals := map[string]any{
		"namespace": "ops-nodeexec",
		"image":     map[string]any{"repository": "registry.example.com:5000/platform/nodeexec", "tag": "ignored", "digest": digest, "pullPolicy": "Always"},
		"replicas":  3,
		"collector": map[string]any{"enabled": false},
		"forceDrain": map[string]any{
			"enabled": false,
		},
		"metrics": map[string]any{"bindAddress": "0"},
		"policy": map[string]any{
			"namespace":            "ops-policy",
			"allowedImagePrefixes": []any{"registry.example.com:5000/platform/", "busybox:"},
		},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"nodeSelector":     map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":      []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
		"affinity":         map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64", "arm64"}}}}}}}},
		"podAnnotations":   map[string]any{"example.com/team": "platform"},
		"resources":        map[string]any{"requests": map[string]any{"cpu": "100m"}},
	}
	objs, notes, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	ns := "ops-nodeexec"
	d := deployment(t, objs, ns)
	if r := d["spec"].(map[string]any)["replicas"]; r != float64(3) {
		t.Errorf("replicas %v, want 3", r)
	}
	c := container(t, objs, ns)
	if c["image"] != "registry.example.com:5000/platform/nodeexec@"+digest || c["imagePullPolicy"] != "Always" {
		t.Errorf("image %v %v, want the repository by digest, Always", c["image"], c["imagePullPolicy"])
	}
	wantCmd := []any{"/usr/local/bin/nodeexec", "watch", "--leader-elect", "--leader-election-namespace=" + ns,
		"--metrics-bind-address=0", "--health-probe-bind-address=:8081", "--collect-interval=0"}
	if diff := cmp.Diff(wantCmd, c["command"]); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	// Helm merges maps with the defaults (null removes a key).
	if got := toJSON(t, c["resources"]); got != `{"limits":{"memory":"256Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}` {
		t.Errorf("resources %s", got)
	}
	ps := podSpec(t, objs, ns)
	for f, want := range map[string]any{"nodeSelector": vals["nodeSelector"], "tolerations": vals["tolerations"], "affinity": vals["affinity"], "imagePullSecrets": vals["imagePullSecrets"]} {
		if toJSON(t, ps[f]) != toJSON(t, want) {
			t.Errorf("pod %s %s, want %s", f, toJSON(t, ps[f]), toJSON(t, want))
		}
	}
	if a := toJSON(t, d["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"]); a != `{"example.com/team":"platform"}` {
		t.Errorf("pod annotations %s", a)
	}
	// Everything of the watcher's is in its namespace, every binding names
	// its ServiceAccount there; nothing is left in nodeexec-system.
	for k, o := range objs {
		if strings.Contains(k, "nodeexec-system") {
			t.Errorf("%s: still in nodeexec-system", k)
		}
		for _, s := range asSlice(o["subjects"]) {
			if s.(map[string]any)["namespace"] != ns {
				t.Errorf("%s: subject %v, want namespace %s", k, s, ns)
			}
		}
	}
	for _, k := range []string{"v1 Namespace <nil>/" + ns, "v1 ServiceAccount " + ns + "/nodeexec-watcher",
		"rbac.authorization.k8s.io/v1 Role " + ns + "/nodeexec-watcher", "rbac.authorization.k8s.io/v1 Role " + ns + "/nodeexec-watcher-leader-election",
		"rbac.authorization.k8s.io/v1 Role default/nodeexec-watcher-events", "v1 Namespace <nil>/ops-policy"} {
		if _, ok := objs[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	// collector.enabled and forceDrain.enabled false: their ClusterRoles
	// stay (for whoever binds them), their bindings go.
	for _, k := range []string{"rbac.authorization.k8s.io/v1 ClusterRoleBinding <nil>/nodeexec-run-collector", "rbac.authorization.k8s.io/v1 ClusterRoleBinding <nil>/nodeexec-watcher-force-drain"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered with its value false", k)
		}
	}
	cm, ok := objs["v1 ConfigMap ops-policy/nodeexec-policy"]
	if !ok {
		t.Fatal("no policy parameters in ops-policy")
	}
	if got := toJSON(t, cm["data"]); got != `{"allowedImagePrefixes":"registry.example.com:5000/platform/,busybox:","allowedNamespaces":"ops-nodeexec"}` {
		t.Errorf("policy parameters %s", got)
	}
	b := objs["admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding <nil>/nodeexec-nodescripts"]
	if got := toJSON(t, b["spec"].(map[string]any)["paramRef"]); got != `{"name":"nodeexec-policy","namespace":"ops-policy","parameterNotFoundAction":"Deny"}` {
		t.Errorf("paramRef %s", got)
	}
	p := toJSON(t, objs["admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy <nil>/nodeexec-nodescripts"])
	if !strings.Contains(p, "ConfigMap ops-policy/nodeexec-policy") || strings.Contains(p, "ConfigMap nodeexec-policy/") {
		t.Error("the policy's messages do not name its parameters in ops-policy")
	}
	for _, s := range []string{"spec.backend.namespace: " + ns, "registry.example.com:5000/platform/nodeexec@" + digest, "3 replica(s)"} {
		if !strings.Contains(notes, s) {
			t.Errorf("NOTES.txt does not say %q:\n%s", s, notes)
		}
	}

	// Tag without digest; namespaces that exist already; no policy; the
	// collector at another interval.
	objs, notes, err = render(t, map[string]any{
		"image":           map[string]any{"tag": "0.3.0"},
		"createNamespace": false, "collector": map[string]any{"interval": "90s"},
		"policy": map[string]any{"enabled": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	c = container(t, objs, "nodeexec-system")
	if c["image"] != "nodeexec.local/agent:0.3.0" || !slices.Contains(c["command"].([]any), any("--collect-interval=90s")) {
		t.Errorf("image %v, command %v", c["image"], c["command"])
	}
	for k := range objs {
		if strings.Contains(k, "Namespace") || strings.Contains(k, "admissionregistration") || strings.Contains(k, "nodeexec-policy") {
			t.Errorf("%s rendered with createNamespace and policy.enabled false", k)
		}
	}
	if !strings.Contains(notes, "image.digest") {
		t.Errorf("NOTES.txt does not advise a digest for an image by tag:\n%s", notes)
	}
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// TestChartBadValues: values the schema (or a template check) refuses, each
// naming the value, before anything would be installed.
func TestChartBadValues(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"replicas": 0}, "/replicas"},
		{map[string]any{"replicas": "two"}, "/replicas"},
		{map[string]any{"replica": 2}, "replica"},
		{map[string]any{"namespace": "Not_A_Namespace"}, "/namespace"},
		{map[string]any{"image": map[string]any{"digest": "sha256:abc"}}, "/image/digest"},
		{map[string]any{"image": map[string]any{"digest": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}, "/image/digest"},
		{map[string]any{"image": map[string]any{"repository": "Registry.example.com/x:1.0"}}, "/image/repository"},
		{map[string]any{"image": map[string]any{"repository": ""}}, "/image/repository"},
		{map[string]any{"image": map[string]any{"tag": "a b"}}, "/image/tag"},
		{map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "/image/pullPolicy"},
		{map[string]any{"collector": map[string]any{"interval": "soon"}}, "/collector/interval"},
		{map[string]any{"collector": map[string]any{"enabled": "yes"}}, "/collector/enabled"},
		{map[string]any{"metrics": map[string]any{"bindAddress": "8080"}}, "/metrics/bindAddress"},
		{map[string]any{"policy": map[string]any{"allowedImagePrefixes": []any{}}}, "/policy/allowedImagePrefixes"},
		{map[string]any{"policy": map[string]any{"allowedImagePrefixes": []any{"a/,b/"}}}, "/policy/allowedImagePrefixes/0"},
		{map[string]any{"policy": map[string]any{"allowedNamespaces": []any{"Bad"}}}, "/policy/allowedNamespaces/0"},
		{map[string]any{"policy": map[string]any{"namespace": "nodeexec-system"}}, "policy.namespace \"nodeexec-system\" is the watcher's namespace"},
		{map[string]any{"nodeSelector": map[string]any{"kubernetes.io/arch": 1}}, "/nodeSelector/kubernetes.io~1arch"},
		{map[string]any{"tolerations": map[string]any{}}, "/tolerations"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, _, err := render(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %v: error %v, want one naming %s", tc.vals, err, tc.want)
			}
		})
	}
}

// valuesTable is docs/helm.md's table of values, made from values.yaml: one
// row per value with a "# --" comment (its description, continued by the
// comment lines after it), its default as JSON.
func valuesTable(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(src, &vals); err != nil {
		t.Fatal(err)
	}
	type level struct {
		indent int
		key    string
	}
	var (
		stack   []level
		desc    []string
		inDesc  bool
		rows    []string
		covered []string
	)
	for _, line := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case strings.HasPrefix(trimmed, "# --"):
			desc, inDesc = []string{strings.TrimSpace(strings.TrimPrefix(trimmed, "# --"))}, true
			continue
		case strings.HasPrefix(trimmed, "#") && inDesc:
			desc = append(desc, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "- "):
			inDesc = false
			continue
		}
		k, _, ok := strings.Cut(trimmed, ":")
		if !ok {
			t.Fatalf("values.yaml: unexpected line %q", line)
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, k})
		var path []string
		var v any = vals
		for _, l := range stack {
			path = append(path, l.key)
			v = v.(map[string]any)[l.key]
		}
		p := strings.Join(path, ".")
		if inDesc {
			b, _ := json.Marshal(v)
			rows = append(rows, fmt.Sprintf("| `%s` | `%s` | %s |", p, b, strings.Join(desc, " ")))
			covered = append(covered, p)
		} else if _, isMap := v.(map[string]any); !isMap && !slices.ContainsFunc(covered, func(c string) bool { return strings.HasPrefix(p, c+".") }) {
			t.Errorf("values.yaml: %s has no \"# --\" description", p)
		}
		inDesc = false
	}
	return "| Value | Default | Description |\n| --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n"
}

// TestDocsValuesTable: docs/helm.md's table of values is values.yaml's
// (NODEEXEC_UPDATE_DOCS=1 rewrites it).
func TestDocsValuesTable(t *testing.T) {
	const begin, end = "<!-- values table: made from charts/nodeexec/values.yaml by charts/chart_test.go -->\n", "<!-- end of values table -->\n"
	path := "../docs/helm.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), begin)
	got, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no values table between %q and %q", path, begin, end)
	}
	want := valuesTable(t)
	if got == want {
		return
	}
	if os.Getenv("NODEEXEC_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's values table is not values.yaml's (NODEEXEC_UPDATE_DOCS=1 go test ./charts/ rewrites it):\n%s", path, cmp.Diff(want, got))
}

// TestChartLint: `helm lint` (Helm's linter, pkg/lint) finds no warning or
// error (its INFO "icon is recommended" stays: the project has no icon).
func TestChartLint(t *testing.T) {
	for _, m := range lint.All(chartDir, nil, "default", false).Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}
