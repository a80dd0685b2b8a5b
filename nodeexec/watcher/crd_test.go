package watcher

import (
	"os"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// crdField is one string field of the generated CRD (deploy/crd): its
// maxLength and its x-kubernetes-validations rules, compiled as the API
// server compiles them (self a string; Kubernetes' string extensions).
type crdField struct {
	maxLength int
	rules     []cel.Program
	texts     []string
}

// accepts reports whether the API server's schema admits s in the field.
func (f crdField) accepts(t testing.TB, s string) bool {
	t.Helper()
	if len([]rune(s)) > f.maxLength {
		return false
	}
	for i, r := range f.rules {
		out, _, err := r.Eval(map[string]any{"self": s})
		if err != nil {
			t.Fatalf("rule %s on %q: %v", f.texts[i], s, err)
		}
		if out != types.True {
			return false
		}
	}
	return true
}

func loadCRDField(t testing.TB, path ...string) crdField {
	t.Helper()
	b, err := os.ReadFile("../../deploy/crd/nodeexec.io_nodescripts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("the CRD: %v (%d versions)", err, len(crd.Spec.Versions))
	}
	s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, p := range path {
		props, _ := s["properties"].(map[string]any)
		if s, _ = props[p].(map[string]any); s == nil {
			t.Fatalf("the CRD has no property %s", strings.Join(path, "."))
		}
	}
	env, err := cel.NewEnv(cel.Variable("self", cel.StringType), ext.Strings(ext.StringsVersion(2)))
	if err != nil {
		t.Fatal(err)
	}
	f := crdField{maxLength: 1 << 30}
	if n, ok := s["maxLength"].(float64); ok {
		f.maxLength = int(n)
	}
	rules, _ := s["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		text, _ := r.(map[string]any)["rule"].(string)
		ast, iss := env.Compile(text)
		if iss.Err() != nil {
			t.Fatalf("%s: rule %s: %v", strings.Join(path, "."), text, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		f.rules, f.texts = append(f.rules, prg), append(f.texts, text)
	}
	return f
}

// goRefusesImage reports whether v1alpha1.Validate (nodeexec apply, the
// watcher) refuses image as spec.backend.image, and why.
func goRefusesImage(image string) (bool, string) {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: v1alpha1.NodeScriptSpec{Script: "true", Backend: v1alpha1.BackendSpec{Image: image}}}
	for _, e := range v1alpha1.Validate(ns) {
		if e.Field == "spec.backend.image" {
			return true, e.Error()
		}
	}
	return false, ""
}

// checkImageRule is "the CRD's rule on spec.backend.image and Validate
// agree": each accepts what the other accepts, except names too long once
// normalized (docker.io/library/ prepended), which Validate alone counts:
// the API server refuses nothing Validate accepts.
func checkImageRule(t *testing.T, f crdField, image string) {
	t.Helper()
	if image == "" {
		return // omitted: the backend's default
	}
	goRefuses, why := goRefusesImage(image)
	switch crd := f.accepts(t, image); {
	case crd && goRefuses && !strings.Contains(why, "must not be more than 255 characters"):
		t.Fatalf("image %q: the CRD admits it, Validate refuses it: %s", image, why)
	case !crd && !goRefuses:
		t.Fatalf("image %q: Validate accepts it, the CRD refuses it", image)
	}
}

var imageSeeds = []string{
	"busybox", "busybox:1.36", "busybox:stable", "registry.local:5000/team/tool:v1", "nodeexec.local/agent:0.2.0",
	"busybox@sha256:" + strings.Repeat("a", 64), "busybox:1@sha512:" + strings.Repeat("0", 128), "[::1]:5000/x:y",
	"localhost/x:_y", "Registry.Example/x", "a.b/c__d/e--f/g.h_i",
	"", "busy box", "BusyBox", "x@sha256:12", "x@sha256:" + strings.Repeat("A", 64), "x@sha1:" + strings.Repeat("a", 40),
	"x@md5:" + strings.Repeat("a", 32), strings.Repeat("a", 64), strings.Repeat("f", 64) + ":1", "a:b:c", "-x", "a//b", "a\x00b",
	"x:" + strings.Repeat("t", 129), "x:-t", strings.Repeat("n", 300), "h.io/" + strings.Repeat("n", 251), "h.io/" + strings.Repeat("n", 249) + "/x",
	strings.Repeat("n", 240), "nodeexec.local/agent:0.2.0\n", " busybox",
}

// TestCRDImageRule: the API server refuses, in spec.backend.image, what
// `nodeexec apply` refuses (the distribution reference grammar), whoever
// writes the NodeScript: the rule's grammar is distribution/reference's
// own regular expression, and both agree on every seed.
func TestCRDImageRule(t *testing.T) {
	f := loadCRDField(t, "spec", "backend", "image")
	if len(f.texts) != 1 || !strings.Contains(f.texts[0], "self.matches(r'"+reference.ReferenceRegexp.String()+"')") {
		t.Fatalf("spec.backend.image's rules %q do not match distribution/reference's grammar %s", f.texts, reference.ReferenceRegexp)
	}
	for _, s := range imageSeeds {
		checkImageRule(t, f, s)
	}
	for _, s := range []string{"busybox:1.36", "nodeexec.local/agent:0.2.0"} {
		if !f.accepts(t, s) {
			t.Errorf("the CRD refuses %q", s)
		}
	}
	for _, s := range []string{"busy box", "BusyBox", "x@sha256:12", "a\x00b", strings.Repeat("a", 64)} {
		if f.accepts(t, s) {
			t.Errorf("the CRD admits %q", s)
		}
	}
}

// FuzzCRDImageRule: the CRD's rule on spec.backend.image and Validate
// agree on any string (checkImageRule).
func FuzzCRDImageRule(f *testing.F) {
	for _, s := range imageSeeds {
		f.Add(s)
	}
	field := loadCRDField(f, "spec", "backend", "image")
	f.Fuzz(func(t *testing.T, s string) { checkImageRule(t, field, s) })
}

// TestCRDScriptsRefuseNUL: the API server refuses a NUL byte in every
// field that becomes a shell's argument, as Validate does, and admits the
// rest.
func TestCRDScriptsRefuseNUL(t *testing.T) {
	for _, name := range []string{"script", "checkScript", "verifyScript", "rollbackScript", "rebootCommand"} {
		f := loadCRDField(t, "spec", name)
		for _, s := range []string{"echo a\x00b", "\x00", "true\n\x00"} {
			if f.accepts(t, s) {
				t.Errorf("spec.%s: the CRD admits %q", name, s)
			}
		}
		for _, s := range []string{"true", "printf '\\0'", "echo \\u0000 é\t\x01"} {
			if !f.accepts(t, s) {
				t.Errorf("spec.%s: the CRD refuses %q", name, s)
			}
		}
	}
}
