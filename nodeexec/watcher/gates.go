package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/google/cel-go/common/types"
	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// DefaultGateTimeout is the default of Options.GateTimeout.
const DefaultGateTimeout = 10 * time.Second

// maxGateValue bounds GateStatus.Value, in bytes.
const maxGateValue = 160

// gateResult is what one check of a gate saw.
type gateResult struct {
	open bool
	// value is what it saw, short; message why it is open or closed (the
	// error of a failed check).
	value, message string
	failed         bool
}

// gateEntry is the cached last check of one gate (at one spec).
type gateEntry struct {
	mu      sync.Mutex // one check at a time
	checked time.Time
	res     gateResult
}

// gateCache holds per NodeScript the last check of each gate, keyed by
// gate name and a digest of the gate's spec (a changed gate is read
// again at once), and the last status written of each gate (so a
// transition is seen once though the informer lags the status write).
type gateCache struct {
	mu      sync.Mutex
	entries map[string]map[string]*gateEntry
	last    map[string]map[string]v1alpha1.GateStatus
}

func newGateCache() *gateCache {
	return &gateCache{entries: map[string]map[string]*gateEntry{}, last: map[string]map[string]v1alpha1.GateStatus{}}
}

// entriesFor returns the entries of NodeScript ns for keys, dropping the
// others (gates removed or changed).
func (g *gateCache) entriesFor(ns string, keys []string) []*gateEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, now := g.entries[ns], make(map[string]*gateEntry, len(keys))
	out := make([]*gateEntry, len(keys))
	for i, k := range keys {
		e := old[k]
		if e == nil {
			e = &gateEntry{}
		}
		now[k], out[i] = e, e
	}
	g.entries[ns] = now
	return out
}

func (g *gateCache) lastStatus(ns, gate string) (v1alpha1.GateStatus, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.last[ns][gate]
	return s, ok
}

func (g *gateCache) setLast(ns string, sts []v1alpha1.GateStatus) {
	m := make(map[string]v1alpha1.GateStatus, len(sts))
	for _, s := range sts {
		m[s.Name] = s
	}
	g.mu.Lock()
	g.last[ns] = m
	g.mu.Unlock()
}

func (g *gateCache) forget(ns string) {
	g.mu.Lock()
	delete(g.entries, ns)
	delete(g.last, ns)
	g.mu.Unlock()
}

// gateKey is a gate's name and a digest of its spec.
func gateKey(g *v1alpha1.Gate) string {
	b, _ := json.Marshal(g)
	sum := sha256.Sum256(b)
	return g.Name + "/" + hex.EncodeToString(sum[:8])
}

// gateInterval is g's interval, or DefaultGateInterval.
func gateInterval(g *v1alpha1.Gate) time.Duration {
	if g.Interval != nil && g.Interval.Duration >= v1alpha1.MinGateInterval {
		return g.Interval.Duration
	}
	return v1alpha1.DefaultGateInterval
}

