package watcher

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Delivery of spec.notify (docs/nodescript-notify.md).
const (
	// DefaultNotifyAttempts is the default of Options.NotifyAttempts.
	DefaultNotifyAttempts = 8
	// DefaultNotifyBackoff is the default of Options.NotifyBackoff.
	DefaultNotifyBackoff = time.Second
	// maxNotifyBackoff caps the wait between two attempts of a delivery.
	maxNotifyBackoff = 5 * time.Minute
	// defaultNotifyTimeout bounds one POST when Options.HTTPClient has no
	// Timeout of its own.
	defaultNotifyTimeout = 10 * time.Second
	// notifyQueueSize bounds the deliveries waiting in a watcher's queue;
	// one more is dropped (NotificationFailed, result "dropped").
	notifyQueueSize = 1000
)

// NotificationPayload is the JSON document POSTed for each event
// (Content-Type application/json). Fields are only ever added within
// apiVersion nodeexec.io/v1alpha1.
type NotificationPayload struct {
	// APIVersion is NotificationAPIVersion, Kind NotificationKind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Event is Started, NodeFailed, Halted or Completed.
	Event string `json:"event"`
	// NodeScript is the NodeScript's name; SpecHash its status.specHash
	// (the rollout).
	NodeScript string `json:"nodescript"`
	SpecHash   string `json:"specHash"`
	// Node is the failed node (NodeFailed) or the first node started
	// (Started); empty for Halted and Completed.
	Node string `json:"node,omitempty"`
	// Stage is the rollout's stage (Canary, Soaking, AwaitingPromotion,
	// Rolling, Complete, Halted): for NodeFailed as of the last status
	// written before the failure was recorded.
	Stage string `json:"stage"`
	// Counts are the nodes per phase, as Stage.
	Counts NotificationCounts `json:"counts"`
	// Message says what happened, in words (the halt reason, the exit).
	Message string `json:"message"`
	// Time is when the watcher saw the event (RFC 3339, UTC).
	Time time.Time `json:"time"`
}

