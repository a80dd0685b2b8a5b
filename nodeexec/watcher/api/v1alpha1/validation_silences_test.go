package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateSilences(t *testing.T) {
	ok := Silence{URL: "http://alertmanager.monitoring:9093", Matchers: []string{`alertname="KubeNodeNotReady"`}, NodeLabel: "node"}
	tests := map[string]struct {
		mutate func(*MaintenanceSpec)
		want   []string // nil = valid
	}{
		"valid":          {func(*MaintenanceSpec) {}, nil},
		"nodeLabel only": {func(m *MaintenanceSpec) { m.Silences[0].Matchers = nil }, nil},
		"regex and https": {func(m *MaintenanceSpec) {
			m.Silences[0].URL = "https://am.example.com/prefix/"
			m.Silences[0].Matchers = []string{`alertname=~"A|B"`, `severity!="info"`}
		}, nil},
		"duration set":     {func(m *MaintenanceSpec) { m.Silences[0].Duration = &metav1.Duration{Duration: time.Hour} }, nil},
		"no cordon":        {func(m *MaintenanceSpec) { m.Cordon = false; m.MaxUnavailable = nil }, []string{"spec.maintenance.cordon: Invalid value: false: maintenance.silences needs cordon: true"}},
		"no operator":      {func(m *MaintenanceSpec) { m.Silences[0].Matchers = []string{"KubeNodeNotReady"} }, []string{`spec.maintenance.silences[0].matchers[0]: Invalid value: "KubeNodeNotReady": want an Alertmanager matcher`}},
		"second bad":       {func(m *MaintenanceSpec) { m.Silences[0].Matchers = []string{"a=b", `c=~"("`} }, []string{`spec.maintenance.silences[0].matchers[1]: Invalid value`}},
		"bad url":          {func(m *MaintenanceSpec) { m.Silences[0].URL = "alertmanager:9093" }, []string{`spec.maintenance.silences[0].url: Invalid value: "alertmanager:9093": want the Alertmanager's base URL`}},
		"ftp url":          {func(m *MaintenanceSpec) { m.Silences[0].URL = "ftp://am:9093" }, []string{"spec.maintenance.silences[0].url: Invalid value", "http or https"}},
		"url with query":   {func(m *MaintenanceSpec) { m.Silences[0].URL = "http://am:9093/?x=1" }, []string{"spec.maintenance.silences[0].url", "no query"}},
		"no url":           {func(m *MaintenanceSpec) { m.Silences[0].URL = "" }, []string{"spec.maintenance.silences[0].url: Required value"}},
		"long url":         {func(m *MaintenanceSpec) { m.Silences[0].URL = "http://a/" + strings.Repeat("x", MaxSilenceURLBytes) }, []string{"spec.maintenance.silences[0].url: Too long"}},
		"negative":         {func(m *MaintenanceSpec) { m.Silences[0].Duration = &metav1.Duration{Duration: -time.Minute} }, []string{`spec.maintenance.silences[0].duration: Invalid value: "-1m0s": must be positive`}},
		"zero":             {func(m *MaintenanceSpec) { m.Silences[0].Duration = &metav1.Duration{} }, []string{"spec.maintenance.silences[0].duration: Invalid value"}},
		"bad nodeLabel":    {func(m *MaintenanceSpec) { m.Silences[0].NodeLabel = "k8s.io/node" }, []string{`spec.maintenance.silences[0].nodeLabel: Invalid value: "k8s.io/node"`}},
		"nothing to match": {func(m *MaintenanceSpec) { m.Silences[0].Matchers, m.Silences[0].NodeLabel = nil, "" }, []string{"spec.maintenance.silences[0].matchers", "no matchers"}},
		"matches all": {func(m *MaintenanceSpec) {
			m.Silences[0].Matchers, m.Silences[0].NodeLabel = []string{`alertname=~".*"`}, ""
		}, []string{"spec.maintenance.silences[0].matchers", "empty string"}},
		"too many":     {func(m *MaintenanceSpec) { m.Silences = append(m.Silences, ok, ok, ok, ok) }, []string{"spec.maintenance.silences: Too many: 5"}},
		"long comment": {func(m *MaintenanceSpec) { m.Silences[0].Comment = strings.Repeat("c", MaxSilenceCommentBytes+1) }, []string{"spec.maintenance.silences[0].comment: Too long"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			s := ok
			ns.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Silences: []Silence{s}}
			ns.Spec.Maintenance.Silences[0].Matchers = append([]string(nil), ok.Matchers...)
			tt.mutate(ns.Spec.Maintenance)
			errs := Validate(ns)
			got := errs.ToAggregate()
			if tt.want == nil {
				if got != nil {
					t.Fatalf("want valid, got %v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("want %q, got valid", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("got %v\nwant it to contain %q", got, w)
				}
			}
		})
	}
}

func TestSilenceDurationSyntax(t *testing.T) {
	doc := []byte(`
spec:
  maintenance:
    cordon: true
    silences:
    - {url: "http://am:9093", nodeLabel: node, duration: 2h}
    - {url: "http://am:9093", nodeLabel: node, duration: abc}
    - {url: "http://am:9093", nodeLabel: node, duration: 5}
`)
	errs := ValidateDurationSyntax(doc)
	got := errs.ToAggregate().Error()
	for _, w := range []string{`spec.maintenance.silences[1].duration: Invalid value: "abc"`, `spec.maintenance.silences[2].duration: Invalid value: 5`} {
		if !strings.Contains(got, w) {
			t.Errorf("got %s\nwant %s", got, w)
		}
	}
	if strings.Contains(got, "silences[0]") {
		t.Errorf("2h refused: %s", got)
	}
}

func TestSilenceMatchers(t *testing.T) {
	ms, err := SilenceMatchers(Silence{Matchers: []string{`alertname=~"A|B"`, "severity != info"}, NodeLabel: "instance"}, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
	}
	if want := `alertname=~"A|B" severity!="info" instance="node-1"`; strings.Join(got, " ") != want {
		t.Errorf("matchers %q, want %s", got, want)
	}
	if _, err := SilenceMatchers(Silence{Matchers: []string{"foo"}}, "n"); err == nil || !strings.Contains(err.Error(), `matchers[0] "foo"`) {
		t.Errorf("a matcher without an operator: %v", err)
	}
}
