package cli

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintNotifications(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	var b bytes.Buffer
	printNotifications(&b, []v1alpha1.NotificationStatus{
		{URL: "https://a.example/h", Sent: []string{"Started", "Halted"}, LastEvent: "NodeFailed", LastNode: "n1", LastDelivered: at(time.Minute)},
		{URL: "http://down:8080", LastError: "Started: connection refused (attempt 8 of 8; giving up)", LastErrorTime: at(2 * time.Second)},
	}, now)
	want := "notify https://a.example/h: sent Started,Halted; delivered NodeFailed (n1) 1m0s ago\n" +
		"notify http://down:8080: sent -; failed 2s ago: Started: connection refused (attempt 8 of 8; giving up)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
