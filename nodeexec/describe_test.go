package nodeexec_test

import (
	"context"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

type plain struct{}

func (plain) Name() string { return "plain" }
func (plain) Run(context.Context, nodeexec.Request) (nodeexec.Result, error) {
	return nodeexec.Result{}, nil
}

type rooted struct{ plain }

func (rooted) HostRoot() string { return "/host" }

type wrapper struct {
	plain
	inner nodeexec.Backend
}

func (w wrapper) Unwrap() nodeexec.Backend { return w.inner }

func TestAs(t *testing.T) {
	if h, ok := nodeexec.As[nodeexec.HostRooter](wrapper{inner: wrapper{inner: rooted{}}}); !ok || h.HostRoot() != "/host" {
		t.Errorf("through two wrappers: %v %v", h, ok)
	}
	if _, ok := nodeexec.As[nodeexec.HostRooter](wrapper{inner: plain{}}); ok {
		t.Error("found an interface nobody implements")
	}
	if _, ok := nodeexec.As[nodeexec.HostRooter](nil); ok {
		t.Error("found an interface on nil")
	}
	if _, ok := nodeexec.As[nodeexec.Wrapper](wrapper{inner: nil}); !ok {
		t.Error("the wrapper itself is searched first")
	}
	if _, ok := nodeexec.As[nodeexec.HostRooter](wrapper{inner: nil}); ok {
		t.Error("a wrapper of nothing")
	}
}
