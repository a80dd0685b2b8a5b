package v1alpha1

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Directions of a CanaryAnalysis metric.
const (
	// DirectionLowerIsBetter: a higher value is worse (error rate,
	// latency). The default.
	DirectionLowerIsBetter = "LowerIsBetter"
	// DirectionHigherIsBetter: a lower value is worse (throughput,
	// success ratio).
	DirectionHigherIsBetter = "HigherIsBetter"
)

// Verdicts of a canary analysis check (AnalysisStatus.Verdict).
const (
	// VerdictPassed: every canary has a value and none regressed.
	VerdictPassed = "Passed"
	// VerdictRegressed: a canary is worse than the baseline beyond the
	// tolerance, or beyond the threshold: the rollout halts.
	VerdictRegressed = "Regressed"
	// VerdictInconclusive: the query answered, but not enough to judge (a
	// canary without a series, or no baseline for a tolerance): never read
	// as a pass.
	VerdictInconclusive = "Inconclusive"
	// VerdictError: the query failed (Prometheus unreachable, a timeout, a
	// bad answer): never read as a pass.
	VerdictError = "Error"
)

// Defaults of a CanaryAnalysis.
const (
	// DefaultAnalysisNodeLabel is the label naming the node in the
	// query's series.
	DefaultAnalysisNodeLabel = "node"
	// DefaultAnalysisInterval is the pause between two checks.
	DefaultAnalysisInterval = 30 * time.Second
	// MinAnalysisInterval is the shortest interval allowed.
	MinAnalysisInterval = time.Second
)

// CanaryAnalysis compares a Prometheus metric between the canary nodes and
// the rest of the selected nodes (or against an absolute threshold) while
// the canaries soak (spec.rollout.soakTime): a regression halts the
// rollout (reason AnalysisFailed) and runs spec.rollbackScript on the
// canaries; automatic promotion waits until the checks have passed, one
// after the other, for a whole soakTime. Needs spec.rollout.soakTime > 0,
// spec.rollout.canary >= 1, automatic promotion and spec.rollbackScript.
// Not part of the spec hash. See docs/nodescript-analysis.md.
//
// +kubebuilder:validation:XValidation:rule="has(self.tolerance) || has(self.threshold)",message="set tolerance (e.g. \"10%\"), threshold, or both"
type CanaryAnalysis struct {
	// URL is the Prometheus server's base URL, e.g.
	// http://prometheus.monitoring:9090 (its HTTP API, /api/v1/query, is
	// below it). Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	URL string `json:"url"`
	// Query is a PromQL expression returning an instant vector with one
	// series per node, the node's name in the label NodeLabel, e.g.
	// `sum by (node) (rate(app_errors_total[1m])) / sum by (node)
	// (rate(app_requests_total[1m]))`. Parsed at apply
	// (prometheus/promql/parser); an expression that cannot return a
	// vector is refused. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Query string `json:"query"`
	// NodeLabel is the label of the query's series that names the node.
	// Defaults to "node".
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	// +optional
	NodeLabel string `json:"nodeLabel,omitempty"`
	// Interval is the pause between two checks: the query runs at most
	// once per interval, whatever the number of nodes. At least 1s.
	// Defaults to 30s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s, e.g. 30s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Tolerance, when set, compares the canaries' mean with the baseline's
	// (the mean of the other selected nodes that have not run the current
	// spec): under LowerIsBetter the canaries regressed when their mean is
	// above baseline + |baseline| × tolerance; under HigherIsBetter, when it
	// is below baseline − |baseline| × tolerance. A percentage, "10%" or
	// "2.5%", or a whole number of percent (10 is 10%). With no baseline
	// value the comparison is inconclusive (never a pass) unless Threshold
	// is set, which then decides alone.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+([.][0-9]+)?%$')",message="want a percentage such as \"10%\" or \"2.5%\", or a whole number of percent such as 10"
	// +optional
	Tolerance *intstr.IntOrString `json:"tolerance,omitempty"`
	// Threshold, when set, is an absolute bound every canary's own value
	// must keep: at most Threshold under LowerIsBetter, at least Threshold
	// under HigherIsBetter. A number, e.g. 0.05.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +optional
	Threshold *Number `json:"threshold,omitempty"`
	// Direction says which way the metric is worse: LowerIsBetter (the
	// default: error rates, latencies) or HigherIsBetter (throughput,
	// success ratios).
	// +kubebuilder:validation:Enum=LowerIsBetter;HigherIsBetter
	// +optional
	Direction string `json:"direction,omitempty"`
}

// AnalysisStatus is the last check of spec.rollout.analysis. The fields a
// check may leave unset are written as null (not omitted), so that the
// watcher's merge patch of the status removes the previous check's.
type AnalysisStatus struct {
	// SpecHash is the spec hash the check was made for; a record of
	// another hash is not the current rollout's.
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// Verdict is Passed, Regressed, Inconclusive or Error.
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// Canary is the mean of the canaries' values; unset when no canary
	// had one.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +optional
	Canary *Number `json:"canary"`
	// Baseline is the mean of the baseline nodes' values; unset when no
	// baseline node had one.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +optional
	Baseline *Number `json:"baseline"`
	// Message says what was compared, with each canary's value, or why
	// the check is inconclusive or failed.
	// +optional
	Message string `json:"message"`
	// CheckedAt is when the check was made.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// PassingSince is when the current run of passing checks began (unset
	// when the last check did not pass): promotion waits until it is
	// spec.rollout.soakTime old.
	// +optional
	PassingSince *metav1.Time `json:"passingSince"`
	// Checks counts the checks made for SpecHash.
	// +optional
	Checks int32 `json:"checks,omitempty"`
}

// Number is a decimal number kept as its JSON text, so that it survives
// the round trip through the API exactly (no float in the Go types): it is
// written as a JSON number and read from a JSON number or from a string
// holding one ("0.05"). Float64 gives its value. A struct, so that the
// unstructured converter reads a JSON integer into it through UnmarshalJSON.
type Number struct {
	text string
}

// NewNumber is the Number of text, unchecked: Float64 (and Validate) says
// whether it is one.
func NewNumber(text string) Number { return Number{text: text} }

// NumberOf is f as a Number, in the shortest form that reads back as f
// (strconv 'g'); f must be finite.
func NumberOf(f float64) Number {
	return Number{text: strconv.FormatFloat(f, 'g', -1, 64)}
}

// String is n's text.
func (n Number) String() string { return n.text }

// Float64 is n's value; an error when n is not a finite decimal number.
func (n Number) Float64() (float64, error) {
	f, err := strconv.ParseFloat(n.text, 64)
	if err != nil || !json.Valid([]byte(n.text)) {
		return 0, fmt.Errorf("%q is not a number: want a decimal number such as 0.05 or 250", n.text)
	}
	if math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is out of range for a 64-bit float", n.text)
	}
	return f, nil
}

// MarshalJSON writes n as a JSON number (a string when n is not one, which
// the API then refuses naming the field).
func (n Number) MarshalJSON() ([]byte, error) {
	if _, err := n.Float64(); err != nil {
		return json.Marshal(n.text)
	}
	return []byte(n.text), nil
}

// UnmarshalJSON reads a JSON number, or a string (kept as it is: Float64,
// and so Validate, says whether it holds a number, naming the field).
func (n *Number) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var text string
		if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
		n.text = text
		return nil
	}
	var v json.Number
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("threshold: want a number such as 0.05: %w", err)
	}
	n.text = string(v)
	return nil
}
