package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateGates(t *testing.T) {
	prom := func(q, cond string) Gate {
		return Gate{Name: "g", Prometheus: &PrometheusGate{URL: "http://prometheus:9090", Query: q, Condition: cond}}
	}
	alerts := func(url string, matchers ...string) Gate {
		return Gate{Name: "g", Alerts: &AlertsGate{URL: url, Matchers: matchers}}
	}
	cel := func(r GateResource, expr string) Gate {
		return Gate{Name: "g", CEL: &CELGate{Resource: r, Expression: expr}}
	}
	deploy := GateResource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}
	nodes := GateResource{APIVersion: "v1", Kind: "Node"}
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	tests := map[string]struct {
		gates []Gate
		want  string // "" = valid
	}{
		"prometheus":            {[]Gate{prom(`sum(rate(errors_total[5m])) / sum(rate(requests_total[5m]))`, "< 0.05")}, ""},
		"prometheus alert-like": {[]Gate{prom(`ALERTS{severity="critical"}`, "")}, ""},
		"alerts":                {[]Gate{alerts("https://am.example:9093/prefix", "severity=critical", `alertname=~"Node.*"`)}, ""},
		"alerts no matchers":    {[]Gate{alerts("http://am:9093")}, ""},
		"cel one":               {[]Gate{cel(deploy, "object.status.availableReplicas == object.spec.replicas")}, ""},
		"cel list":              {[]Gate{cel(nodes, "objects.filter(n, n.status.conditions.exists(c, c.type == 'Ready' && c.status != 'True')).size() <= 1")}, ""},
		"cel k8s library":       {[]Gate{cel(deploy, "quantity(object.spec.template.spec.containers[0].resources.limits.memory).isLessThan(quantity('1Gi'))")}, ""},
		"for and interval":      {[]Gate{{Name: "g", For: d(2 * time.Minute), Interval: d(time.Second), Alerts: &AlertsGate{URL: "http://am"}}}, ""},

		"promql not parsing":    {[]Gate{prom("sum(rate(x[5m]", "")}, "spec.gates[0].prometheus.query: Invalid value"},
		"promql range":          {[]Gate{prom("x[5m]", "")}, "want an instant vector or a scalar"},
		"promql empty":          {[]Gate{prom(" ", "")}, "spec.gates[0].prometheus.query: Required value"},
		"condition no op":       {[]Gate{prom("up", "0.05")}, "spec.gates[0].prometheus.condition: Invalid value"},
		"condition no num":      {[]Gate{prom("up", "< abc")}, "spec.gates[0].prometheus.condition"},
		"condition NaN":         {[]Gate{prom("up", "== NaN")}, "not a finite number"},
		"bad url scheme":        {[]Gate{alerts("ftp://am:9093")}, "spec.gates[0].alerts.url: Invalid value"},
		"url no host":           {[]Gate{alerts("http://")}, "spec.gates[0].alerts.url"},
		"url not a url":         {[]Gate{{Name: "g", Prometheus: &PrometheusGate{URL: "::nope", Query: "up"}}}, "spec.gates[0].prometheus.url"},
		"url missing":           {[]Gate{{Name: "g", Prometheus: &PrometheusGate{Query: "up"}}}, "spec.gates[0].prometheus.url: Required value"},
		"matcher no operator":   {[]Gate{alerts("http://am", "severity")}, "spec.gates[0].alerts.matchers[0]: Invalid value: \"severity\""},
		"ignore no operator":    {[]Gate{{Name: "g", Alerts: &AlertsGate{URL: "http://am", Ignore: []string{"ok=1", "Watchdog"}}}}, "spec.gates[0].alerts.ignore[1]"},
		"cel not compiling":     {[]Gate{cel(deploy, "object.status.availableReplicas ==")}, "spec.gates[0].cel.expression: Invalid value"},
		"cel not bool":          {[]Gate{cel(deploy, "1 + 2")}, "want a bool"},
		"cel wrong var":         {[]Gate{cel(nodes, "object.spec.replicas == 1")}, "undeclared reference to 'object'"},
		"cel type error":        {[]Gate{cel(deploy, "'a' + 1 == 2")}, "no matching overload"},
		"cel no kind":           {[]Gate{cel(GateResource{APIVersion: "v1"}, "objects.size() == 0")}, "spec.gates[0].cel.resource.kind: Required value"},
		"cel bad apiVersion":    {[]Gate{cel(GateResource{APIVersion: "a/b/c", Kind: "X"}, "objects.size() == 0")}, "spec.gates[0].cel.resource.apiVersion"},
		"cel name and selector": {[]Gate{cel(GateResource{APIVersion: "v1", Kind: "Node", Name: "n", Selector: &metav1.LabelSelector{}}, "object.metadata.name == 'n'")}, "spec.gates[0].cel.resource.selector"},
		"cel bad selector":      {[]Gate{cel(GateResource{APIVersion: "v1", Kind: "Node", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}, "objects.size() == 0")}, "spec.gates[0].cel.resource.selector"},
		"duplicate names":       {[]Gate{alerts("http://am"), alerts("http://am")}, "spec.gates[1].name: Duplicate value: \"g\""},
		"bad name":              {[]Gate{{Name: "Not_A_Label", Alerts: &AlertsGate{URL: "http://am"}}}, "spec.gates[0].name: Invalid value"},
		"no name":               {[]Gate{{Alerts: &AlertsGate{URL: "http://am"}}}, "spec.gates[0].name: Required value"},
		"negative for":          {[]Gate{{Name: "g", For: d(-time.Second), Alerts: &AlertsGate{URL: "http://am"}}}, "spec.gates[0].for: Invalid value: \"-1s\""},
		"negative interval":     {[]Gate{{Name: "g", Interval: d(-time.Second), Alerts: &AlertsGate{URL: "http://am"}}}, "spec.gates[0].interval: Invalid value: \"-1s\""},
		"interval too short":    {[]Gate{{Name: "g", Interval: d(500 * time.Millisecond), Alerts: &AlertsGate{URL: "http://am"}}}, "must be at least 1s"},
		"no kind":               {[]Gate{{Name: "g"}}, "spec.gates[0]: Invalid value: \"(0 kinds)\": set exactly one of prometheus, alerts and cel"},
		"two kinds":             {[]Gate{{Name: "g", Alerts: &AlertsGate{URL: "http://am"}, Prometheus: &PrometheusGate{URL: "http://p", Query: "up"}}}, "set exactly one"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			ns.Spec.Gates = tc.gates
			errs := Validate(ns)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, errs.ToAggregate())
			}
		})
	}
}