// NotificationCounts are a rollout's nodes per phase.
type NotificationCounts struct {
	Nodes      int `json:"nodes"`
	Pending    int `json:"pending"`
	Running    int `json:"running"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	RolledBack int `json:"rolledBack"`
	NotNeeded  int `json:"notNeeded"`
}

// Sign returns the value of HeaderSignature for body under key:
// "sha256=" and the hex HMAC-SHA256.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// notifyOptions checks and defaults the Options of spec.notify (after
// gateOptions, which defaults HTTPClient).
func notifyOptions(o *Options) error {
	switch {
	case o.NotifyAttempts < 0:
		return fmt.Errorf("watcher: Options.NotifyAttempts is %d: give a positive number, or 0 for the default %d", o.NotifyAttempts, DefaultNotifyAttempts)
	case o.NotifyAttempts == 0:
		o.NotifyAttempts = DefaultNotifyAttempts
	}
	switch {
	case o.NotifyBackoff < 0:
		return fmt.Errorf("watcher: Options.NotifyBackoff is %s: give a positive duration, or 0 for the default %s", o.NotifyBackoff, DefaultNotifyBackoff)
	case o.NotifyBackoff == 0:
		o.NotifyBackoff = DefaultNotifyBackoff
	}
	return nil
}

func newNotifyMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_notifications_total",
		Help: "Notifications of spec.notify by NodeScript, event and result (delivered; failed: every attempt failed; dropped: the queue was full).",
	}, []string{"nodescript", "event", "result"})
}

// delivery is one notification to one target, with its attempts.
type delivery struct {
	ref        *v1alpha1.NodeScript // name and UID, for Events
	namespace  string               // of the Secret
	url, event string
	node, hash string
	secret     *v1alpha1.NotifySecretRef
	body       []byte
	id         string
	attempt    int
}

// outcome is what the worker saw of a target since this process started,
// merged into status.notifications by the next status write.
type outcome struct {
	delivered, errored bool
	st                 v1alpha1.NotificationStatus
}

// notifier delivers notifications: one bounded queue and one worker per
// run of the watcher. It never blocks a reconcile.
type notifier struct {
	w       *Watcher
	events  record.EventRecorder
	requeue func(nodescript string)
	client  *http.Client
	queue   workqueue.TypedRateLimitingInterface[*delivery]

	mu       sync.Mutex
	outcomes map[string]map[string]*outcome // NodeScript, URL
	// failed are the NodeFailed payloads finish recorded, per NodeScript,
	// waiting for status to give them the rollout's stage and counts.
	failed map[string][]NotificationPayload
	// sent is, per NodeScript, the Sent lists of the last status written
	// (the cache may not show that write yet when the next reconcile
	// reads it): its spec hash and, per URL, the events.
	sent map[string]sentRecord
}

type sentRecord struct {
	hash  string
	byURL map[string][]string
}

// notes are the deliveries a status write hands to the worker.
type notes struct {
	// rollout: Started, Halted, Completed, marked sent in the status:
	// queued only once the status is written.
	rollout []*delivery
	// failed: NodeFailed, recorded in the node's state: queued whatever
	// the status write's outcome.
	failed []*delivery
	// name and sent: the NodeScript and its status.notifications' Sent
	// lists, remembered once written.
	name string
	sent sentRecord
}

// newNotifier returns a notifier recording Events with events and
// requeueing a NodeScript (to write its status) through requeue.
func newNotifier(w *Watcher, events record.EventRecorder, requeue func(string)) *notifier {
	cl := *w.o.HTTPClient
	cl.CheckRedirect = sameHostRedirects
	return &notifier{
		w: w, events: events, requeue: requeue, client: &cl,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[*delivery](w.o.NotifyBackoff, maxNotifyBackoff),
			workqueue.TypedRateLimitingQueueConfig[*delivery]{Name: "notifications", Clock: w.o.Clock}),
		outcomes: map[string]map[string]*outcome{},
		failed:   map[string][]NotificationPayload{},
		sent:     map[string]sentRecord{},
	}
}

// forget drops what n remembers of NodeScript name (gone from the API):
// its delivery outcomes, the NodeFailed payloads waiting for a status and
// its Sent lists. Deliveries already queued still go out.
func (n *notifier) forget(name string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.outcomes, name)
	delete(n.failed, name)
	delete(n.sent, name)
}

// sameHostRedirects follows at most 5 redirects, and none to another host
// or scheme: a webhook's signed body goes only where spec.notify says.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if first := via[0].URL; req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
		return fmt.Errorf("redirect to %s://%s not followed: only redirects to the same host are", req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// run delivers until ctx ends; deliveries still queued then are dropped.
func (n *notifier) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		n.queue.ShutDown()
	}()
	for n.processNext(ctx) {
	}
}

// processNext makes one attempt of the next delivery; false once the queue
// is shut down.
func (n *notifier) processNext(ctx context.Context) bool {
	d, quit := n.queue.Get()
	if quit {
		return false
	}
	defer n.queue.Done(d)
	if ctx.Err() != nil {
		n.queue.Forget(d)
		return true
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("nodescript", d.ref.Name, "event", d.event, "url", d.url)
	d.attempt++
	err := n.send(ctx, d)
	now := n.w.o.Clock.Now()
	switch {
	case err == nil:
		n.queue.Forget(d)
		n.w.metrics.notifications.WithLabelValues(d.ref.Name, d.event, "delivered").Inc()
		n.record(d, func(o *outcome) {
			o.delivered, o.errored = true, true
			o.st.LastEvent, o.st.LastNode, o.st.LastSpecHash = d.event, d.node, d.hash
			o.st.LastDelivered = &metav1.Time{Time: now}
			o.st.LastError, o.st.LastErrorTime = "", nil
		})
		log.V(1).Info("notification delivered", "attempt", d.attempt)
	case d.attempt >= n.w.o.NotifyAttempts:
		n.queue.Forget(d)
		n.fail(d, fmt.Sprintf("%s: %v (attempt %d of %d; giving up)", d.event, err, d.attempt, n.w.o.NotifyAttempts), "failed", now)
		log.Error(err, "notification not delivered; giving up", "attempts", d.attempt)
	default:
		n.record(d, func(o *outcome) {
			o.errored = true
			o.st.LastError = tail(fmt.Sprintf("%s: %v (attempt %d of %d)", d.event, err, d.attempt, n.w.o.NotifyAttempts), 512)
			o.st.LastErrorTime = &metav1.Time{Time: now}
		})
		log.V(1).Info("notification not delivered; retrying with backoff", "attempt", d.attempt, "err", err.Error())
		n.queue.AddRateLimited(d)
	}
	return true
}

// fail records a delivery given up (result failed or dropped): the
// metric, a Warning Event on the NodeScript and the error for its status.
func (n *notifier) fail(d *delivery, msg, result string, now time.Time) {
	n.w.metrics.notifications.WithLabelValues(d.ref.Name, d.event, result).Inc()
	n.events.Eventf(d.ref, corev1.EventTypeWarning, v1alpha1.ReasonNotificationFailed, "notification %s to %s: %s", d.event, d.url, msg)
	n.record(d, func(o *outcome) {
		o.errored = true
		o.st.LastError, o.st.LastErrorTime = tail(msg, 512), &metav1.Time{Time: now}
	})
}

// record changes the outcome of d's target and requeues its NodeScript so
// that its status shows it.
func (n *notifier) record(d *delivery, change func(*outcome)) {
	n.mu.Lock()
	byURL := n.outcomes[d.ref.Name]
	if byURL == nil {
		byURL = map[string]*outcome{}
		n.outcomes[d.ref.Name] = byURL
	}
	o := byURL[d.url]
	if o == nil {
		o = &outcome{}
		byURL[d.url] = o
	}
	change(o)
	n.mu.Unlock()
	if n.requeue != nil {
		n.requeue(d.ref.Name)
	}
}

// send POSTs d once: it reads the HMAC key (GET secrets in d.namespace),
// signs the body and wants a 2xx answer within the client's timeout (or
// DefaultNotifyTimeout).
func (n *notifier) send(ctx context.Context, d *delivery) error {
	var key []byte
	if r := d.secret; r != nil {
		s, err := n.w.o.Client.CoreV1().Secrets(d.namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the HMAC key (secretRef): %w", err)
		}
		v, ok := s.Data[r.Key]
		if !ok || len(v) == 0 {
			return fmt.Errorf("reading the HMAC key (secretRef): Secret %s/%s has no key %q", d.namespace, r.Name, r.Key)
		}
		key = v
	}
	if n.client.Timeout == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultNotifyTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "nodeexec-watcher")
	req.Header.Set(v1alpha1.HeaderEvent, d.event)
	req.Header.Set(v1alpha1.HeaderDelivery, d.id)
	if key != nil {
		req.Header.Set(v1alpha1.HeaderSignature, Sign(key, d.body))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// enqueue hands ds to the worker; past NotifyQueueSize one is dropped.
func (n *notifier) enqueue(ds []*delivery) {
	for _, d := range ds {
		if n.queue.Len() >= notifyQueueSize {
			n.fail(d, fmt.Sprintf("dropped: %d notifications are waiting already", notifyQueueSize), "dropped", n.w.o.Clock.Now())
			continue
		}
		n.queue.Add(d)
	}
}

// deliveries returns one delivery of payload p per target of ns that wants
// p.Event.
func deliveries(ns *v1alpha1.NodeScript, p NotificationPayload, want func(url string) bool) []*delivery {
	body, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	ref := &v1alpha1.NodeScript{TypeMeta: ns.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion}}
	if ref.Kind == "" {
		ref.APIVersion, ref.Kind = v1alpha1.GroupVersion.String(), "NodeScript"
	}
	var out []*delivery
	for _, t := range ns.Spec.Notify {
		wh := t.Webhook
		if wh == nil || (len(wh.Events) > 0 && !slices.Contains(wh.Events, p.Event)) || (want != nil && !want(wh.URL)) {
			continue
		}
		sum := sha256.Sum256([]byte(strings.Join([]string{p.NodeScript, p.SpecHash, p.Event, p.Node, p.Time.Format(time.RFC3339Nano), wh.URL}, "\x00")))
		out = append(out, &delivery{
			ref: ref, namespace: nodescript.RunNamespace(&ns.Spec), url: wh.URL, event: p.Event, node: p.Node, hash: p.SpecHash,
			secret: wh.SecretRef, body: body, id: hex.EncodeToString(sum[:16]),
		})
	}
	return out
}

func countsOf(c phaseCounts) NotificationCounts {
	return NotificationCounts{Nodes: c.Nodes, Pending: c.Pending, Running: c.Running, Succeeded: c.Succeeded,
		Failed: c.Failed, RolledBack: c.RolledBack, NotNeeded: c.NotNeeded}
}

// notifyStatus is status's part for spec.notify: it detects the rollout
// events of this reconcile (Started: the first node of hash starts;
// Halted, Completed: the stage becomes so), marks them sent in
// st.Notifications for each target that wants them and has not been sent
// them for hash, merges the worker's outcomes, and returns the deliveries
// to enqueue once st is written (so that an event whose status write
// failed is detected again, and one written is never sent again: at most
// once).
func (c *controller) notifyStatus(ns *v1alpha1.NodeScript, st *v1alpha1.NodeScriptStatus, d decision, hash string, now time.Time) (out notes) {
	out = notes{name: ns.Name}
	if c.notify != nil {
		c.notify.mu.Lock()
		failed := c.notify.failed[ns.Name]
		delete(c.notify.failed, ns.Name)
		c.notify.mu.Unlock()
		for _, p := range failed {
			p.Stage, p.Counts = d.Stage, countsOf(d.Counts)
			out.failed = append(out.failed, deliveries(ns, p, nil)...)
		}
	}
	if len(ns.Spec.Notify) == 0 {
		st.Notifications = nil
		return out
	}
	var events []NotificationPayload
	base := NotificationPayload{APIVersion: v1alpha1.NotificationAPIVersion, Kind: v1alpha1.NotificationKind, NodeScript: ns.Name, SpecHash: hash,
		Stage: d.Stage, Counts: countsOf(d.Counts), Time: now.UTC()}
	if k := d.Counts; len(d.Start) > 0 && k.Running+k.Succeeded+k.Failed+k.RolledBack+k.NotNeeded == 0 {
		p := base
		p.Event, p.Node = v1alpha1.NotifyStarted, d.Start[0]
		p.Message = fmt.Sprintf("the rollout of spec %s started: %d node(s) starting (%s first), %d selected", hash, len(d.Start), d.Start[0], d.Counts.Nodes)
		events = append(events, p)
	}
	if d.Stage != ns.Status.Stage {
		switch d.Stage {
		case v1alpha1.StageHalted:
			p := base
			p.Event, p.Message = v1alpha1.NotifyHalted, d.HaltReason
			events = append(events, p)
		case v1alpha1.StageComplete:
			p := base
			p.Event = v1alpha1.NotifyCompleted
			if cond := findCond(st.Conditions, v1alpha1.ConditionComplete); cond != nil {
				p.Message = cond.Message
			}
			events = append(events, p)
		}
	}
	c.mergeOutcomes(ns, st)
	defer func() {
		out.sent = sentRecord{hash: st.SpecHash, byURL: map[string][]string{}}
		for _, e := range st.Notifications {
			out.sent.byURL[e.URL] = slices.Clone(e.Sent)
		}
	}()
	for _, p := range events {
		out.rollout = append(out.rollout, deliveries(ns, p, func(url string) bool {
			for i := range st.Notifications {
				e := &st.Notifications[i]
				if e.URL != url {
					continue
				}
				if slices.Contains(e.Sent, p.Event) {
					return false
				}
				e.Sent = append(e.Sent, p.Event)
				return true
			}
			return false
		})...)
	}
	return out
}

// notifyWritten queues ns's notes after its status write, whose error is
// err: NodeFailed always, the rollout events only when the status (which
// marks them sent) was written.
func (c *controller) notifyWritten(n notes, err error) {
	if c.notify == nil {
		return
	}
	c.notify.enqueue(n.failed)
	if err == nil {
		if n.sent.byURL != nil {
			c.notify.mu.Lock()
			c.notify.sent[n.name] = n.sent
			c.notify.mu.Unlock()
		}
		c.notify.enqueue(n.rollout)
	}
}

// mergeOutcomes rebuilds st.Notifications: one entry per target of
// spec.notify (in its order), Sent reset when the spec hash changed, and
// the worker's outcomes applied.
func (c *controller) mergeOutcomes(ns *v1alpha1.NodeScript, st *v1alpha1.NodeScriptStatus) {
	var (
		byURL map[string]outcome
		sent  sentRecord
	)
	if c.notify != nil {
		c.notify.mu.Lock()
		byURL = map[string]outcome{}
		for u, o := range c.notify.outcomes[ns.Name] {
			byURL[u] = *o
		}
		sent = c.notify.sent[ns.Name]
		c.notify.mu.Unlock()
	}
	prev := st.Notifications
	st.Notifications = nil
	for _, t := range ns.Spec.Notify {
		if t.Webhook == nil {
			continue
		}
		e := v1alpha1.NotificationStatus{URL: t.Webhook.URL}
		for _, p := range prev {
			if p.URL == e.URL {
				e = *p.DeepCopy()
			}
		}
		if e.SpecHash != st.SpecHash {
			e.SpecHash, e.Sent = st.SpecHash, nil
		}
		if sent.hash == e.SpecHash {
			for _, ev := range sent.byURL[e.URL] {
				if !slices.Contains(e.Sent, ev) {
					e.Sent = append(e.Sent, ev)
				}
			}
		}
		if o, ok := byURL[e.URL]; ok {
			if o.delivered {
				e.LastEvent, e.LastNode, e.LastSpecHash, e.LastDelivered = o.st.LastEvent, o.st.LastNode, o.st.LastSpecHash, o.st.LastDelivered
			}
			if o.errored {
				e.LastError, e.LastErrorTime = o.st.LastError, o.st.LastErrorTime
			}
		}
		st.Notifications = append(st.Notifications, e)
	}
}

// notifyNodeFailed is finish's part for spec.notify: once the outcome of a
// run, verify or check pod is recorded, a node whose state is now Failed
// is sent NodeFailed: the script's (or verify's, or check's) failure, or
// an infrastructure failure past spec.retry.limit (one with retries left
// is retried, and sent only when its last retry fails).
// finish records a pod's outcome once (its state names the pod), so the
// event is detected once; it is queued by the status write that follows,
// with the rollout's stage and counts then (which count this failure).
func (c *controller) notifyNodeFailed(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, action, msg string, now time.Time) {
	if c.notify == nil || len(ns.Spec.Notify) == 0 || (action != v1alpha1.ActionRun && action != v1alpha1.ActionVerify && action != v1alpha1.ActionCheck) {
		return
	}
	s, ok := c.w.state(ctx, ns.Name, n)
	limit := int(*v1alpha1.Defaulted(ns).Spec.Retry.Limit)
	if !ok || s.Phase != v1alpha1.PhaseFailed || (s.Infrastructure && s.Attempts-s.AttemptsBefore <= limit) {
		return // not failed, or an infrastructure failure Decide retries
	}
	p := NotificationPayload{APIVersion: v1alpha1.NotificationAPIVersion, Kind: v1alpha1.NotificationKind, Event: v1alpha1.NotifyNodeFailed,
		NodeScript: ns.Name, SpecHash: s.Hash, Node: n.Name, Message: msg, Time: now.UTC()}
	if s.Message != "" && !strings.Contains(msg, s.Message) {
		p.Message += ": " + s.Message
	}
	c.notify.mu.Lock()
	c.notify.failed[ns.Name] = append(c.notify.failed[ns.Name], p)
	c.notify.mu.Unlock()
}

func findCond(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
