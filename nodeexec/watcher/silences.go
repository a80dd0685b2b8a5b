package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// silenceSlack is added to the timeouts of a node's maintenance to make the
// default duration of its silences (see DefaultSilenceDuration).
const silenceSlack = 10 * time.Minute

// silenceRequestTimeout bounds one call to an Alertmanager.
const silenceRequestTimeout = 10 * time.Second

// silenceRecheck is how soon a reconcile looks again at a silence whose
// expiry failed (the Alertmanager was unreachable).
const silenceRecheck = 10 * time.Second

// heldSilence is a silence the watcher created for a node and has not
// expired yet (nodescript.HeldSilence).
type heldSilence = nodescript.HeldSilence

// defaultSilenceDuration is the duration of a silence of ns without
// spec.maintenance.silences[].duration: the node's whole maintenance, that
// is the drain timeout (when draining; DefaultDrainTimeout by default), the
// run timeout (spec.timeout, DefaultTimeout) and the reboot timeout (when
// spec.reboot is IfRequired or Always; DefaultRebootTimeout), plus
// SilenceSlack.
func defaultSilenceDuration(spec *v1alpha1.NodeScriptSpec) time.Duration {
	d := silenceSlack
	if m := spec.Maintenance; m != nil && m.Drain != nil {
		t := defaultDrainTimeout
		if m.Drain.Timeout != nil {
			t = m.Drain.Timeout.Duration
		}
		d += t
	}
	t := defaultTimeout
	if spec.Timeout != nil {
		t = spec.Timeout.Duration
	}
	d += t
	if spec.Reboot == v1alpha1.RebootIfRequired || spec.Reboot == v1alpha1.RebootAlways {
		t := defaultRebootTimeout
		if spec.RebootTimeout != nil {
			t = spec.RebootTimeout.Duration
		}
		d += t
	}
	return d
}

// silencesRequired is spec.maintenance.silencesRequired, true by default.
func silencesRequired(m *v1alpha1.MaintenanceSpec) bool {
	return m == nil || m.SilencesRequired == nil || *m.SilencesRequired
}

// silenceMatcher is a matcher of Alertmanager's API v2 (its documented
// JSON: models.Matcher).
type silenceMatcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual bool   `json:"isEqual"`
}

// postableSilence is the body of POST /api/v2/silences (Alertmanager's
// models.PostableSilence, without an id: a new silence).
type postableSilence struct {
	Matchers  []silenceMatcher `json:"matchers"`
	StartsAt  time.Time        `json:"startsAt"`
	EndsAt    time.Time        `json:"endsAt"`
	CreatedBy string           `json:"createdBy"`
	Comment   string           `json:"comment"`
}

// silencePayload is the silence sp of ns for node, attempt attempt of spec
// hash, created at now: its matchers (v1alpha1.SilenceMatchers), now to
// now + duration, createdBy SilenceCreatedBy and a comment naming the
// NodeScript, the node and the run (after sp.Comment). It is a pure
// function.
func silencePayload(ns *v1alpha1.NodeScript, sp v1alpha1.Silence, node, hash string, attempt int, now time.Time) (postableSilence, error) {
	ms, err := v1alpha1.SilenceMatchers(sp, node)
	if err != nil {
		return postableSilence{}, err
	}
	d := defaultSilenceDuration(&ns.Spec)
	if sp.Duration != nil {
		d = sp.Duration.Duration
	}
	comment := fmt.Sprintf("nodescript %s on node %s (spec %s, attempt %d): maintenance; expired when the node is back in service", ns.Name, node, hash, attempt)
	if c := strings.TrimSpace(sp.Comment); c != "" {
		comment = c + " | " + comment
	}
	p := postableSilence{StartsAt: now.UTC(), EndsAt: now.Add(d).UTC(), CreatedBy: v1alpha1.SilenceCreatedBy, Comment: comment}
	for _, m := range ms {
		p.Matchers = append(p.Matchers, silenceMatcher{
			Name: m.Name, Value: m.Value,
			IsRegex: m.Type == amlabels.MatchRegexp || m.Type == amlabels.MatchNotRegexp,
			IsEqual: m.Type == amlabels.MatchEqual || m.Type == amlabels.MatchRegexp,
		})
	}
	return p, nil
}

// postSilence creates silence p on the Alertmanager at base (POST
// /api/v2/silences) and returns its ID. Errors name the Alertmanager and
// carry its answer.
func postSilence(ctx context.Context, base string, p postableSilence) (string, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	status, answer, err := amCall(ctx, http.MethodPost, base, "/api/v2/silences", body)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("alertmanager %s: creating a silence: %d %s", base, status, answer)
	}
	if err := json.Unmarshal([]byte(answer), &out); err != nil || out.SilenceID == "" {
		return "", fmt.Errorf("alertmanager %s: creating a silence: no silenceID in the answer %q", base, answer)
	}
	return out.SilenceID, nil
}