// gate applies spec.gates to the decision d taken at now on nodes: each
// gate is checked (at most once per its interval: the cached check
// otherwise), its status computed against its `for`, and when one is
// closed nothing new starts: d.Hold is HoldGated (unless already held) and
// d.Start keeps only the nodes whose next step is spec.checkScript (which
// comes before the gates); runs in progress, and verify runs, go on. A
// transition records a GateClosed or GateOpened Event on ns. d.Gates is the
// status of each gate. It returns d and when to look again (zero: no gate
// waits). A rollout over (Complete, Halted) reads no gate.
func (c *controller) gate(ctx context.Context, ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, now time.Time) (decision, time.Time) {
	gates := ns.Spec.Gates
	if len(gates) == 0 || d.Stage == v1alpha1.StageComplete || d.Stage == v1alpha1.StageHalted {
		return d, time.Time{}
	}
	keys := make([]string, len(gates))
	for i := range gates {
		keys[i] = gateKey(&gates[i])
	}
	entries := c.w.gates.entriesFor(ns.Name, keys)
	results := make([]gateResult, len(gates))
	checked := make([]time.Time, len(gates))
	var wg sync.WaitGroup
	for i := range gates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], checked[i] = c.checkGate(ctx, ns.Name, &gates[i], entries[i], now)
		}()
	}
	wg.Wait()

	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	d.Gates = make([]v1alpha1.GateStatus, len(gates))
	closed := false
	for i := range gates {
		g, res := &gates[i], results[i]
		prev, known := c.w.gates.lastStatus(ns.Name, g.Name)
		if !known {
			for _, s := range ns.Status.Gates {
				if s.Name == g.Name {
					prev, known = s, true
				}
			}
		}
		since := checked[i]
		if known && prev.SeenOpen == res.open && prev.Since != nil {
			since = prev.Since.Time
		}
		var forD time.Duration
		if g.For != nil {
			forD = g.For.Duration
		}
		open := res.open && !now.Before(since.Add(forD))
		msg := res.message
		if res.open && !open {
			msg = fmt.Sprintf("%s; open since %s, counts as open after %s (for)", res.message, since.UTC().Format(time.RFC3339), forD)
			earliest(since.Add(forD))
		}
		if !open {
			closed = true
			earliest(checked[i].Add(gateInterval(g)))
		}
		st := v1alpha1.GateStatus{
			Name: g.Name, Open: open, SeenOpen: res.open, Value: res.value, Message: msg,
			Since: &metav1.Time{Time: since.UTC().Truncate(time.Second)}, LastChecked: &metav1.Time{Time: checked[i].UTC().Truncate(time.Second)},
		}
		d.Gates[i] = st
		c.w.metrics.gateOpen.WithLabelValues(ns.Name, g.Name).Set(map[bool]float64{false: 0, true: 1}[open])
		switch {
		case !open && (!known || prev.Open):
			c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonGateClosed, "gate %s is closed: nothing new starts (saw %s): %s", g.Name, res.value, msg)
		case open && known && !prev.Open:
			c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonGateOpened, "gate %s is open (saw %s)", g.Name, res.value)
		}
	}
	c.w.gates.setLast(ns.Name, d.Gates)
	if closed {
		if d.Hold == "" {
			d.Hold = v1alpha1.HoldGated
		}
		d.Start = slices.DeleteFunc(d.Start, func(node string) bool { return !checksNext(ns, d.Hash, nodes, node) })
	}
	if !next.IsZero() {
		next = maxTime(next, now.Add(time.Second))
	}
	return d, next
}

