//go:build e2e

package testcluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

// TestMonitoring: a pushed metric is queryable through PromQL, the rule's alert
// reaches the Alertmanager, alerts posted directly come and go, Prometheus
// stops and starts (keeping its data), and deleting the metrics resolves the
// alert. It leaves the monitoring processes running and empty of its data.
func TestMonitoring(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the e2e tests need root")
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	job := "testcluster-monitoring-e2e"
	labels := map[string]string{"probe": probe}
	const custom = "NodeexecE2ECustom"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.StartPrometheus(ctx); err != nil {
			t.Errorf("StartPrometheus: %v", err)
		}
		if err := c.DeleteMetrics(ctx, job); err != nil {
			t.Errorf("DeleteMetrics: %v", err)
		}
		if err := c.ResolveAlert(ctx, custom, labels); err != nil {
			t.Errorf("ResolveAlert: %v", err)
		}
	})
	pc, err := api.NewClient(api.Config{Address: c.PrometheusURL()})
	if err != nil {
		t.Fatal(err)
	}
	prom := promv1.NewAPI(pc)
	query := fmt.Sprintf(`%s{probe=%q}`, testcluster.TestAlertMetric, probe)
	// waitQuery waits until the query returns want series (with value 2 and the pushed job when want is 1)
	waitQuery := func(want int) {
		t.Helper()
		t1 := time.Now()
		var last string
		for time.Since(t1) < 30*time.Second {
			v, _, _, err := prom.Query(ctx, query, time.Now())
			if err == nil {
				vec, _ := v.(model.Vector)
				last = v.String()
				if len(vec) == want && (want == 0 || (vec[0].Value == 2 && vec[0].Metric["job"] == model.LabelValue(job))) {
					t.Logf("query %s: %d series after %s", query, want, time.Since(t1).Round(time.Millisecond))
					return
				}
			} else {
				last = err.Error()
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("query %s: want %d series, last answer %s", query, want, last)
	}
	// waitAlert waits until the Alertmanager has (or no longer has) an active alert name{probe}
	waitAlert := func(name string, active bool) {
		t.Helper()
		t1 := time.Now()
		var last string
		for time.Since(t1) < 30*time.Second {
			alerts, err := activeAlerts(ctx, c.AlertmanagerURL(), name, probe)
			if err == nil && (len(alerts) > 0) == active {
				if active && alerts[0]["job"] != job && name == testcluster.TestAlertName {
					t.Fatalf("alert %s has labels %v, want job=%s (the series' labels)", name, alerts[0], job)
				}
				t.Logf("alert %s active=%v after %s", name, active, time.Since(t1).Round(time.Millisecond))
				return
			}
			last = fmt.Sprint(alerts, err)
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("alert %s{probe=%s}: want active=%v, last %s", name, probe, active, last)
	}

	// a metric through the Pushgateway, seen by PromQL; the rule fires
	if err := c.PushMetric(ctx, job, testcluster.TestAlertMetric, labels, 2); err != nil {
		t.Fatal(err)
	}
	waitQuery(1)
	waitAlert(testcluster.TestAlertName, true)

	// alerts posted directly
	if err := c.FireAlert(ctx, custom, labels); err != nil {
		t.Fatal(err)
	}
	waitAlert(custom, true)
	if err := c.ResolveAlert(ctx, custom, labels); err != nil {
		t.Fatal(err)
	}
	waitAlert(custom, false)

	// Prometheus down: queries fail; up again: the series is back
	if err := c.StopPrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := prom.Query(ctx, query, time.Now()); err == nil {
		t.Fatal("a query succeeded while Prometheus was stopped")
	}
	t1 := time.Now()
	if err := c.StartPrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("StartPrometheus took %s", time.Since(t1).Round(time.Millisecond))
	waitQuery(1)

	// the Alertmanager down and up: Prometheus sends the firing alert again
	if err := c.StopAlertmanager(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FireAlert(ctx, custom, labels); err == nil {
		t.Fatal("FireAlert succeeded while the Alertmanager was stopped")
	}
	if err := c.StartAlertmanager(ctx); err != nil {
		t.Fatal(err)
	}
	waitAlert(testcluster.TestAlertName, true)

	// deleting the metrics: the series goes stale, the alert resolves
	if err := c.DeleteMetrics(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitQuery(0)
	waitAlert(testcluster.TestAlertName, false)
	t.Logf("TestMonitoring took %s", time.Since(t0).Round(time.Millisecond))
}

// activeAlerts returns the label sets of the Alertmanager's active alerts
// alertname=name, probe=probe (GET /api/v2/alerts).
func activeAlerts(ctx context.Context, base, name, probe string) ([]map[string]string, error) {
	q := url.Values{}
	q.Add("filter", fmt.Sprintf("alertname=%q", name))
	q.Add("filter", fmt.Sprintf("probe=%q", probe))
	q.Set("active", "true")
	q.Set("silenced", "false")
	q.Set("inhibited", "false")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v2/alerts?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v2/alerts: %s", resp.Status)
	}
	var alerts []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, a := range alerts {
		if a.Status.State == "active" {
			out = append(out, a.Labels)
		}
	}
	return out, nil
}
