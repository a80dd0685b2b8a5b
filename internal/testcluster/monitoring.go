package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// Monitoring: a real Prometheus, Alertmanager and Pushgateway (Debian's
// packages prometheus, prometheus-alertmanager and prometheus-pushgateway,
// installed with the cluster's other packages, their packaged services never
// started), run by this package like its other processes: on the host's
// loopback only (tests and an in-process watcher reach them there), recorded
// by PID, stopped and removed by Stop, data under <StateDir>/monitoring.
//
//   - The Pushgateway (no persistence) holds what tests push (PushMetric).
//   - Prometheus scrapes it every second with honor_labels (the pushed job and
//     labels stay as pushed), evaluates its rules every second and sends alerts
//     to the Alertmanager. Its one rule, TestAlertName (NodeexecTestAlert),
//     fires at once (for: 0s) while TestAlertMetric (nodeexec_test_alert) is
//     above 0, with the series' labels. Retention is one hour.
//   - The Alertmanager has one route to a receiver that notifies nothing
//     (group_wait and group_interval 1 s), and no cluster gossip
//     (--cluster.listen-address=). Tests post alerts to it directly
//     (FireAlert, ResolveAlert) or through the rule.
//
// Start brings them up with a new cluster and, on a running cluster, starts
// whichever of them is not running (so a cluster started before they existed
// gets them from `testcluster up`). Restore starts one a fault stopped.
const (
	// PrometheusPort is Prometheus' port on the host's 127.0.0.1.
	PrometheusPort = 19090
	// PushgatewayPort is the Pushgateway's port on the host's 127.0.0.1.
	PushgatewayPort = 19091
	// AlertmanagerPort is the Alertmanager's port on the host's 127.0.0.1.
	AlertmanagerPort = 19093

	// TestAlertName is the alert of Prometheus' rule: it fires while
	// TestAlertMetric is above 0, one alert per series, with its labels.
	TestAlertName = "NodeexecTestAlert"
	// TestAlertMetric is the metric TestAlertName watches (push it with PushMetric).
	TestAlertMetric = "nodeexec_test_alert"

	procPrometheus   = "prometheus"
	procAlertmanager = "alertmanager"
	procPushgateway  = "pushgateway"

	// monitoringRetention is Prometheus' --storage.tsdb.retention.time and the
	// Alertmanager's --data.retention.
	monitoringRetention = "1h"
	// monitoringReadyTimeout bounds the wait for /-/ready after a start.
	monitoringReadyTimeout = 60 * time.Second
)

// monitoringPackages are the Debian packages of the monitoring processes, and
// their packaged service names.
func monitoringPackages() []string {
	return []string{"prometheus", "prometheus-alertmanager", "prometheus-pushgateway"}
}

// monitoringCommands are the binaries of monitoringPackages.
func monitoringCommands() []string {
	return []string{"/usr/bin/prometheus", "/usr/bin/prometheus-alertmanager", "/usr/bin/prometheus-pushgateway"}
}

// monitoringProc describes one monitoring process.
type monitoringProc struct {
	name string
	port int
	argv func(layout) []string
}

// monitoringProcs in start order: what Prometheus talks to first.
func monitoringProcs() []monitoringProc {
	return []monitoringProc{
		{procPushgateway, PushgatewayPort, pushgatewayArgs},
		{procAlertmanager, AlertmanagerPort, alertmanagerArgs},
		{procPrometheus, PrometheusPort, prometheusArgs},
	}
}

func monitoringProcByName(name string) (monitoringProc, bool) {
	for _, p := range monitoringProcs() {
		if p.name == name {
			return p, true
		}
	}
	return monitoringProc{}, false
}

func loopbackURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

func (l layout) monitoringDir() string    { return filepath.Join(l.o.StateDir, "monitoring") }
func (l layout) prometheusConfig() string { return filepath.Join(l.monitoringDir(), "prometheus.yml") }
func (l layout) prometheusRules() string  { return filepath.Join(l.monitoringDir(), "rules.yml") }
func (l layout) prometheusData() string   { return filepath.Join(l.monitoringDir(), "prometheus-data") }
func (l layout) alertmanagerConfig() string {
	return filepath.Join(l.monitoringDir(), "alertmanager.yml")
}
func (l layout) alertmanagerData() string {
	return filepath.Join(l.monitoringDir(), "alertmanager-data")
}
func (l layout) monitoringDataDirs() []string {
	return []string{l.prometheusData(), l.alertmanagerData()}
}

