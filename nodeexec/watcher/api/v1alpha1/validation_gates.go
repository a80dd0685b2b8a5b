package v1alpha1

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
)

// GateCELCostLimit bounds the cost of one evaluation of a CEL gate's
// expression (cel-go's cost units; the Kubernetes API server's own limit
// per call): past it the evaluation fails and the gate is closed.
const GateCELCostLimit = 1_000_000

// validateGates checks spec.gates: names unique DNS labels, for and
// interval in range, exactly one kind per gate, and each kind's fields
// (URL, PromQL, condition, matchers, resource, CEL).
func validateGates(p *field.Path, gates []Gate) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i := range gates {
		errs = append(errs, validateGate(p.Index(i), &gates[i], seen)...)
	}
	return errs
}

// validateGate checks one gate at gp (seen: the names of the gates
// before it, to which it adds its own).
func validateGate(gp *field.Path, g *Gate, seen map[string]bool) field.ErrorList {
	var errs field.ErrorList
	switch msgs := validation.IsDNS1123Label(g.Name); {
	case g.Name == "":
		errs = append(errs, field.Required(gp.Child("name"), "name the gate (a DNS label, e.g. no-critical-alerts)"))
	case len(msgs) > 0:
		errs = append(errs, field.Invalid(gp.Child("name"), g.Name, strings.Join(msgs, "; ")))
	case seen[g.Name]:
		errs = append(errs, field.Duplicate(gp.Child("name"), g.Name))
	}
	seen[g.Name] = true
	if g.For != nil && g.For.Duration < 0 {
		errs = append(errs, field.Invalid(gp.Child("for"), g.For.Duration.String(), "must be 0 or more, e.g. 2m"))
	}
	if g.Interval != nil && g.Interval.Duration < MinGateInterval {
		errs = append(errs, field.Invalid(gp.Child("interval"), g.Interval.Duration.String(), fmt.Sprintf("must be at least %s, e.g. 30s (or left out for %s)", MinGateInterval, DefaultGateInterval)))
	}
	kinds := 0
	if pg := g.Prometheus; pg != nil {
		kinds++
		errs = append(errs, validatePrometheusGate(gp.Child("prometheus"), pg)...)
	}
	if ag := g.Alerts; ag != nil {
		kinds++
		errs = append(errs, validateAlertsGate(gp.Child("alerts"), ag)...)
	}
	if cg := g.CEL; cg != nil {
		kinds++
		errs = append(errs, validateCELGate(gp.Child("cel"), cg)...)
	}
	if kinds != 1 {
		errs = append(errs, field.Invalid(gp, fmt.Sprintf("(%d kinds)", kinds), "set exactly one of prometheus, alerts and cel"))
	}
	return errs
}

// validatePrometheusGate: a URL, a PromQL query, a condition.
func validatePrometheusGate(pp *field.Path, pg *PrometheusGate) field.ErrorList {
	errs := validateGateURL(pp.Child("url"), pg.URL)
	if strings.TrimSpace(pg.Query) == "" {
		errs = append(errs, field.Required(pp.Child("query"), "give a PromQL expression, e.g. ALERTS{severity=\"critical\"}"))
	} else if err := ValidatePromQL(pg.Query); err != nil {
		errs = append(errs, field.Invalid(pp.Child("query"), pg.Query, err.Error()))
	}
	if pg.Condition != "" {
		if _, err := ParseGateCondition(pg.Condition); err != nil {
			errs = append(errs, field.Invalid(pp.Child("condition"), pg.Condition, err.Error()))
		}
	}
	return errs
}

// validateAlertsGate: a URL, matchers and ignore matchers.
func validateAlertsGate(ap *field.Path, ag *AlertsGate) field.ErrorList {
	errs := validateGateURL(ap.Child("url"), ag.URL)
	for j, m := range ag.Matchers {
		if _, err := ParseGateMatcher(m); err != nil {
			errs = append(errs, field.Invalid(ap.Child("matchers").Index(j), m, err.Error()))
		}
	}
	for j, m := range ag.Ignore {
		if _, err := ParseGateMatcher(m); err != nil {
			errs = append(errs, field.Invalid(ap.Child("ignore").Index(j), m, err.Error()))
		}
	}
	return errs
}

