package nodeexec

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/clock"
)

// What client-go already does with a 429 Too Many Requests (API Priority
// and Fairness, or max-in-flight) for each call a run makes, and what
// nodeexec adds:
//
//   - create, get, delete, list, patch (pods, leases, nodes...) and the
//     pods watch: rest.Request retries a 429 that carries Retry-After (APF
//     always sends it) after that many seconds, up to 10 times, rewinding
//     the request body; nodeexec relies on that.
//   - the exec, attach and port-forward upgrades (WebSocket, then SPDY):
//     not retried by client-go. A 429 on the WebSocket upgrade even makes
//     the fallback executor switch to SPDY, whose POST is throttled in turn
//     and fails the node. UpgradeRetries covers them.
//   - the client-side rate limiter (RESTConfig's QPS and Burst) makes
//     requests wait; it never turns into an error before the request's own
//     deadline.

// MaxUpgradeRetries is how often UpgradeRetries retries one streaming
// upgrade refused with 429, as client-go retries its other requests.
const MaxUpgradeRetries = 10

// DefaultUpgradeRetryAfter is the pause before retrying a streaming
// upgrade refused with 429 that says neither a Retry-After header nor a
// retryAfterSeconds in its Status.
const DefaultUpgradeRetryAfter = time.Second

// maxUpgradeRetryAfter caps one pause, whatever the server asks.
const maxUpgradeRetryAfter = 30 * time.Second

// UpgradeRetries wraps rt (for rest.Config.Wrap) so that a streaming
// upgrade (exec, attach, port-forward: a request with a WebSocket or SPDY
// protocol header) refused with 429 Too Many Requests is retried after the
// server's Retry-After (DefaultUpgradeRetryAfter when it gives none, at
// most 30 s), up to MaxUpgradeRetries times, until the request's context
// ends; the last refusal is returned as it came. Other requests pass
// through: client-go retries those itself. ClientOptions.RESTConfig
// installs it.
func UpgradeRetries(rt http.RoundTripper) http.RoundTripper {
	return &upgradeRetrier{rt: rt, clock: clock.RealClock{}}
}

type upgradeRetrier struct {
	rt    http.RoundTripper
	clock clock.Clock
}

var _ http.RoundTripper = (*upgradeRetrier)(nil)

// isUpgrade reports whether req asks for a streaming protocol: WebSocket
// (Sec-WebSocket-Protocol, set before the dial) or SPDY
// (X-Stream-Protocol-Version), with no body to resend.
func isUpgrade(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	return req.Header.Get("Sec-WebSocket-Protocol") != "" || req.Header.Get("X-Stream-Protocol-Version") != "" ||
		strings.EqualFold(req.Header.Get("Upgrade"), "websocket") || strings.HasPrefix(strings.ToUpper(req.Header.Get("Upgrade")), "SPDY")
}

func (u *upgradeRetrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isUpgrade(req) {
		return u.rt.RoundTrip(req)
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		// The WebSocket round tripper edits the request it is given
		// (scheme, protocol header): every attempt gets a fresh copy.
		resp, err := u.rt.RoundTrip(req.Clone(ctx))
		wait, throttled := tooManyRequests(resp, err)
		if !throttled || attempt >= MaxUpgradeRetries {
			return resp, err
		}
		if resp != nil && resp.Body != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}
		select {
		case <-u.clock.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tooManyRequests reports whether an upgrade's outcome is a 429 and how
// long the server asked to wait: from the response (SPDY, and any plain
// HTTP round tripper) or from the WebSocket round tripper's
// UpgradeFailureError, whose cause is the server's Status.
func tooManyRequests(resp *http.Response, err error) (time.Duration, bool) {
	if err == nil {
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			return 0, false
		}
		return retryAfter(resp.Header.Get("Retry-After"), 0), true
	}
	// client-go's WebSocket round tripper returns k8s.io/streaming's
	// UpgradeFailureError, which does not unwrap to its cause.
	var ue *httpstream.UpgradeFailureError
	if errors.As(err, &ue) && ue.Cause != nil {
		err = ue.Cause
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.Status().Code == http.StatusTooManyRequests {
		secs := 0
		if d := se.Status().Details; d != nil {
			secs = int(d.RetryAfterSeconds)
		}
		return retryAfter("", secs), true
	}
	if ue != nil && strings.Contains(err.Error(), "429 Too Many Requests") {
		return DefaultUpgradeRetryAfter, true
	}
	return 0, false
}

// retryAfter is the pause a Retry-After header (seconds) or a Status's
// retryAfterSeconds asks for; DefaultUpgradeRetryAfter when neither says.
func retryAfter(header string, secs int) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(header)); err == nil && n >= 0 {
		secs = n
	} else if secs <= 0 {
		return DefaultUpgradeRetryAfter
	}
	return min(time.Duration(secs)*time.Second, maxUpgradeRetryAfter)
}