// prometheusConfigYAML renders prometheus.yml: 1 s scrapes of the Pushgateway
// (honor_labels), 1 s rule evaluation, alerts to the Alertmanager (API v2).
func prometheusConfigYAML(l layout) string {
	q := strconv.Quote
	return `# nodeexec test cluster (internal/testcluster/monitoring.go)
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - ` + q(l.prometheusRules()) + `
alerting:
  alertmanagers:
    - api_version: v2
      static_configs:
        - targets: [` + q("127.0.0.1:"+strconv.Itoa(AlertmanagerPort)) + `]
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: [` + q("127.0.0.1:"+strconv.Itoa(PushgatewayPort)) + `]
`
}

// prometheusRulesYAML renders the rule file: TestAlertName while TestAlertMetric > 0.
func prometheusRulesYAML() string {
	return `# nodeexec test cluster (internal/testcluster/monitoring.go)
groups:
  - name: nodeexec-testcluster
    rules:
      - alert: ` + TestAlertName + `
        expr: ` + TestAlertMetric + ` > 0
        for: 0s
        annotations:
          summary: "` + TestAlertMetric + ` is above 0 (pushed by a test)"
`
}

// alertmanagerConfigYAML renders alertmanager.yml: one route to a receiver
// without notifiers (nothing is sent anywhere), short grouping waits.
func alertmanagerConfigYAML() string {
	return `# nodeexec test cluster (internal/testcluster/monitoring.go)
route:
  receiver: nodeexec-none
  group_by: ["alertname"]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: nodeexec-none
`
}

// monitoringFiles are the configuration files by path.
func monitoringFiles(l layout) map[string]string {
	return map[string]string{
		l.prometheusConfig():   prometheusConfigYAML(l),
		l.prometheusRules():    prometheusRulesYAML(),
		l.alertmanagerConfig(): alertmanagerConfigYAML(),
	}
}

// prometheusArgs: loopback only, short retention, alerts re-sent every second
// (so an Alertmanager restarted by a test has them again within seconds, and
// their endsAt is 4 s ahead).
func prometheusArgs(l layout) []string {
	return []string{"/usr/bin/prometheus",
		"--config.file=" + l.prometheusConfig(),
		"--storage.tsdb.path=" + l.prometheusData(),
		"--storage.tsdb.retention.time=" + monitoringRetention,
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(PrometheusPort),
		"--web.external-url=" + loopbackURL(PrometheusPort) + "/",
		"--rules.alert.resend-delay=1s",
		"--log.level=info",
	}
}

func alertmanagerArgs(l layout) []string {
	return []string{"/usr/bin/prometheus-alertmanager",
		"--config.file=" + l.alertmanagerConfig(),
		"--storage.path=" + l.alertmanagerData(),
		"--data.retention=" + monitoringRetention,
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(AlertmanagerPort),
		"--web.external-url=" + loopbackURL(AlertmanagerPort) + "/",
		"--cluster.listen-address=", // no gossip
		"--log.level=info",
	}
}

// pushgatewayArgs: no persistence file, so a restart starts empty.
func pushgatewayArgs(_ layout) []string {
	return []string{"/usr/bin/prometheus-pushgateway",
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(PushgatewayPort),
		"--log.level=info",
	}
}

// writeMonitoringFiles creates the monitoring directories and writes the
// configuration files.
func (r *runner) writeMonitoringFiles() error {
	for _, d := range append([]string{r.l.monitoringDir()}, r.l.monitoringDataDirs()...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("monitoring: %w", err)
		}
	}
	for path, body := range monitoringFiles(r.l) {
		if err := writeFileAtomic(path, []byte(body), 0o644); err != nil {
			return fmt.Errorf("monitoring: %w", err)
		}
	}
	return nil
}

// startMonitoring starts every monitoring process that is not running and
// waits until each answers /-/ready.
func (r *runner) startMonitoring(ctx context.Context) error {
	t := time.Now()
	if err := r.writeMonitoringFiles(); err != nil {
		return err
	}
	for _, p := range monitoringProcs() {
		if err := r.startMonitoringProc(ctx, p); err != nil {
			return err
		}
	}
	r.timing("monitoring", t)
	return nil
}