// deleteSilence expires silence id on the Alertmanager at base (DELETE
// /api/v2/silence/{id}). A silence the Alertmanager does not know (404: it
// ended and was garbage-collected) or that has ended already is expired.
func deleteSilence(ctx context.Context, base, id string) error {
	status, answer, err := amCall(ctx, http.MethodDelete, base, "/api/v2/silence/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	if status == http.StatusOK || status == http.StatusNotFound || strings.Contains(answer, "already expired") {
		return nil
	}
	return fmt.Errorf("alertmanager %s: expiring silence %s: %d %s", base, id, status, answer)
}

// amCall makes one request to the Alertmanager at base, within
// SilenceRequestTimeout, and returns the status and (the first 512 bytes
// of) the answer.
func amCall(ctx context.Context, method, base, path string, body []byte) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, silenceRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", fmt.Errorf("alertmanager %s: %w", base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("alertmanager %s: %w", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// silencesBefore creates the silences of ns (spec.maintenance.silences) for
// node n before it is cordoned (prepare); s is the node's state. Silences
// still held from an earlier attempt are expired first (one that cannot be
// ends at its endsAt; an Event says so). It returns the silences created.
// When one cannot be created and spec.maintenance.silencesRequired is true
// (the default), those created are expired again and the error is returned
// (the node does not start); otherwise a Warning Event SilenceFailed and
// the node goes on without it.
func (c *controller) silencesBefore(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) ([]heldSilence, error) {
	if len(s.Silences) > 0 {
		left := c.expireSilences(ctx, ns, n, s.Silences, now)
		for _, h := range left {
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonSilenceFailed, "nodescript %s: silence %s on %s of an earlier attempt not expired; it ends at %s", ns.Name, h.ID, h.URL, h.EndsAt.UTC().Format(time.RFC3339))
		}
	}
	m := ns.Spec.Maintenance
	if m == nil || len(m.Silences) == 0 {
		return nil, nil
	}
	attempt := 1
	if s.Hash == hash {
		attempt = s.Attempts + 1
	}
	var held []heldSilence
	for i, sp := range m.Silences {
		p, err := silencePayload(ns, sp, n.Name, hash, attempt, now)
		var id string
		if err == nil {
			id, err = postSilence(ctx, sp.URL, p)
		}
		if err != nil {
			c.w.metrics.silences.WithLabelValues(ns.Name, "failed").Inc()
			err = fmt.Errorf("spec.maintenance.silences[%d]: %w", i, err)
			if silencesRequired(m) {
				c.expireSilences(ctx, ns, n, held, now)
				return nil, err
			}
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonSilenceFailed, "nodescript %s: %v; going on without it (spec.maintenance.silencesRequired is false)", ns.Name, err)
			continue
		}
		held = append(held, heldSilence{URL: sp.URL, ID: id, EndsAt: p.EndsAt.Truncate(time.Second)})
		c.w.metrics.silences.WithLabelValues(ns.Name, "created").Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonSilenceCreated, "nodescript %s: silence %s created on %s (%s) until %s", ns.Name, id, sp.URL, matchersText(p.Matchers), p.EndsAt.Format(time.RFC3339))
	}
	return held, nil
}

// matchersText is ms as Alertmanager writes them: {a="b", c=~"d"}.
func matchersText(ms []silenceMatcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		op := map[[2]bool]string{{false, true}: "=", {false, false}: "!=", {true, true}: "=~", {true, false}: "!~"}[[2]bool{m.IsRegex, m.IsEqual}]
		parts[i] = fmt.Sprintf("%s%s%q", m.Name, op, m.Value)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// silenceFailed records on node n that the run of ns at hash could not
// start because a required silence could not be created (err): an
// infrastructure failure with reason SilenceFailed, counted as an attempt
// (so spec.retry.limit bounds it) and retried under spec.retry after its
// backoff. The node was not cordoned for it.
func (c *controller) silenceFailed(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, err error, now time.Time) error {
	msg := tail("creating the silences before cordoning: "+err.Error(), 512)
	f := nodeState{
		Hash: hash, Phase: v1alpha1.PhaseFailed, Since: now, Infrastructure: true, Reason: v1alpha1.ReasonSilenceFailed, Message: msg,
		BootID: n.Status.NodeInfo.BootID, CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs,
	}
	if s.Hash == hash {
		f.Attempts, f.AttemptsBefore, f.Checked = s.Attempts, s.AttemptsBefore, s.Checked
	}
	f.Attempts++
	t := now.Add(backoff(ns, f.Attempts))
	f.NextRetry = &t
	c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonSilenceFailed, "nodescript %s: the node does not start (spec.maintenance.silencesRequired): %s", ns.Name, msg)
	c.w.metrics.runs.WithLabelValues(ns.Name, v1alpha1.ActionRun, "infrastructure").Inc()
	return c.w.writeState(ctx, ns, n, f)
}

