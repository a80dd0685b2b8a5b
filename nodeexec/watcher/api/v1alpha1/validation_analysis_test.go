package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// withAnalysis is valid() with a valid canary analysis, then mutate.
func withAnalysis(mutate func(*NodeScriptSpec, *CanaryAnalysis)) *NodeScript {
	ns := valid()
	ns.Spec.RollbackScript = "undo"
	ns.Spec.Rollout.SoakTime = &metav1.Duration{Duration: 10 * time.Minute}
	ns.Spec.Rollout.Analysis = &CanaryAnalysis{
		URL: "http://prometheus.monitoring:9090", Query: `sum by (node) (rate(errors_total[1m]))`,
		Tolerance: ptr.To(intstr.FromString("10%")),
	}
	mutate(&ns.Spec, ns.Spec.Rollout.Analysis)
	return ns
}

func TestValidateAnalysis(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*NodeScriptSpec, *CanaryAnalysis)
		want   string // "" = valid
	}{
		"valid":          {func(*NodeScriptSpec, *CanaryAnalysis) {}, ""},
		"threshold only": {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance, a.Threshold = nil, ptr.To(NewNumber("0.05")) }, ""},
		"both, higher is better": {func(_ *NodeScriptSpec, a *CanaryAnalysis) {
			a.Threshold, a.Direction = ptr.To(NewNumber("99")), DirectionHigherIsBetter
		}, ""},
		"tolerance as a number":     {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance = ptr.To(intstr.FromInt32(25)) }, ""},
		"https, a path, a port":     {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.URL = "https://example.com:8443/prometheus" }, ""},
		"interval 1s":               {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Interval = &metav1.Duration{Duration: time.Second} }, ""},
		"no url":                    {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.URL = "" }, "spec.rollout.analysis.url: Required value"},
		"url without scheme":        {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.URL = "prometheus:9090" }, `spec.rollout.analysis.url: Invalid value: "prometheus:9090": want an http:// or https:// URL`},
		"url without host":          {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.URL = "http://" }, "spec.rollout.analysis.url: Invalid value"},
		"ftp url":                   {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.URL = "ftp://x" }, "spec.rollout.analysis.url: Invalid value"},
		"no query":                  {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Query = " " }, "spec.rollout.analysis.query: Required value"},
		"query that does not parse": {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Query = "sum by (node (x)" }, "spec.rollout.analysis.query: Invalid value: \"sum by (node (x)\": not a PromQL expression"},
		"scalar query":              {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Query = "1 + 1" }, "spec.rollout.analysis.query: Invalid value: \"1 + 1\": returns a scalar: want an instant vector"},
		"range query":               {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Query = "errors_total[5m]" }, "returns a range vector"},
		"bad node label":            {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.NodeLabel = "kubernetes.io/hostname" }, "spec.rollout.analysis.nodeLabel: Invalid value"},
		"short interval": {func(_ *NodeScriptSpec, a *CanaryAnalysis) {
			a.Interval = &metav1.Duration{Duration: 500 * time.Millisecond}
		}, `spec.rollout.analysis.interval: Invalid value: "500ms": must be at least 1s`},
		"bad direction":                   {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Direction = "Up" }, `spec.rollout.analysis.direction: Unsupported value: "Up"`},
		"neither tolerance nor threshold": {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance = nil }, "spec.rollout.analysis.tolerance: Required value: set tolerance"},
		"bare fraction":                   {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance = ptr.To(intstr.FromString("0.1")) }, `spec.rollout.analysis.tolerance: Invalid value: "0.1": want a percentage`},
		"negative tolerance":              {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance = ptr.To(intstr.FromInt32(-5)) }, "spec.rollout.analysis.tolerance: Invalid value: \"-5\": must be 0 or more"},
		"negative percentage":             {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Tolerance = ptr.To(intstr.FromString("-5%")) }, "spec.rollout.analysis.tolerance"},
		"100% higher is better": {func(_ *NodeScriptSpec, a *CanaryAnalysis) {
			a.Tolerance, a.Direction = ptr.To(intstr.FromString("100%")), DirectionHigherIsBetter
		}, "never finds a regression under HigherIsBetter"},
		"threshold not a number": {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Threshold = ptr.To(NewNumber("five")) }, `spec.rollout.analysis.threshold: Invalid value: "five": "five" is not a number`},
		"threshold NaN":          {func(_ *NodeScriptSpec, a *CanaryAnalysis) { a.Threshold = ptr.To(NewNumber("NaN")) }, "spec.rollout.analysis.threshold"},
		"no soak time":           {func(s *NodeScriptSpec, _ *CanaryAnalysis) { s.Rollout.SoakTime = nil }, "spec.rollout.soakTime: Required value: spec.rollout.analysis runs while the canaries soak"},
		"zero soak time":         {func(s *NodeScriptSpec, _ *CanaryAnalysis) { s.Rollout.SoakTime = &metav1.Duration{} }, "spec.rollout.soakTime: Required value"},
		"no canary":              {func(s *NodeScriptSpec, _ *CanaryAnalysis) { s.Rollout.Canary = ptr.To[int32](0) }, "spec.rollout.canary: Invalid value: 0: spec.rollout.analysis compares the canaries"},
		"manual promotion":       {func(s *NodeScriptSpec, _ *CanaryAnalysis) { s.Rollout.Promotion = PromotionManual }, "spec.rollout.promotion: Invalid value: \"Manual\": spec.rollout.analysis gates automatic promotion"},
		"no rollback script":     {func(s *NodeScriptSpec, _ *CanaryAnalysis) { s.RollbackScript = "" }, "spec.rollbackScript: Required value: spec.rollout.analysis is set"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := Validate(withAnalysis(c.mutate))
			switch {
			case c.want == "" && len(errs) > 0:
				t.Errorf("want valid, got %v", errs)
			case c.want != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), c.want)):
				t.Errorf("want %q, got %v", c.want, errs)
			}
		})
	}
}

