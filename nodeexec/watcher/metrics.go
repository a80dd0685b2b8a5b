package watcher

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// metrics are the watcher's Prometheus metrics. It is also the workqueue's
// MetricsProvider (one queue, named "nodescripts").
type metrics struct {
	runs        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	nodes       *prometheus.GaugeVec
	depth       prometheus.Gauge
	adds        prometheus.Counter
	latency     prometheus.Histogram
	work        prometheus.Histogram
	unfinished  prometheus.Gauge
	longest     prometheus.Gauge
	retries     prometheus.Counter
	reconciles  *prometheus.CounterVec
	silences    *prometheus.CounterVec
	gateOpen    *prometheus.GaugeVec
	gateQueries *prometheus.CounterVec
	// calendarOpen: nodeexec_watcher_calendar_open (calendar_watch.go).
	calendarOpen *prometheus.GaugeVec
	// annotationGates: spec.hooks.beforeRun, afterRun (annotations.go).
	annotationGates *prometheus.CounterVec
	// analysisChecks: spec.rollout.analysis checks by verdict (analysis.go).
	analysisChecks *prometheus.CounterVec
	collectable    []prometheus.Collector
	// hooks: spec.hooks Jobs (hooks.go).
	hooks *prometheus.CounterVec
	// notifications: spec.notify deliveries by result (notify.go).
	notifications *prometheus.CounterVec

	drainMetricSet    // drains.go
	forecastMetricSet // forecast.go
	// postComplete: prepull.go, postcomplete.go.
	postComplete postComplete
	// budgetUnavailable and budgetMax: per MaintenanceBudget (budget.go).
	budgetUnavailable, budgetMax *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeexec_watcher_runs_total",
			Help: "Runs finished, by NodeScript, action (run, verify, rollback) and result (succeeded, failed, timeout, infrastructure).",
		}, []string{"nodescript", "action", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeexec_watcher_run_duration_seconds",
			Help:    "Time from a run pod's creation to the watcher seeing it finished, by action.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"action"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_nodes",
			Help: "Selected nodes per NodeScript and phase (Pending, Running, Succeeded, Failed, RolledBack).",
		}, []string{"nodescript", "phase"}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_queue_depth", Help: "NodeScripts waiting in the workqueue.",
		}),
		adds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeexec_watcher_queue_adds_total", Help: "Adds to the workqueue.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodeexec_watcher_queue_latency_seconds", Help: "Time a NodeScript waits in the workqueue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		work: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodeexec_watcher_reconcile_duration_seconds", Help: "Time one reconcile of a NodeScript takes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		unfinished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_queue_unfinished_work_seconds", Help: "Seconds of reconciles in progress.",
		}),
		longest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_queue_longest_running_seconds", Help: "Seconds the longest reconcile in progress has run.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeexec_watcher_queue_retries_total", Help: "Rate-limited requeues after a failed reconcile.",
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeexec_watcher_reconciles_total", Help: "Reconciles by result (ok, error).",
		}, []string{"result"}),
		silences: newSilenceMetric(),
		gateOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeexec_watcher_gate_open", Help: "1 while a gate of spec.gates counts as open, 0 while it is closed, by NodeScript and gate.",
		}, []string{"nodescript", "gate"}),
		gateQueries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeexec_watcher_gate_queries_total", Help: "Checks of a gate of spec.gates (queries to Prometheus or Alertmanager, CEL reads), by NodeScript, gate and result (ok, error).",
		}, []string{"nodescript", "gate", "result"}),
	}
	m.analysisChecks = newAnalysisChecks()
	m.postComplete = newPostCompleteMetrics()
	m.annotationGates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_annotation_gates_total",
		Help: "Waits of spec.hooks.beforeRun and afterRun that ended, by NodeScript, gate (beforeRun, afterRun) and result (ready, timeout).",
	}, []string{"nodescript", "gate", "result"})
	m.hooks = newHookMetrics()
	m.collectable = []prometheus.Collector{m.annotationGates, m.runs, m.duration, m.nodes, m.depth, m.adds, m.latency, m.work, m.unfinished, m.longest, m.retries, m.reconciles, m.silences, m.gateOpen, m.gateQueries, m.analysisChecks}
	m.collectable = append(m.collectable, m.drainMetrics()...)
	m.collectable = append(m.collectable, m.forecastMetrics()...)
	m.collectable = append(m.collectable, m.postComplete.collectors()...)
	m.calendarOpen = newCalendarOpen()
	m.collectable = append(m.collectable, m.calendarOpen)
	m.collectable = append(m.collectable, m.hooks)
	m.budgetUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_budget_unavailable", Help: "Nodes a MaintenanceBudget selects that are out of service, by budget.",
	}, []string{"budget"})
	m.budgetMax = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_budget_max_unavailable", Help: "A MaintenanceBudget's maxUnavailable as a count of the nodes it selects, by budget.",
	}, []string{"budget"})
	m.collectable = append(m.collectable, m.budgetUnavailable, m.budgetMax)
	m.notifications = newNotifyMetric()
	m.collectable = append(m.collectable, m.notifications)
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range m.collectable {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

var _ workqueue.MetricsProvider = (*metrics)(nil)

func (m *metrics) NewDepthMetric(string) workqueue.GaugeMetric       { return m.depth }
func (m *metrics) NewAddsMetric(string) workqueue.CounterMetric      { return m.adds }
func (m *metrics) NewLatencyMetric(string) workqueue.HistogramMetric { return m.latency }
func (m *metrics) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return m.work
}
func (m *metrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return m.unfinished
}
func (m *metrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return m.longest
}
func (m *metrics) NewRetriesMetric(string) workqueue.CounterMetric { return m.retries }