// startMonitoringProc starts p unless it runs, and waits until it is ready.
func (r *runner) startMonitoringProc(ctx context.Context, p monitoringProc) error {
	if rec, err := r.l.readProc(p.name); err != nil || !rec.alive() {
		if err := portFree(p.port); err != nil {
			return fmt.Errorf("%s port 127.0.0.1:%d is taken: %w", p.name, p.port, err)
		}
		if _, err := r.startDaemon(p.name, nsTarget{}, p.argv(r.l), false); err != nil {
			return err
		}
	}
	if err := waitMonitoringReady(ctx, p); err != nil {
		return err
	}
	if p.name == procPrometheus {
		return waitPushgatewayScraped(ctx)
	}
	return nil
}

// waitPushgatewayScraped waits until Prometheus' Pushgateway target is up
// (GET /api/v1/targets: health "up"), so that queries return fresh samples.
// A started Prometheus scrapes first about 5 s after it starts (its service
// discovery's update interval); before that, queries answer from the data
// it had when it stopped.
func waitPushgatewayScraped(ctx context.Context) error {
	url := loopbackURL(PrometheusPort) + "/api/v1/targets?state=active"
	return poll(ctx, monitoringReadyTimeout, 100*time.Millisecond, "Prometheus scraping the Pushgateway", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := monitoringClient().Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var out struct {
			Data struct {
				ActiveTargets []struct {
					ScrapePool string `json:"scrapePool"`
					Health     string `json:"health"`
					LastError  string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return false, fmt.Errorf("GET %s: %w", url, err)
		}
		for _, t := range out.Data.ActiveTargets {
			if t.ScrapePool == "pushgateway" {
				if t.Health == "up" {
					return true, nil
				}
				return false, fmt.Errorf("target pushgateway: health %q %s", t.Health, t.LastError)
			}
		}
		return false, errors.New("no pushgateway target yet")
	})
}

// waitMonitoringReady polls p's /-/ready until it answers 200.
func waitMonitoringReady(ctx context.Context, p monitoringProc) error {
	url := loopbackURL(p.port) + "/-/ready"
	return poll(ctx, monitoringReadyTimeout, 100*time.Millisecond, p.name+" "+url, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return true, nil
	})
}

