package v1alpha1

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// labelNameRE is a Prometheus label name (the classic character set, which
// a PromQL `by (...)` clause accepts unquoted).
var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validateAnalysis checks spec.rollout.analysis: a Prometheus URL, a
// PromQL query that parses and can return an instant vector, a node label,
// an interval of at least MinAnalysisInterval, a tolerance (ParseTolerance)
// and/or a threshold, a direction; and what it needs of the rest of the
// spec: soakTime > 0, canary >= 1, automatic promotion, rollbackScript.
func validateAnalysis(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	a := s.Rollout.Analysis
	if a == nil {
		return nil
	}
	p := spec.Child("rollout", "analysis")
	errs := validateAnalysisURL(a, p)
	errs = append(errs, validateAnalysisQuery(a, p)...)
	if l := a.NodeLabel; l != "" && !labelNameRE.MatchString(l) {
		errs = append(errs, field.Invalid(p.Child("nodeLabel"), l, "not a Prometheus label name: want letters, digits and _, not starting with a digit (e.g. node, instance)"))
	}
	if i := a.Interval; i != nil && i.Duration < MinAnalysisInterval {
		errs = append(errs, field.Invalid(p.Child("interval"), i.Duration.String(), fmt.Sprintf("must be at least %s, e.g. 30s (or leave it out for %s)", MinAnalysisInterval, DefaultAnalysisInterval)))
	}
	switch a.Direction {
	case "", DirectionLowerIsBetter, DirectionHigherIsBetter:
	default:
		errs = append(errs, field.NotSupported(p.Child("direction"), a.Direction, []string{DirectionLowerIsBetter, DirectionHigherIsBetter}))
	}
	errs = append(errs, validateAnalysisBounds(a, p)...)
	return append(errs, validateAnalysisNeeds(s, spec)...)
}

// validateAnalysisURL: an http:// or https:// URL with a host.
func validateAnalysisURL(a *CanaryAnalysis, p *field.Path) field.ErrorList {
	if a.URL == "" {
		return field.ErrorList{field.Required(p.Child("url"), "give the Prometheus server's base URL, e.g. http://prometheus.monitoring:9090")}
	}
	if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(a.URL, " \t\n") {
		return field.ErrorList{field.Invalid(p.Child("url"), a.URL, "want an http:// or https:// URL with a host, e.g. http://prometheus.monitoring:9090")}
	}
	return nil
}

