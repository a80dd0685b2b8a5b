package v1alpha1

import (
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateNotify checks spec.notify: each target a webhook with an
// absolute http(s) URL (no user info, no fragment), unique; a secretRef
// with a Secret name and a key; events among NotifyEvents, each once.
func validateNotify(p *field.Path, targets []Notification) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, t := range targets {
		tp := p.Index(i)
		if t.Webhook == nil {
			errs = append(errs, field.Required(tp.Child("webhook"), "give webhook: {url: https://..., events: [Started, NodeFailed, Halted, Completed]}"))
			continue
		}
		wp, wh := tp.Child("webhook"), t.Webhook
		if err := ValidateWebhookURL(wh.URL); err != "" {
			if wh.URL == "" {
				errs = append(errs, field.Required(wp.Child("url"), err))
			} else {
				errs = append(errs, field.Invalid(wp.Child("url"), wh.URL, err))
			}
		} else if seen[wh.URL] {
			errs = append(errs, field.Duplicate(wp.Child("url"), wh.URL))
		}
		seen[wh.URL] = true
		if r := wh.SecretRef; r != nil {
			rp := wp.Child("secretRef")
			if msgs := validation.IsDNS1123Subdomain(r.Name); r.Name == "" {
				errs = append(errs, field.Required(rp.Child("name"), "name a Secret in spec.backend.namespace holding the HMAC key"))
			} else if len(msgs) > 0 {
				errs = append(errs, field.Invalid(rp.Child("name"), r.Name, strings.Join(msgs, "; ")+": name a Secret in spec.backend.namespace"))
			}
			if msgs := validation.IsConfigMapKey(r.Key); r.Key == "" {
				errs = append(errs, field.Required(rp.Child("key"), "name the key of Secret "+r.Name+" whose value is the HMAC key"))
			} else if len(msgs) > 0 {
				errs = append(errs, field.Invalid(rp.Child("key"), r.Key, strings.Join(msgs, "; ")))
			}
		}
		seenEv := map[string]bool{}
		for j, e := range wh.Events {
			ep := wp.Child("events").Index(j)
			switch {
			case !slices.Contains(NotifyEvents(), e):
				errs = append(errs, field.NotSupported(ep, e, NotifyEvents()))
			case seenEv[e]:
				errs = append(errs, field.Duplicate(ep, e))
			}
			seenEv[e] = true
		}
	}
	return errs
}

// ValidateWebhookURL returns why raw is not a usable webhook URL (an
// absolute http:// or https:// URL with a host, without user info or
// fragment), or "" when it is.
func ValidateWebhookURL(raw string) string {
	if raw == "" {
		return "give the receiver's URL, e.g. https://hooks.example.com/nodeexec"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "not a URL: " + err.Error()
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an absolute http:// or https:// URL, e.g. https://hooks.example.com/nodeexec"
	case u.Host == "" || u.Hostname() == "":
		return "no host: want e.g. https://hooks.example.com/nodeexec"
	case u.User != nil:
		return "user info in the URL would be stored in the spec: drop it (sign with secretRef instead)"
	case u.Fragment != "":
		return "a fragment is never sent: drop it"
	}
	return ""
}