// validateGateURL accepts an absolute http or https URL with a host and
// no query or fragment.
func validateGateURL(p *field.Path, raw string) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(p, "give the server's URL, e.g. http://prometheus.monitoring:9090")}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, raw, "not a URL: "+err.Error())}
	case u.Scheme != "http" && u.Scheme != "https":
		return field.ErrorList{field.Invalid(p, raw, "want an http:// or https:// URL, e.g. http://prometheus.monitoring:9090")}
	case u.Host == "":
		return field.ErrorList{field.Invalid(p, raw, "no host: want e.g. http://prometheus.monitoring:9090")}
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return field.ErrorList{field.Invalid(p, raw, "give the server's base URL, without user, query or fragment")}
	}
	return nil
}

// ValidatePromQL parses query with Prometheus' PromQL parser and refuses
// a range vector or a string, which an instant query cannot compare.
func ValidatePromQL(query string) error {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
	if err != nil {
		return fmt.Errorf("not a PromQL expression: %w", err)
	}
	switch t := expr.Type(); t {
	case parser.ValueTypeVector, parser.ValueTypeScalar:
		return nil
	default:
		return fmt.Errorf("a PromQL expression of type %s: want an instant vector or a scalar", t)
	}
}

// ParseGateMatcher parses one Alertmanager matcher (NAME=VALUE, NAME!=VALUE,
// NAME=~REGEX, NAME!~REGEX) with Alertmanager's own parser; a matcher
// without an operator is refused.
func ParseGateMatcher(s string) (*amlabels.Matcher, error) {
	m, err := amlabels.ParseMatcher(s)
	if err != nil {
		return nil, fmt.Errorf("want an Alertmanager matcher NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX, e.g. severity=critical: %w", err)
	}
	return m, nil
}

// GateCondition is a parsed prometheus.condition: Op and Value.
type GateCondition struct {
	// Op is one of <, <=, >, >=, ==, !=.
	Op string
	// Value is the number compared with.
	Value float64
}

// ParseGateCondition parses "OP NUMBER", OP one of <, <=, >, >=, ==, != and
// NUMBER a finite float (strconv.ParseFloat: 0.05, 1e3, -2), blanks around
// either allowed, e.g. "< 0.05".
func ParseGateCondition(s string) (GateCondition, error) {
	t := strings.TrimSpace(s)
	var op string
	for _, o := range []string{"<=", ">=", "==", "!=", "<", ">"} {
		if strings.HasPrefix(t, o) {
			op = o
			break
		}
	}
	if op == "" {
		return GateCondition{}, errors.New(`want an operator (<, <=, >, >=, ==, !=) and a number, e.g. "< 0.05"`)
	}
	num := strings.TrimSpace(t[len(op):])
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strings.ContainsAny(num, "_") {
		return GateCondition{}, fmt.Errorf(`%q is not a finite number: want e.g. "%s 0.05"`, num, op)
	}
	return GateCondition{Op: op, Value: v}, nil
}

// Holds reports whether v satisfies the condition (never for NaN, except
// !=).
func (c GateCondition) Holds(v float64) bool {
	switch c.Op {
	case "<":
		return v < c.Value
	case "<=":
		return v <= c.Value
	case ">":
		return v > c.Value
	case ">=":
		return v >= c.Value
	case "==":
		return v == c.Value
	case "!=":
		return v != c.Value
	}
	return false
}

// String is the condition as ParseGateCondition reads it.
func (c GateCondition) String() string {
	return c.Op + " " + strconv.FormatFloat(c.Value, 'g', -1, 64)
}

