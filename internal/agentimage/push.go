package agentimage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Errors of Push, by cause; the returned error wraps one of them and the
// registry's own message.
var (
	// ErrUnauthorized: the registry wants credentials it did not get, or
	// refused the ones it got (HTTP 401).
	ErrUnauthorized = errors.New("the registry refused the credentials (or none were found)")
	// ErrDenied: the credentials were accepted but may not push to the
	// repository (HTTP 403).
	ErrDenied = errors.New("the registry denied the push to this repository")
	// ErrUnreachable: no connection to the registry (DNS, refused, timeout).
	ErrUnreachable = errors.New("cannot reach the registry")
	// ErrUntrusted: the registry's TLS certificate is not trusted.
	ErrUntrusted = errors.New("the registry's TLS certificate is not trusted")
)

// ParseTag parses s (REGISTRY/REPOSITORY[:TAG]) as go-containerregistry
// does, with defaultTag when s has none. A digest (@sha256:...) is refused:
// the digest is the result of the push, not its input.
func ParseTag(s, defaultTag string) (name.Tag, error) {
	if s == "" {
		return name.Tag{}, errors.New("no image reference: give REGISTRY/REPOSITORY[:TAG], e.g. registry.example.com/nodeexec")
	}
	if _, err := name.NewDigest(s); err == nil {
		return name.Tag{}, fmt.Errorf("%q is a digest reference: give a tag (REGISTRY/REPOSITORY[:TAG]); the digest is printed after the push", s)
	}
	t, err := name.NewTag(s, name.WithDefaultTag(defaultTag))
	if err != nil {
		return name.Tag{}, fmt.Errorf("%q is not a valid image reference (REGISTRY/REPOSITORY[:TAG], lowercase repository): %w", s, err)
	}
	return t, nil
}

// Push uploads img to the registry of tag and tags it there, with the
// credentials keychain finds for that registry (authn.DefaultKeychain reads
// ~/.docker/config.json or $DOCKER_CONFIG/config.json, including credential
// helpers), and returns the digest reference REPOSITORY@sha256:.... opts
// are added to remote.Write's (e.g. remote.WithTransport). The error wraps
// ErrUnauthorized, ErrDenied, ErrUnreachable or ErrUntrusted when that is
// the cause, else go-containerregistry's.
func Push(ctx context.Context, img v1.Image, tag name.Tag, keychain authn.Keychain, opts ...remote.Option) (name.Digest, error) {
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("agentimage: %w", err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain), remote.WithUserAgent("nodeexec")}, opts...)
	if err := remote.Write(tag, img, opts...); err != nil {
		return name.Digest{}, classify(tag.RegistryStr(), err)
	}
	return tag.Context().Digest(d.String()), nil
}

// classify wraps a push error with the sentinel of its cause.
func classify(registry string, err error) error {
	what := "push to " + registry
	switch registryFault(err) {
	case ErrUnauthorized:
		return fmt.Errorf("%s: %w: log in with `docker login %s` (or put its credentials in $DOCKER_CONFIG/config.json): %w", what, ErrUnauthorized, registry, err)
	case ErrDenied:
		return fmt.Errorf("%s: %w: check the account's rights on the repository: %w", what, ErrDenied, err)
	case ErrUntrusted:
		return fmt.Errorf("%s: %w: add its CA to the system's trust store or point SSL_CERT_FILE at it: %w", what, ErrUntrusted, err)
	case ErrUnreachable:
		return fmt.Errorf("%s: %w: check the name and port and that it is up: %w", what, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// registryFault is the sentinel of a registry error's cause, or nil:
// ErrUnauthorized (HTTP 401), ErrDenied (403), ErrImageNotFound (404),
// ErrUntrusted (the server's certificate), ErrUnreachable (network, DNS,
// a timeout).
func registryFault(err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized:
			return ErrUnauthorized
		case http.StatusForbidden:
			return ErrDenied
		case http.StatusNotFound:
			return ErrImageNotFound
		}
	}
	var ua x509.UnknownAuthorityError
	var cv *tls.CertificateVerificationError
	var hn x509.HostnameError
	if errors.As(err, &ua) || errors.As(err, &cv) || errors.As(err, &hn) {
		return ErrUntrusted
	}
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	if errors.As(err, &oe) || errors.As(err, &de) || (errors.As(err, &ne) && ne.Timeout()) {
		return ErrUnreachable
	}
	return nil
}

// Importer loads a docker-archive tarball into every node of a cluster:
// (*testcluster.Cluster).ImportImage.
type Importer interface {
	ImportImage(ctx context.Context, tarball string) error
}

// Import writes img under each of refs to a docker-archive tarball and
// imports it into every node of c.
func Import(ctx context.Context, c Importer, img v1.Image, refs ...string) error {
	if len(refs) == 0 {
		return errors.New("agentimage: no image name to import under")
	}
	named := map[name.Reference]v1.Image{}
	for _, r := range refs {
		t, err := name.NewTag(r)
		if err != nil {
			return fmt.Errorf("agentimage: %w", err)
		}
		named[t] = img
	}
	tmp, err := os.MkdirTemp("", "nodeexec-agent-image-")
	if err != nil {
		return fmt.Errorf("agentimage: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "image.tar")
	if err := tarball.MultiRefWriteToFile(out, named); err != nil {
		return fmt.Errorf("agentimage: writing %s: %w", out, err)
	}
	if err := c.ImportImage(ctx, out); err != nil {
		return fmt.Errorf("agentimage: import %v: %w", refs, err)
	}
	return nil
}
