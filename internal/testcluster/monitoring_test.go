package testcluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestPrometheusConfig(t *testing.T) {
	l := testLayout(t)
	var cfg struct {
		Global struct {
			ScrapeInterval     string `json:"scrape_interval"`
			ScrapeTimeout      string `json:"scrape_timeout"`
			EvaluationInterval string `json:"evaluation_interval"`
		} `json:"global"`
		RuleFiles []string `json:"rule_files"`
		Alerting  struct {
			Alertmanagers []struct {
				APIVersion    string `json:"api_version"`
				StaticConfigs []struct {
					Targets []string `json:"targets"`
				} `json:"static_configs"`
			} `json:"alertmanagers"`
		} `json:"alerting"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			HonorLabels   bool   `json:"honor_labels"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.UnmarshalStrict([]byte(prometheusConfigYAML(l)), &cfg); err != nil {
		t.Fatalf("%v:\n%s", err, prometheusConfigYAML(l))
	}
	g := cfg.Global
	if g.ScrapeInterval != "1s" || g.ScrapeTimeout != "1s" || g.EvaluationInterval != "1s" {
		t.Errorf("global = %+v, want 1s scrape and evaluation", g)
	}
	if !slices.Equal(cfg.RuleFiles, []string{"/s/monitoring/rules.yml"}) {
		t.Errorf("rule_files = %v", cfg.RuleFiles)
	}
	am := cfg.Alerting.Alertmanagers
	if len(am) != 1 || am[0].APIVersion != "v2" || len(am[0].StaticConfigs) != 1 ||
		!slices.Equal(am[0].StaticConfigs[0].Targets, []string{"127.0.0.1:19093"}) {
		t.Errorf("alertmanagers = %+v", am)
	}
	sc := cfg.ScrapeConfigs
	if len(sc) != 1 || !sc[0].HonorLabels || len(sc[0].StaticConfigs) != 1 ||
		!slices.Equal(sc[0].StaticConfigs[0].Targets, []string{"127.0.0.1:19091"}) {
		t.Errorf("scrape_configs = %+v, want the Pushgateway with honor_labels", sc)
	}
}

func TestPrometheusRules(t *testing.T) {
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict([]byte(prometheusRulesYAML()), &rules); err != nil {
		t.Fatalf("%v:\n%s", err, prometheusRulesYAML())
	}
	if len(rules.Groups) != 1 || len(rules.Groups[0].Rules) != 1 {
		t.Fatalf("want one group with one rule: %+v", rules)
	}
	r := rules.Groups[0].Rules[0]
	if r.Alert != "NodeexecTestAlert" || r.Expr != "nodeexec_test_alert > 0" || r.For != "0s" || len(r.Labels) != 0 {
		t.Errorf("rule = %+v", r)
	}
}

func TestAlertmanagerConfig(t *testing.T) {
	var cfg struct {
		Route struct {
			Receiver       string   `json:"receiver"`
			GroupBy        []string `json:"group_by"`
			GroupWait      string   `json:"group_wait"`
			GroupInterval  string   `json:"group_interval"`
			RepeatInterval string   `json:"repeat_interval"`
		} `json:"route"`
		Receivers []map[string]any `json:"receivers"`
	}
	if err := yaml.UnmarshalStrict([]byte(alertmanagerConfigYAML()), &cfg); err != nil {
		t.Fatalf("%v:\n%s", err, alertmanagerConfigYAML())
	}
	if cfg.Route.GroupWait != "1s" || cfg.Route.GroupInterval != "1s" || cfg.Route.Receiver != "nodeexec-none" {
		t.Errorf("route = %+v", cfg.Route)
	}
	// a receiver with nothing but its name notifies nobody
	if len(cfg.Receivers) != 1 || len(cfg.Receivers[0]) != 1 || cfg.Receivers[0]["name"] != "nodeexec-none" {
		t.Errorf("receivers = %v, want one with only a name", cfg.Receivers)
	}
}

// TestMonitoringConfigTools checks the rendered files with the packages' own
// checkers (promtool, amtool) where they are installed.
func TestMonitoringConfigTools(t *testing.T) {
	dir := t.TempDir()
	o, err := Options{CacheDir: "/c", StateDir: dir, RunDir: "/r"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{o: o, l: newLayout(o)}
	if err := r.writeMonitoringFiles(); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, c := range []struct {
		tool string
		args []string
	}{
		{"promtool", []string{"check", "config", r.l.prometheusConfig()}},
		{"promtool", []string{"check", "rules", r.l.prometheusRules()}},
		{"amtool", []string{"check-config", r.l.alertmanagerConfig()}},
	} {
		if _, err := exec.LookPath(c.tool); err != nil {
			continue
		}
		ran++
		if out, err := exec.Command(c.tool, c.args...).CombinedOutput(); err != nil {
			t.Errorf("%s %v: %v\n%s", c.tool, c.args, err, out)
		}
	}
	if ran == 0 {
		t.Skip("promtool and amtool are not installed (packages prometheus, prometheus-alertmanager)")
	}
	for _, d := range []string{r.l.prometheusData(), r.l.alertmanagerData()} {
		if !strings.HasPrefix(d, dir+"/") {
			t.Errorf("data dir %s is not under the state dir", d)
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Errorf("data dir %s: %v", d, err)
		}
	}
}

func TestMonitoringArgs(t *testing.T) {
	l := testLayout(t)
	for _, c := range []struct {
		argv []string
		want []string
	}{
		{prometheusArgs(l), []string{"/usr/bin/prometheus", "--web.listen-address=127.0.0.1:19090",
			"--storage.tsdb.retention.time=1h", "--storage.tsdb.path=/s/monitoring/prometheus-data",
			"--config.file=/s/monitoring/prometheus.yml"}},
		{alertmanagerArgs(l), []string{"/usr/bin/prometheus-alertmanager", "--web.listen-address=127.0.0.1:19093",
			"--cluster.listen-address=", "--storage.path=/s/monitoring/alertmanager-data",
			"--config.file=/s/monitoring/alertmanager.yml"}},
		{pushgatewayArgs(l), []string{"/usr/bin/prometheus-pushgateway", "--web.listen-address=127.0.0.1:19091"}},
	} {
		for _, w := range c.want {
			if !slices.Contains(c.argv, w) {
				t.Errorf("%v lacks %q", c.argv, w)
			}
		}
		for _, a := range c.argv {
			if strings.Contains(a, "0.0.0.0") || strings.HasPrefix(a, "--web.listen-address=:") {
				t.Errorf("%v listens beyond loopback: %q", c.argv, a)
			}
		}
	}
	// the ports are fixed and differ from the cluster's own
	ports := []int{PrometheusPort, PushgatewayPort, AlertmanagerPort, DefaultAPIPort, DefaultRegistryHostPort, 10247}
	for i, p := range ports {
		if slices.Contains(ports[i+1:], p) {
			t.Errorf("port %d is used twice in %v", p, ports)
		}
	}
	// every monitoring process is named as the Restore/Stop code expects
	for _, name := range []string{procPrometheus, procAlertmanager, procPushgateway} {
		if _, ok := monitoringProcByName(name); !ok {
			t.Errorf("no monitoring process %q", name)
		}
	}
	for _, p := range append(monitoringPackages(), "prometheus") {
		if !slices.Contains(requiredPackages(), p) {
			t.Errorf("requiredPackages lacks %s", p)
		}
	}
	for _, c := range monitoringCommands() {
		if !slices.Contains(requiredCommands(), c) || !filepath.IsAbs(c) {
			t.Errorf("requiredCommands lacks %s", c)
		}
	}
}

func TestAlertBody(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b, err := alertBody("Custom", map[string]string{"node": "n1", "alertname": "ignored"}, start, start.Add(FireAlertFor))
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("want one alert: %s", b)
	}
	labels := got[0]["labels"].(map[string]any)
	if labels["alertname"] != "Custom" || labels["node"] != "n1" || len(labels) != 2 {
		t.Errorf("labels = %v", labels)
	}
	if got[0]["startsAt"] != "2026-11-27T12:00:00Z" || got[0]["endsAt"] != "2026-11-27T12:05:00Z" {
		t.Errorf("times = %v %v", got[0]["startsAt"], got[0]["endsAt"])
	}
	if _, err := alertBody("", nil, start, start); err == nil {
		t.Error("an alert without a name was accepted")
	}
}