// restoreMonitoring starts the monitoring processes a fault stopped (recorded,
// not running) and waits until they are ready.
func (r *runner) restoreMonitoring(ctx context.Context) error {
	for _, p := range monitoringProcs() {
		rec, err := r.l.readProc(p.name)
		if err != nil || rec.alive() {
			continue // never started, or running
		}
		if err := r.writeMonitoringFiles(); err != nil {
			return err
		}
		if err := r.startMonitoringProc(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// disablePackagedServices makes sure the services of the monitoring packages
// this run just installed neither run nor start at boot: policy-rc.d kept
// their postinst from starting them; this disables them in the init systems
// present (systemd units and their symlinks, SysV links), stops a unit that
// runs anyway, and fails if a process of their binaries runs that this
// package did not start. Packages that were installed before are left alone.
func (r *runner) disablePackagedServices(ctx context.Context, installed []string) error {
	systemdRuns := false
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		systemdRuns = true
	}
	for _, svc := range installed {
		if !slices.Contains(monitoringPackages(), svc) {
			continue
		}
		if systemdRuns && commandExists("systemctl") {
			if _, err := r.run(ctx, "systemctl", "disable", "--now", svc+".service"); err != nil {
				r.logf("warning: %v", err)
			}
		} else if commandExists("deb-systemd-helper") {
			// removes the multi-user.target.wants symlink the postinst made; it
			// refuses to run unless called for a package's maintainer script
			env := []string{"DPKG_MAINTSCRIPT_PACKAGE=" + svc}
			if _, err := runEnv(ctx, env, "", "deb-systemd-helper", "disable", svc+".service"); err != nil {
				r.logf("warning: %v", err)
			}
		}
		if _, err := os.Stat("/etc/init.d/" + svc); err == nil && commandExists("update-rc.d") {
			if _, err := r.run(ctx, "update-rc.d", svc, "disable"); err != nil {
				r.logf("warning: %v", err)
			}
		}
	}
	if foreign := r.foreignMonitoringProcs(); len(foreign) > 0 {
		return fmt.Errorf("install packages: processes of the packaged monitoring services run (pids %v) after apt-get install; stop and disable them (systemctl disable --now prometheus prometheus-alertmanager prometheus-pushgateway)", foreign)
	}
	return nil
}

// foreignMonitoringProcs lists the PIDs of processes running a monitoring
// binary that are not recorded by this package.
func (r *runner) foreignMonitoringProcs() []int {
	ours := map[int]bool{}
	for _, p := range monitoringProcs() {
		if rec, err := r.l.readProc(p.name); err == nil && rec.alive() {
			ours[rec.PID] = true
		}
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ours[pid] {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err == nil && slices.Contains(monitoringCommands(), strings.TrimSuffix(exe, " (deleted)")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// PrometheusURL is Prometheus' base URL, "http://127.0.0.1:19090" (HTTP API
// under /api/v1, e.g. for github.com/prometheus/client_golang/api).
func (c *Cluster) PrometheusURL() string { return loopbackURL(PrometheusPort) }

// AlertmanagerURL is the Alertmanager's base URL, "http://127.0.0.1:19093"
// (API v2 under /api/v2).
func (c *Cluster) AlertmanagerURL() string { return loopbackURL(AlertmanagerPort) }

// PushgatewayURL is the Pushgateway's base URL, "http://127.0.0.1:19091".
func (c *Cluster) PushgatewayURL() string { return loopbackURL(PushgatewayPort) }

// StopPrometheus stops Prometheus (SIGTERM, SIGKILL after 10 s) and waits until
// it is gone: queries fail with "connection refused", and no rule is evaluated
// nor alert sent until StartPrometheus (or Restore). Its data stays.
func (c *Cluster) StopPrometheus(ctx context.Context) error {
	return c.stopMonitoringProc(ctx, procPrometheus)
}

// StartPrometheus starts Prometheus if it is not running (same flags, same
// data) and waits until /-/ready answers and it has scraped the Pushgateway,
// at most 60 s each (a start takes about 5 s: Prometheus scrapes first about
// 5 s after it starts).
func (c *Cluster) StartPrometheus(ctx context.Context) error {
	return c.startMonitoringProc(ctx, procPrometheus)
}

// StopAlertmanager stops the Alertmanager (SIGTERM, SIGKILL after 10 s) and
// waits until it is gone: its API fails with "connection refused" until
// StartAlertmanager (or Restore). Its silences and notification log stay on
// disk; alerts are re-sent by Prometheus within seconds of its start.
func (c *Cluster) StopAlertmanager(ctx context.Context) error {
	return c.stopMonitoringProc(ctx, procAlertmanager)
}

// StartAlertmanager starts the Alertmanager if it is not running and waits
// until /-/ready answers, at most 60 s. Alerts posted while it was stopped are
// lost; Prometheus sends its firing alerts again within seconds (about 6 s
// measured).
func (c *Cluster) StartAlertmanager(ctx context.Context) error {
	return c.startMonitoringProc(ctx, procAlertmanager)
}

func (c *Cluster) stopMonitoringProc(ctx context.Context, name string) error {
	return c.fault(ctx, "stop "+name, func(r *runner, _ *clusterState) error {
		if err := r.killProc(name, syscall.SIGTERM); err != nil {
			return r.killProc(name, syscall.SIGKILL)
		}
		return nil
	})
}

func (c *Cluster) startMonitoringProc(ctx context.Context, name string) error {
	p, _ := monitoringProcByName(name)
	return c.fault(ctx, "start "+name, func(r *runner, _ *clusterState) error {
		if err := r.writeMonitoringFiles(); err != nil {
			return err
		}
		return r.startMonitoringProc(ctx, p)
	})
}

// monitoringClient is the HTTP client of the helpers below (10 s per request).
func monitoringClient() *http.Client { return &http.Client{Timeout: 10 * time.Second} }

// PushMetric sets metric (a gauge, untyped on the Pushgateway) to value with
// labels, in the Pushgateway group whose grouping key is job and labels (a
// POST: other metrics of the group stay). Prometheus has it at its next scrape
// (within about 1 s) as metric{job=job, labels...}. Label names must be valid
// Prometheus label names other than "job"; values may be anything (they are
// sent base64-encoded). Errors: a bad name, or the Pushgateway's answer
// (connection refused when it is not running).
func (c *Cluster) PushMetric(ctx context.Context, job string, metric string, labels map[string]string, value float64) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: metric, Help: "pushed by a nodeexec test"})
	g.Set(value)
	p := push.New(c.PushgatewayURL(), job).Client(ctxClient{ctx}).Collector(g)
	for _, k := range sortedKeys(labels) {
		p = p.Grouping(k, labels[k])
	}
	if err := p.Add(); err != nil {
		return fmt.Errorf("testcluster: push %s to job %q: %w", metric, job, err)
	}
	return nil
}

// DeleteMetrics deletes every Pushgateway group of job (whatever its other
// grouping labels): Prometheus sees the series go stale at its next scrape, so
// queries stop returning them and the rule's alerts resolve. No group of job
// is not an error.
func (c *Cluster) DeleteMetrics(ctx context.Context, job string) error {
	groups, err := c.pushgatewayGroups(ctx)
	if err != nil {
		return fmt.Errorf("testcluster: delete metrics of job %q: %w", job, err)
	}
	for _, g := range groups {
		if g["job"] != job {
			continue
		}
		p := push.New(c.PushgatewayURL(), job).Client(ctxClient{ctx})
		for _, k := range sortedKeys(g) {
			if k != "job" {
				p = p.Grouping(k, g[k])
			}
		}
		if err := p.Delete(); err != nil {
			return fmt.Errorf("testcluster: delete metrics of job %q: %w", job, err)
		}
	}
	return nil
}

// pushgatewayGroups returns the grouping labels of every Pushgateway group
// (GET /api/v1/metrics).
func (c *Cluster) pushgatewayGroups(ctx context.Context) ([]map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.PushgatewayURL()+"/api/v1/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := monitoringClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/metrics: %s: %s", resp.Status, lastBytes(body, 200))
	}
	var out struct {
		Data []struct {
			Labels map[string]string `json:"labels"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("GET /api/v1/metrics: %w", err)
	}
	groups := make([]map[string]string, 0, len(out.Data))
	for _, d := range out.Data {
		groups = append(groups, d.Labels)
	}
	return groups, nil
}

// FireAlertFor is how long an alert posted by FireAlert stays active without
// being posted again: its endsAt.
const FireAlertFor = 5 * time.Minute

// FireAlert posts an active alert to the Alertmanager (POST /api/v2/alerts):
// labels alertname=name plus labels, startsAt now, endsAt FireAlertFor ahead.
// It shows in GET /api/v2/alerts within a second. Errors: the Alertmanager's
// answer (connection refused when it is not running; 400 for bad labels).
func (c *Cluster) FireAlert(ctx context.Context, name string, labels map[string]string) error {
	now := time.Now().UTC()
	return c.postAlert(ctx, name, labels, now, now.Add(FireAlertFor))
}

// ResolveAlert posts the alert alertname=name plus labels with endsAt now, so
// the Alertmanager marks it resolved (no longer active). Resolving an alert
// that is not active is not an error.
func (c *Cluster) ResolveAlert(ctx context.Context, name string, labels map[string]string) error {
	now := time.Now().UTC()
	return c.postAlert(ctx, name, labels, now.Add(-time.Second), now)
}

// postableAlert is one alert of POST /api/v2/alerts (Alertmanager's
// api/v2/models.PostableAlert).
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     string            `json:"startsAt,omitempty"`
	EndsAt       string            `json:"endsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

func alertBody(name string, labels map[string]string, startsAt, endsAt time.Time) ([]byte, error) {
	if name == "" {
		return nil, errors.New("an alert needs a name")
	}
	l := map[string]string{}
	for k, v := range labels {
		l[k] = v
	}
	l["alertname"] = name
	return json.Marshal([]postableAlert{{
		Labels:      l,
		Annotations: map[string]string{"summary": "posted by a nodeexec test"},
		StartsAt:    startsAt.Format(time.RFC3339Nano),
		EndsAt:      endsAt.Format(time.RFC3339Nano),
	}})
}

func (c *Cluster) postAlert(ctx context.Context, name string, labels map[string]string, startsAt, endsAt time.Time) error {
	body, err := alertBody(name, labels, startsAt, endsAt)
	if err != nil {
		return fmt.Errorf("testcluster: alert %q: %w", name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.AlertmanagerURL()+"/api/v2/alerts", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("testcluster: alert %q: %w", name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := monitoringClient().Do(req)
	if err != nil {
		return fmt.Errorf("testcluster: alert %q: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("testcluster: alert %q: POST /api/v2/alerts: %s: %s", name, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// ctxClient is a push.HTTPDoer that gives each request ctx.
type ctxClient struct{ ctx context.Context }

func (c ctxClient) Do(req *http.Request) (*http.Response, error) {
	return monitoringClient().Do(req.WithContext(c.ctx))
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
