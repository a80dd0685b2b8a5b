package watcher

import (
	"net/url"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// FuzzWebhookURL: ValidateWebhookURL never panics, and a URL it accepts
// is one net/http can POST to (absolute, http or https, with a host).
func FuzzWebhookURL(f *testing.F) {
	for _, s := range []string{"https://hooks.example/x", "http://a:8080/h?q=1", "/rel", "ftp://x", "https://u:p@h/", "https://h/#f", "http://[::1]:80/", "http://%zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if v1alpha1.ValidateWebhookURL(raw) != "" {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("accepted %q: %v %+v", raw, err, u)
		}
		_ = Sign([]byte(raw), []byte(raw))
	})
}