// checksNext reports whether node's next step is spec.checkScript (which
// runs before the gates are asked).
func checksNext(ns *v1alpha1.NodeScript, hash string, nodes []rolloutNode, node string) bool {
	if ns.Spec.CheckScript == "" {
		return false
	}
	for _, n := range nodes {
		if n.Name == node {
			return !(n.State.Hash == hash && n.State.Checked)
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkGate returns gate g's last check when it is younger than its
// interval, else checks it now (bounded by Options.GateTimeout; counted in
// nodeexec_watcher_gate_queries_total) and caches the result. A check that
// fails is closed, with the error as its message.
func (c *controller) checkGate(ctx context.Context, nsName string, g *v1alpha1.Gate, e *gateEntry, now time.Time) (gateResult, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.checked.IsZero() && now.Sub(e.checked) < gateInterval(g) && !now.Before(e.checked) {
		return e.res, e.checked
	}
	qctx, cancel := context.WithTimeout(ctx, c.w.o.GateTimeout)
	defer cancel()
	var (
		res gateResult
		err error
	)
	switch {
	case g.Prometheus != nil:
		res, err = c.w.queryPrometheus(qctx, g.Prometheus)
	case g.Alerts != nil:
		res, err = c.w.queryAlerts(qctx, g.Alerts)
	case g.CEL != nil:
		res, err = c.w.evalCEL(qctx, g.CEL)
	default:
		err = errors.New("no kind set (prometheus, alerts or cel)")
	}
	result := "ok"
	if err != nil {
		result = "error"
		res = gateResult{value: "error", message: "closed: the check failed: " + err.Error(), failed: true}
	}
	res.value = nodescript.Truncate(res.value, maxGateValue)
	res.message = nodescript.Truncate(res.message, 512)
	c.w.metrics.gateQueries.WithLabelValues(nsName, g.Name, result).Inc()
	e.checked, e.res = now, res
	return res, now
}

// queryPrometheus runs g's instant query (GET /api/v1/query, at the
// server's time). Open: no series without a condition; with one, at least
// one value and every value satisfying it. A range vector or a string is
// an error.
func (w *Watcher) queryPrometheus(ctx context.Context, g *v1alpha1.PrometheusGate) (gateResult, error) {
	client, err := promapi.NewClient(promapi.Config{Address: g.URL, Client: w.o.HTTPClient})
	if err != nil {
		return gateResult{}, fmt.Errorf("prometheus %s: %w", g.URL, err)
	}
	val, _, _, err := promv1.NewAPI(client).Query(ctx, g.Query, time.Time{})
	if err != nil {
		return gateResult{}, fmt.Errorf("prometheus %s: query %q: %w", g.URL, g.Query, err)
	}
	var samples []string
	var values []float64
	switch v := val.(type) {
	case model.Vector:
		for _, s := range v {
			values = append(values, float64(s.Value))
			samples = append(samples, s.Metric.String()+" "+s.Value.String())
		}
	case *model.Scalar:
		values, samples = []float64{float64(v.Value)}, []string{v.Value.String()}
	default:
		return gateResult{}, fmt.Errorf("prometheus %s: query %q returned a %s: want an instant vector or a scalar", g.URL, g.Query, val.Type())
	}
	value := strconv.Itoa(len(values)) + " series"
	if len(samples) > 0 {
		value += ": " + strings.Join(samples[:min(3, len(samples))], ", ")
	}
	if g.Condition == "" {
		if len(values) == 0 {
			return gateResult{open: true, value: value, message: "open: the query returns no series"}, nil
		}
		return gateResult{value: value, message: fmt.Sprintf("closed: the query returns %d series (open when it returns none)", len(values))}, nil
	}
	cond, err := v1alpha1.ParseGateCondition(g.Condition)
	if err != nil {
		return gateResult{}, fmt.Errorf("condition %q: %w", g.Condition, err)
	}
	if len(values) == 0 {
		return gateResult{value: value, message: fmt.Sprintf("closed: the query returns no series, so nothing satisfies %s", cond)}, nil
	}
	for i, v := range values {
		if !cond.Holds(v) {
			return gateResult{value: value, message: fmt.Sprintf("closed: %s does not satisfy %s", samples[i], cond)}, nil
		}
	}
	return gateResult{open: true, value: value, message: fmt.Sprintf("open: every value satisfies %s", cond)}, nil
}

// amAlert is the part of an alert of Alertmanager's API v2
// (GettableAlert) the alerts gate reads.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
}

// queryAlerts lists the active alerts (GET /api/v2/alerts, neither
// silenced nor inhibited) and closes the gate on each one matching all of
// g.Matchers and none of g.Ignore.
func (w *Watcher) queryAlerts(ctx context.Context, g *v1alpha1.AlertsGate) (gateResult, error) {
	parse := func(ss []string) ([]*amlabels.Matcher, error) {
		var ms []*amlabels.Matcher
		for _, s := range ss {
			m, err := v1alpha1.ParseGateMatcher(s)
			if err != nil {
				return nil, fmt.Errorf("matcher %q: %w", s, err)
			}
			ms = append(ms, m)
		}
		return ms, nil
	}
	match, err := parse(g.Matchers)
	if err != nil {
		return gateResult{}, err
	}
	ignore, err := parse(g.Ignore)
	if err != nil {
		return gateResult{}, err
	}
	u, err := url.Parse(strings.TrimSuffix(g.URL, "/") + "/api/v2/alerts")
	if err != nil {
		return gateResult{}, fmt.Errorf("alertmanager %s: %w", g.URL, err)
	}
	u.RawQuery = url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return gateResult{}, fmt.Errorf("alertmanager %s: %w", g.URL, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := w.o.HTTPClient.Do(req)
	if err != nil {
		return gateResult{}, fmt.Errorf("alertmanager %s: %w", g.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return gateResult{}, fmt.Errorf("alertmanager %s: reading the alerts: %w", g.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return gateResult{}, fmt.Errorf("alertmanager %s: GET /api/v2/alerts: %s: %s", g.URL, resp.Status, nodescript.Truncate(strings.TrimSpace(string(body)), 200))
	}
	var alerts []amAlert
	if err := json.Unmarshal(body, &alerts); err != nil {
		return gateResult{}, fmt.Errorf("alertmanager %s: GET /api/v2/alerts: not a list of alerts: %w", g.URL, err)
	}
	matches := func(ms []*amlabels.Matcher, ls map[string]string, all bool) bool {
		for _, m := range ms {
			if m.Matches(ls[m.Name]) != all {
				return !all
			}
		}
		return all
	}
	var firing []string
	for _, a := range alerts {
		if a.Status.State != "" && a.Status.State != "active" {
			continue
		}
		if !matches(match, a.Labels, true) || (len(ignore) > 0 && matches(ignore, a.Labels, false)) {
			continue
		}
		firing = append(firing, model.LabelSet(toLabelSet(a.Labels)).String())
	}
	slices.Sort(firing)
	if len(firing) == 0 {
		return gateResult{open: true, value: "0 firing", message: "open: no firing alert matches"}, nil
	}
	return gateResult{
		value:   fmt.Sprintf("%d firing: %s", len(firing), strings.Join(firing[:min(2, len(firing))], ", ")),
		message: fmt.Sprintf("closed: %d firing alert(s) match", len(firing)),
	}, nil
}

func toLabelSet(m map[string]string) model.LabelSet {
	ls := make(model.LabelSet, len(m))
	for k, v := range m {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls
}

// evalCEL reads the object(s) g.Resource names with the dynamic client
// (RESTMapper: the kind's resource and scope; RBAC: get or list on it) and
// evaluates g.Expression over them, cost-limited
// (v1alpha1.GateCELCostLimit). Open when it is true; a result that is not a
// bool is an error.
func (w *Watcher) evalCEL(ctx context.Context, g *v1alpha1.CELGate) (gateResult, error) {
	r := g.Resource
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return gateResult{}, fmt.Errorf("resource.apiVersion %q: %w", r.APIVersion, err)
	}
	mapping, err := w.o.RESTMapper.RESTMapping(gv.WithKind(r.Kind).GroupKind(), gv.Version)
	if err != nil {
		return gateResult{}, fmt.Errorf("resource %s %s: %w", r.APIVersion, r.Kind, err)
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	res := w.o.Dynamic.Resource(mapping.Resource)
	var (
		vars = map[string]any{}
		what string
	)
	if r.Name != "" {
		var obj map[string]any
		switch {
		case namespaced && r.Namespace == "":
			return gateResult{}, fmt.Errorf("resource %s %s is namespaced: set resource.namespace", r.APIVersion, r.Kind)
		case namespaced:
			u, err := res.Namespace(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				return gateResult{}, fmt.Errorf("getting %s %s/%s: %w", r.Kind, r.Namespace, r.Name, err)
			}
			obj = u.Object
		default:
			u, err := res.Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				return gateResult{}, fmt.Errorf("getting %s %s: %w", r.Kind, r.Name, err)
			}
			obj = u.Object
		}
		vars["object"], what = obj, r.Kind+" "+r.Name
	} else {
		opts := metav1.ListOptions{}
		if r.Selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(r.Selector)
			if err != nil {
				return gateResult{}, fmt.Errorf("resource.selector: %w", err)
			}
			opts.LabelSelector = sel.String()
		}
		var list []any
		ri := res.Namespace(r.Namespace)
		if !namespaced {
			ri = res.Namespace("")
		}
		l, err := ri.List(ctx, opts)
		if err != nil {
			return gateResult{}, fmt.Errorf("listing %s: %w", mapping.Resource.Resource, err)
		}
		for i := range l.Items {
			list = append(list, l.Items[i].Object)
		}
		if list == nil {
			list = []any{}
		}
		vars["objects"], what = list, fmt.Sprintf("%d %s", len(list), mapping.Resource.Resource)
	}
	prg, err := v1alpha1.CompileGateExpression(g.Expression, r.Name != "")
	if err != nil {
		return gateResult{}, err
	}
	out, _, err := prg.ContextEval(ctx, vars)
	if err != nil {
		return gateResult{}, fmt.Errorf("evaluating the expression over %s: %w", what, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return gateResult{}, fmt.Errorf("the expression over %s returned %s (%v): want a bool", what, out.Type().TypeName(), out.Value())
	}
	if b {
		return gateResult{open: true, value: "true (" + what + ")", message: "open: the expression is true"}, nil
	}
	return gateResult{value: "false (" + what + ")", message: "closed: the expression is false"}, nil
}

// gateStatus sets the gates part of the status st from d: status.gates
// and the condition Gated (True naming each closed gate and what it saw;
// False when all are open); with HoldGated, Progressing False (reason
// Gated). Without spec.gates both are removed.
func gateStatus(st *v1alpha1.NodeScriptStatus, ns *v1alpha1.NodeScript, d decision, now time.Time) {
	gen := ns.Generation
	if len(ns.Spec.Gates) == 0 {
		st.Gates = nil
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionGated)
		return
	}
	if d.Gates == nil {
		// The rollout is over: the gates are not read; the last seen kept.
		setCondition(st, v1alpha1.ConditionGated, false, "NotChecked", "the rollout is "+strings.ToLower(d.Stage)+": the gates are not read", gen, now)
		return
	}
	st.Gates = d.Gates
	var closed []string
	for _, g := range d.Gates {
		if !g.Open {
			closed = append(closed, fmt.Sprintf("%s (saw %s: %s)", g.Name, g.Value, g.Message))
		}
	}
	if len(closed) == 0 {
		setCondition(st, v1alpha1.ConditionGated, false, "GatesOpen", fmt.Sprintf("all %d gate(s) open", len(d.Gates)), gen, now)
		return
	}
	msg := nodescript.Truncate(fmt.Sprintf("%d gate(s) closed: %s", len(closed), strings.Join(closed, "; ")), 1024)
	setCondition(st, v1alpha1.ConditionGated, true, "GateClosed", msg, gen, now)
	if d.Hold == v1alpha1.HoldGated {
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldGated,
			fmt.Sprintf("gated: nothing new starts (%d running) while %s", d.Counts.Running, msg), gen, now)
	}
}

// gateOptions checks and defaults the Options of spec.gates: GateTimeout,
// HTTPClient and RESTMapper.
func gateOptions(o *Options) error {
	if o.GateTimeout < 0 {
		return fmt.Errorf("watcher: Options.GateTimeout is %s: give a positive duration, or 0 for the default %s", o.GateTimeout, DefaultGateTimeout)
	}
	if o.GateTimeout == 0 {
		o.GateTimeout = DefaultGateTimeout
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.GateTimeout}
	}
	if o.RESTMapper == nil {
		o.RESTMapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(o.Client.Discovery()))
	}
	return nil
}
