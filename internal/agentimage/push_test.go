package agentimage

import (
	"debug/elf"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestParseTag(t *testing.T) {
	tests := map[string]struct{ in, want, wantErr string }{
		"default tag":   {in: "registry.example.com/team/nodeexec", want: "registry.example.com/team/nodeexec:0.1.0"},
		"explicit tag":  {in: "localhost:5000/nodeexec:v2", want: "localhost:5000/nodeexec:v2"},
		"uppercase":     {in: "registry.example.com/NodeExec", wantErr: "not a valid image reference"},
		"digest":        {in: "registry.example.com/nodeexec@sha256:" + strings.Repeat("a", 64), wantErr: "digest reference"},
		"empty":         {in: "", wantErr: "no image reference"},
		"bad character": {in: "registry.example.com/node exec", wantErr: "not a valid image reference"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTag(tt.in, "0.1.0")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTag(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Name() != tt.want {
				t.Fatalf("ParseTag(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

// basicAuth wraps h so that it wants user:pass, as a registry with htpasswd.
func basicAuth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "pass" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

type staticKeychain struct{ auth authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.auth, nil }

func TestPush(t *testing.T) {
	srv := httptest.NewServer(basicAuth(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := Image(Binaries{Nodeexec: fakeELF(elf.EM_X86_64, false, "agent")})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	tag, err := ParseTag(host+"/nodeexec", "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	good := staticKeychain{&authn.Basic{Username: "user", Password: "pass"}}

	ref, err := Push(t.Context(), img, tag, good)
	if err != nil {
		t.Fatal(err)
	}
	if ref.String() != host+"/nodeexec@"+want.String() {
		t.Errorf("Push = %s, want %s/nodeexec@%s", ref, host, want)
	}
	got, err := remote.Get(ref, remote.WithAuthFromKeychain(good))
	if err != nil || got.Digest != want {
		t.Errorf("the registry has %v (%v), want %s", got, err, want)
	}

	for name, kc := range map[string]authn.Keychain{
		"no credentials":    authn.NewMultiKeychain(),
		"wrong credentials": staticKeychain{&authn.Basic{Username: "user", Password: "nope"}},
	} {
		_, err := Push(t.Context(), img, tag, kc)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "docker login "+host) {
			t.Errorf("%s: Push error = %v, want ErrUnauthorized naming `docker login %s`", name, err, host)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	down, _ := name.NewTag(closed + "/nodeexec:0.1.0")
	if _, err := Push(t.Context(), img, down, good); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Push to a closed port: %v, want ErrUnreachable", err)
	}

	tlsSrv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer tlsSrv.Close()
	untrusted, _ := name.NewTag(strings.TrimPrefix(tlsSrv.URL, "https://") + "/nodeexec:0.1.0")
	if _, err := Push(t.Context(), img, untrusted, good); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "SSL_CERT_FILE") {
		t.Errorf("Push to a registry with an unknown CA: %v, want ErrUntrusted naming SSL_CERT_FILE", err)
	}
}
