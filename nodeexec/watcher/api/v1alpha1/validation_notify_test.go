package v1alpha1

import (
	"strings"
	"testing"
)

func TestValidateNotify(t *testing.T) {
	hook := func(url string, events ...string) Notification {
		return Notification{Webhook: &WebhookNotification{URL: url, Events: events}}
	}
	signed := func(name, key string) Notification {
		n := hook("https://hooks.example/x")
		n.Webhook.SecretRef = &NotifySecretRef{Name: name, Key: key}
		return n
	}
	tests := map[string]struct {
		notify []Notification
		want   string // "" = valid
	}{
		"https all events":   {[]Notification{hook("https://hooks.example/nodeexec")}, ""},
		"http some events":   {[]Notification{hook("http://receiver.ops.svc:8080/hook?team=a", "Halted", "NodeFailed")}, ""},
		"signed":             {[]Notification{signed("hooks", "hmac")}, ""},
		"two targets":        {[]Notification{hook("https://a.example"), hook("https://b.example")}, ""},
		"no webhook":         {[]Notification{{}}, "spec.notify[0].webhook: Required value"},
		"no url":             {[]Notification{hook("")}, "spec.notify[0].webhook.url: Required value"},
		"relative url":       {[]Notification{hook("/hook")}, "spec.notify[0].webhook.url: Invalid value"},
		"ftp url":            {[]Notification{hook("ftp://hooks.example/x")}, "want an absolute http:// or https:// URL"},
		"no host":            {[]Notification{hook("https:///x")}, "no host"},
		"user info":          {[]Notification{hook("https://u:p@hooks.example/x")}, "user info"},
		"fragment":           {[]Notification{hook("https://hooks.example/x#y")}, "fragment"},
		"duplicate url":      {[]Notification{hook("https://a.example"), hook("https://a.example")}, "spec.notify[1].webhook.url: Duplicate value"},
		"unknown event":      {[]Notification{hook("https://a.example", "Started", "Finished")}, `spec.notify[0].webhook.events[1]: Unsupported value: "Finished"`},
		"duplicate event":    {[]Notification{hook("https://a.example", "Halted", "Halted")}, "spec.notify[0].webhook.events[1]: Duplicate value"},
		"secretRef no key":   {[]Notification{signed("hooks", "")}, "spec.notify[0].webhook.secretRef.key: Required value"},
		"secretRef no name":  {[]Notification{signed("", "hmac")}, "spec.notify[0].webhook.secretRef.name: Required value"},
		"secretRef bad name": {[]Notification{signed("Hooks!", "hmac")}, "spec.notify[0].webhook.secretRef.name: Invalid value"},
		"secretRef bad key":  {[]Notification{signed("hooks", "a/b")}, "spec.notify[0].webhook.secretRef.key: Invalid value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := &NodeScript{Spec: NodeScriptSpec{Script: "true", Notify: tc.notify}}
			errs := Validate(ns)
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", got, tc.want)
			}
		})
	}
}
