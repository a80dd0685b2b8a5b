package podexec_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// TestUpstreamCutStreamIsSuccess reproduces, with client-go and
// apimachinery alone (no nodeexec code), why an exec can end with exit 0
// and the tail of its output missing (kubernetes/kubernetes#124571,
// kubernetes/kubectl#1208): a kubelet-like server streams 1 MiB of stdout
// and then its Success status over SPDY (remotecommand v4), and the TCP
// connection is cut on the way. The SPDY library takes the dropped
// connection as the end of every stream (moby/spdystream closes their
// channels: a read returns io.EOF), so client-go reads an empty error
// stream, which it takes for success: StreamWithContext returns nil with
// part of the output. The API server's WebSocket translator runs this very
// client towards the kubelet and then sends its outcome, Success, to
// kubectl or nodeexec: a connection to the kubelet dropped mid-stream
// reaches them as a success. This test pins that behaviour; when it fails,
// client-go has started to report the cut, and the README's account of
// the truncations must be revisited. The agent's end mark (package
// nodeexec/spool) is what nodeexec relies on instead.
func TestUpstreamCutStreamIsSuccess(t *testing.T) {
	const total = 1 << 20
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, err := httpstream.Handshake(req, w, []string{"v4.channel.k8s.io"}); err != nil {
			return
		}
		streams := make(chan httpstream.Stream, 4)
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, _ <-chan struct{}) error {
			streams <- s
			return nil
		})
		if conn == nil {
			return
		}
		defer conn.Close()
		var stdout, errStream httpstream.Stream
		for stdout == nil || errStream == nil {
			select {
			case s := <-streams:
				switch s.Headers().Get("streamType") {
				case "stdout":
					stdout = s
				case "error":
					errStream = s
				}
			case <-time.After(5 * time.Second):
				return
			}
		}
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for n := 0; n < total; n += len(chunk) {
			if _, err := stdout.Write(chunk); err != nil {
				return
			}
		}
		stdout.Close()
		_, _ = errStream.Write([]byte(`{"metadata":{},"status":"Success"}`))
		errStream.Close()
		<-conn.CloseChan()
	}))
	defer kubelet.Close()

	// Between client and server, a connection that drops after 256 KiB
	// from the server.
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		client, err := proxy.Accept()
		if err != nil {
			return
		}
		defer client.Close()
		server, err := net.Dial("tcp", strings.TrimPrefix(kubelet.URL, "http://"))
		if err != nil {
			return
		}
		defer server.Close()
		go func() { _, _ = io.Copy(server, client) }()
		_, _ = io.CopyN(client, server, 256<<10)
		// The cut: both sides of the connection closed, no more frames.
	})

	u, err := url.Parse("http://" + proxy.Addr().String() + "/api/v1/namespaces/default/pods/p/exec?command=x&stdout=true")
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: "http://" + proxy.Addr().String()}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = exec.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdout: &out})
	if out.Len() >= total {
		t.Fatalf("received all %d bytes: the connection was not cut", out.Len())
	}
	if err != nil {
		t.Fatalf("client-go reported the cut (%v) after %d of %d bytes: the upstream behaviour changed", err, out.Len(), total)
	}
	t.Logf("client-go: StreamWithContext returned nil (success) with %d of %d bytes", out.Len(), total)
}