func validateCELGate(p *field.Path, g *CELGate) field.ErrorList {
	var errs field.ErrorList
	r, rp := g.Resource, p.Child("resource")
	if r.APIVersion == "" {
		errs = append(errs, field.Required(rp.Child("apiVersion"), "give the kind's apiVersion, e.g. apps/v1"))
	} else if _, err := schema.ParseGroupVersion(r.APIVersion); err != nil {
		errs = append(errs, field.Invalid(rp.Child("apiVersion"), r.APIVersion, "want GROUP/VERSION or VERSION, e.g. apps/v1 or v1: "+err.Error()))
	}
	if r.Kind == "" {
		errs = append(errs, field.Required(rp.Child("kind"), "give the kind, e.g. Deployment"))
	}
	if r.Namespace != "" {
		if msgs := validation.IsDNS1123Label(r.Namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(rp.Child("namespace"), r.Namespace, strings.Join(msgs, "; ")))
		}
	}
	if r.Name != "" {
		if msgs := path.IsValidPathSegmentName(r.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, strings.Join(msgs, "; ")))
		}
	}
	if r.Name != "" && r.Selector != nil {
		errs = append(errs, field.Invalid(rp.Child("selector"), "(set)", "set name (one object) or selector (a list), not both"))
	}
	if r.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(r.Selector); err != nil {
			errs = append(errs, field.Invalid(rp.Child("selector"), r.Selector, err.Error()))
		}
	}
	if strings.TrimSpace(g.Expression) == "" {
		errs = append(errs, field.Required(p.Child("expression"), "give a CEL expression whose result is a bool, e.g. object.status.availableReplicas == object.spec.replicas"))
	} else if _, err := CompileGateExpression(g.Expression, r.Name != ""); err != nil {
		errs = append(errs, field.Invalid(p.Child("expression"), g.Expression, err.Error()))
	}
	return errs
}

// gateEnvs are the CEL environments of the CEL gates, built once (they are
// never changed after): Kubernetes' base environment (its libraries and
// limits, at the compatibility version of the API server libraries this
// module builds with) with `object` (one object) or `objects` (a list).
var gateEnvs = sync.OnceValues(func() ([2]*cel.Env, error) {
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	var envs [2]*cel.Env
	for i, v := range []cel.EnvOption{cel.Variable("objects", cel.ListType(cel.DynType)), cel.Variable("object", cel.DynType)} {
		set, err := base.Extend(environment.VersionedOptions{IntroducedVersion: version.MajorMinor(1, 0), EnvOptions: []cel.EnvOption{v}})
		if err != nil {
			return envs, err
		}
		if envs[i], err = set.Env(environment.StoredExpressions); err != nil {
			return envs, err
		}
	}
	return envs, nil
})

// CompileGateExpression compiles and type-checks a CEL gate's expression
// in Kubernetes' CEL environment, over `object` (single: resource.name is
// set) or `objects` (a list), and returns its program, cost-limited to
// GateCELCostLimit. The result type must be bool (or dyn, which must then
// evaluate to a bool). Errors are CEL's, naming line and column.
func CompileGateExpression(expr string, single bool) (cel.Program, error) {
	envs, err := gateEnvs()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	env := envs[0]
	if single {
		env = envs[1]
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		v := "objects (a list: resource.name is not set)"
		if single {
			v = "object (resource.name is set)"
		}
		return nil, fmt.Errorf("CEL over %s does not compile: %w", v, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("the expression's result is %s: want a bool (e.g. compare with ==)", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(GateCELCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("CEL program: %w", err)
	}
	return prg, nil
}

// gateDurationSyntax checks spec.gates[].for and .interval of a decoded
// document as ValidateDurationSyntax does the other duration fields.
func gateDurationSyntax(doc map[string]any) field.ErrorList {
	spec, _ := doc["spec"].(map[string]any)
	gates, _ := spec["gates"].([]any)
	var errs field.ErrorList
	for i, g := range gates {
		gm, _ := g.(map[string]any)
		for _, k := range []string{"for", "interval"} {
			v, ok := gm[k]
			if !ok || v == nil {
				continue
			}
			p := field.NewPath("spec", "gates").Index(i).Child(k)
			if str, ok := v.(string); !ok {
				errs = append(errs, field.Invalid(p, v, "want a duration string such as \"30s\", \"5m\" or \"1h\""))
			} else if _, err := time.ParseDuration(str); err != nil {
				errs = append(errs, field.Invalid(p, str, "want a duration such as 30s, 2m or 1h (units ns, us, ms, s, m, h)"))
			}
		}
	}
	return errs
}