// expireSilences expires the silences held (an Event SilenceExpired on n for
// each) and returns those that could not be (a Warning Event SilenceFailed
// for each); a silence past its endsAt has ended and is dropped without a
// call.
func (c *controller) expireSilences(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, held []heldSilence, now time.Time) []heldSilence {
	var left []heldSilence
	for _, h := range held {
		if !now.Before(h.EndsAt) {
			continue
		}
		if err := deleteSilence(ctx, h.URL, h.ID); err != nil {
			if ctx.Err() != nil {
				left = append(left, h)
				continue
			}
			c.w.metrics.silences.WithLabelValues(ns.Name, "failed").Inc()
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonSilenceFailed, "nodescript %s: expiring silence %s: %v; retried (it ends at %s anyway)", ns.Name, h.ID, err, h.EndsAt.UTC().Format(time.RFC3339))
			left = append(left, h)
			continue
		}
		c.w.metrics.silences.WithLabelValues(ns.Name, "expired").Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonSilenceExpired, "nodescript %s: silence %s on %s expired: the node is back in service", ns.Name, h.ID, h.URL)
	}
	return left
}

// inMaintenance reports whether node n, whose state is s, is still in
// maintenance for the NodeScript, so that its silences are kept: while its
// run goes (Running: draining, drained, running, rebooting), while it is
// cordoned by the watcher (not uncordoned yet), and while a failure left it
// cordoned (spec.onFailure.cordon).
func inMaintenance(s nodeState, n *corev1.Node) bool {
	return s.Phase == v1alpha1.PhaseRunning || (n.Spec.Unschedulable && (s.CordonedByUs || (s.Phase == v1alpha1.PhaseFailed && s.Cordoned)))
}

// silenceUpkeep is the end of phase 2: every node holding silences of ns
// (NodeState.Silences, whatever its selection) that is no longer in
// maintenance (inMaintenance: uncordoned after a success, or after a
// failure without spec.onFailure.cordon) has them expired, and its state
// written without them. A silence that cannot be expired stays recorded and
// is tried again (retry is when, zero when none); past its endsAt it is
// dropped. It runs after the phase's other work, which may have just
// uncordoned the node (the state this process wrote is seen at once).
func (c *controller) silenceUpkeep(ctx context.Context, ns *v1alpha1.NodeScript, cached nodeSet, now time.Time) (retry time.Time, err error) {
	var (
		work   []func() error
		failed atomic.Bool
	)
	for _, n := range cached.all {
		s, ok := c.w.state(ctx, ns.Name, n)
		if !ok || len(s.Silences) == 0 || inMaintenance(s, n) {
			continue
		}
		work = append(work, func() error {
			left := c.expireSilences(ctx, ns, n, s.Silences, now)
			if len(left) > 0 {
				failed.Store(true)
			}
			if len(left) == len(s.Silences) && len(left) > 0 {
				return nil
			}
			s.Silences = left
			return c.w.writeState(ctx, ns, n, s)
		})
	}
	if len(work) == 0 {
		return time.Time{}, nil
	}
	err = c.parallel(work)
	if failed.Load() {
		retry = now.Add(silenceRecheck)
	}
	return retry, err
}

// releaseSilences expires the silences node n holds for ns before its state
// is removed (the NodeScript is deleted: finalize), so that none is left
// without a record; one that cannot be expired ends at its endsAt (logged).
func (c *controller) releaseSilences(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) {
	s, ok := c.w.state(ctx, ns.Name, n)
	if !ok || len(s.Silences) == 0 {
		return
	}
	for _, h := range c.expireSilences(ctx, ns, n, s.Silences, c.w.o.Clock.Now()) {
		logr.FromContextOrDiscard(ctx).Info("silence left to end by itself", "node", n.Name, "id", h.ID, "alertmanager", h.URL, "endsAt", h.EndsAt)
	}
}

// newSilenceMetric is nodeexec_watcher_silences_total.
func newSilenceMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_silences_total",
		Help: "Alertmanager silences of spec.maintenance.silences, by NodeScript and result (created, expired, failed: a create or expire that failed).",
	}, []string{"nodescript", "result"})
}