func TestParseGateCondition(t *testing.T) {
	for in, want := range map[string]GateCondition{
		"< 0.05": {"<", 0.05}, ">=3": {">=", 3}, " == 0 ": {"==", 0}, "!= -1e3": {"!=", -1000}, "<=1": {"<=", 1}, "> .5": {">", 0.5},
	} {
		got, err := ParseGateCondition(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseGateCondition(got.String()); err != nil || back != got {
			t.Errorf("%q: String %q reads back as %+v, %v", in, got.String(), back, err)
		}
	}
	for _, in := range []string{"", "0.05", "<", "< ", "=< 1", "=> 1", "= 1", "< 1 2", "< Inf", "< NaN", "< 1_000", "<< 1", "~ 1", "< 0x"} {
		if c, err := ParseGateCondition(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, c)
		}
	}
}

func TestGateDurationSyntax(t *testing.T) {
	doc := []byte("spec:\n  gates:\n  - {name: a, for: soon}\n  - {name: b, interval: 5}\n  - {name: c, for: 2m, interval: 1s}\n")
	errs := ValidateDurationSyntax(doc)
	got := errs.ToAggregate().Error()
	for _, want := range []string{"spec.gates[0].for", "spec.gates[1].interval"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %s", got, want)
		}
	}
	if len(errs) != 2 {
		t.Errorf("%d errors, want 2: %v", len(errs), got)
	}
}