// validateAnalysisQuery: a PromQL expression that returns an instant
// vector.
func validateAnalysisQuery(a *CanaryAnalysis, p *field.Path) field.ErrorList {
	if strings.TrimSpace(a.Query) == "" {
		return field.ErrorList{field.Required(p.Child("query"), "give a PromQL expression with one series per node, e.g. avg by (node) (my_error_ratio)")}
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(a.Query)
	if err != nil {
		return field.ErrorList{field.Invalid(p.Child("query"), a.Query, "not a PromQL expression: "+err.Error())}
	}
	if t := expr.Type(); t != parser.ValueTypeVector {
		kind := string(t)
		if t == parser.ValueTypeMatrix {
			kind = "range vector"
		}
		return field.ErrorList{field.Invalid(p.Child("query"), a.Query, fmt.Sprintf("returns a %s: want an instant vector with one series per node (a label naming the node), e.g. avg by (node) (my_error_ratio)", kind))}
	}
	return nil
}

// validateAnalysisBounds: a tolerance (ParseTolerance) and/or a threshold.
func validateAnalysisBounds(a *CanaryAnalysis, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.Tolerance == nil && a.Threshold == nil {
		errs = append(errs, field.Required(p.Child("tolerance"), "set tolerance (e.g. \"10%\": the canaries against the other nodes), threshold (an absolute bound), or both"))
	}
	if a.Tolerance != nil {
		if t, err := ParseTolerance(*a.Tolerance); err != nil {
			errs = append(errs, field.Invalid(p.Child("tolerance"), a.Tolerance.String(), err.Error()))
		} else if t >= 1 && a.Direction == DirectionHigherIsBetter {
			errs = append(errs, field.Invalid(p.Child("tolerance"), a.Tolerance.String(), "100% or more never finds a regression under HigherIsBetter (the canaries would have to fall below 0 × the baseline): give less, e.g. \"10%\""))
		}
	}
	if a.Threshold != nil {
		if _, err := a.Threshold.Float64(); err != nil {
			errs = append(errs, field.Invalid(p.Child("threshold"), a.Threshold.String(), err.Error()))
		}
	}
	return errs
}

// validateAnalysisNeeds: what an analysis needs of the rest of the spec:
// soakTime > 0, canary >= 1, automatic promotion, rollbackScript.
func validateAnalysisNeeds(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	if st := s.Rollout.SoakTime; st == nil || st.Duration <= 0 {
		errs = append(errs, field.Required(spec.Child("rollout", "soakTime"), "spec.rollout.analysis runs while the canaries soak: give a soak time, e.g. 10m"))
	}
	if c := s.Rollout.Canary; c != nil && *c < 1 {
		errs = append(errs, field.Invalid(spec.Child("rollout", "canary"), *c, "spec.rollout.analysis compares the canaries with the other nodes: give at least 1 canary"))
	}
	if s.Rollout.Promotion == PromotionManual {
		errs = append(errs, field.Invalid(spec.Child("rollout", "promotion"), s.Rollout.Promotion, "spec.rollout.analysis gates automatic promotion: use promotion Automatic (or drop the analysis)"))
	}
	if strings.TrimSpace(s.RollbackScript) == "" {
		errs = append(errs, field.Required(spec.Child("rollbackScript"), "spec.rollout.analysis is set: give the script that undoes spec.script, run on the canaries when they regressed ('true' to only halt)"))
	}
	return errs
}

// maxTolerancePercent bounds a tolerance: 1,000,000% is more than any
// comparison needs, and keeps the factor far from overflow.
const maxTolerancePercent = 1e6

// ParseTolerance is the fraction a CanaryAnalysis tolerance stands for: a
// percentage string "10%" or "2.5%" (digits, an optional decimal part,
// then %) is 0.10 or 0.025; an integer N is N percent. Errors: a negative
// number, a string that is not such a percentage (a bare "0.1" is refused,
// as it could mean 0.1% or 10%), or more than 1,000,000%.
func ParseTolerance(v intstr.IntOrString) (float64, error) {
	var pct float64
	switch v.Type {
	case intstr.Int:
		if v.IntVal < 0 {
			return 0, fmt.Errorf("must be 0 or more: a whole number of percent (10 is 10%%) or a percentage such as \"10%%\"")
		}
		pct = float64(v.IntVal)
	case intstr.String:
		num, ok := strings.CutSuffix(v.StrVal, "%")
		if !ok || num == "" || !isDecimal(num) {
			return 0, fmt.Errorf("want a percentage such as \"10%%\" or \"2.5%%\" (or a whole number of percent, 10); %q is not one", v.StrVal)
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("want a percentage such as \"10%%\": %q: %w", v.StrVal, err)
		}
		pct = f
	default:
		return 0, fmt.Errorf("want a percentage such as \"10%%\"")
	}
	if pct > maxTolerancePercent || math.IsNaN(pct) {
		return 0, fmt.Errorf("at most %g%%", float64(maxTolerancePercent))
	}
	return pct / 100, nil
}

// isDecimal reports whether s is digits with at most one '.' between
// digits: "10", "2.5"; not ".5", "5.", "1e3", "+1".
func isDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(d string) bool {
		if d == "" {
			return false
		}
		for _, r := range d {
			if r < '0' || r > '9' {
				return false
			}
		}
		return true
	}
	return digits(whole) && (!dot || digits(frac))
}