func TestParseTolerance(t *testing.T) {
	for _, c := range []struct {
		in   intstr.IntOrString
		want float64
		err  bool
	}{
		{intstr.FromString("10%"), 0.1, false},
		{intstr.FromString("2.5%"), 0.025, false},
		{intstr.FromString("0%"), 0, false},
		{intstr.FromInt32(10), 0.1, false},
		{intstr.FromInt32(0), 0, false},
		{intstr.FromString("200%"), 2, false},
		{intstr.FromString("0.1"), 0, true},
		{intstr.FromString("10"), 0, true},
		{intstr.FromString("%"), 0, true},
		{intstr.FromString(".5%"), 0, true},
		{intstr.FromString("5.%"), 0, true},
		{intstr.FromString("1e3%"), 0, true},
		{intstr.FromString("+5%"), 0, true},
		{intstr.FromString("10 %"), 0, true},
		{intstr.FromString("2000000%"), 0, true},
		{intstr.FromInt32(-1), 0, true},
	} {
		got, err := ParseTolerance(c.in)
		if (err != nil) != c.err || (err == nil && got != c.want) {
			t.Errorf("ParseTolerance(%s) = %v, %v; want %v (error %t)", c.in.String(), got, err, c.want, c.err)
		}
	}
}

func TestNumberJSON(t *testing.T) {
	var a CanaryAnalysis
	for _, doc := range []string{`{"threshold": 0.05}`, `{"threshold": "0.05"}`} {
		if err := json.Unmarshal([]byte(doc), &a); err != nil || a.Threshold == nil || a.Threshold.String() != "0.05" {
			t.Errorf("%s: %v, %v", doc, a.Threshold, err)
		}
	}
	if err := json.Unmarshal([]byte(`{"threshold": "abc"}`), &a); err != nil || a.Threshold.String() != "abc" {
		t.Errorf("threshold abc: %v, %v; want it kept for Validate", a.Threshold, err)
	}
	if _, err := a.Threshold.Float64(); err == nil {
		t.Errorf("threshold abc: Float64 accepted it")
	}
	if err := json.Unmarshal([]byte(`{"threshold": true}`), &a); err == nil {
		t.Errorf("threshold true: no error")
	}
	b, err := json.Marshal(AnalysisStatus{Canary: ptr.To(NumberOf(0.1)), Baseline: ptr.To(NumberOf(2))})
	if err != nil || !strings.Contains(string(b), `"canary":0.1,"baseline":2,`) || !strings.Contains(string(b), `"passingSince":null`) {
		t.Errorf("marshal: %s, %v", b, err)
	}
}
