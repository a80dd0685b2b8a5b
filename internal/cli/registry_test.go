package cli

import (
	"io"
	"slices"
	"testing"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestEveryBackend runs every registered backend through the command
// line: its flags parse, pass checkBackendFlags and the target check, and
// build the backend (flags → options → New) without the API server; the
// built backend's name is the entry's; the watcher may run exactly the
// backends v1alpha1 (and so the CRD, TestCommittedCRDEnum) accepts.
func TestEveryBackend(t *testing.T) {
	entries := backends.Entries()
	if got := backendNames(); !slices.Equal(got, backends.Names()) || len(got) != len(entries) {
		t.Fatalf("--backend values %v, table %v", got, backends.Names())
	}
	for _, e := range entries {
		t.Run(e.Name, func(t *testing.T) {
			args := []string{"--backend", e.Name}
			targets := backends.TargetFlags{Nodes: []string{"n1"}}
			if e.Target == backends.TargetContainer {
				args = append(args, "--pod", "apps/web-1", "--container", "app")
				targets = backends.TargetFlags{}
			}
			var built nodeexec.Backend
			app := &ucli.App{Name: "t", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*ucli.Command{{
				Name: "run", Flags: backendFlags(""),
				Action: func(c *ucli.Context) error {
					if err := checkBackendFlags(c); err != nil {
						t.Fatalf("checkBackendFlags: %v", err)
					}
					if err := checkBackendTargets(c, targets); err != nil {
						t.Fatalf("checkBackendTargets: %v", err)
					}
					b, err := newBackend(c, fake.NewClientset(), &rest.Config{Host: "https://127.0.0.1:1"}, "ops")
					if err != nil {
						t.Fatalf("newBackend: %v", err)
					}
					built = b
					return nil
				},
			}}}
			if err := app.Run(append([]string{"t", "run"}, args...)); err != nil {
				t.Fatal(err)
			}
			if built.Name() != e.Name {
				t.Errorf("--backend %s built %s", e.Name, built.Name())
			}
			if got := slices.Contains(v1alpha1.Backends(), e.Name); got != e.RunToCompletion {
				t.Errorf("v1alpha1 accepts %s: %v, RunToCompletion %v", e.Name, got, e.RunToCompletion)
			}
			if !slices.Contains([]string{"image", "agent-image"}, e.ImageFlag) || e.DefaultImage == "" || e.Build == nil {
				t.Errorf("entry %s: image flag %q, default image %q, Build set %v", e.Name, e.ImageFlag, e.DefaultImage, e.Build != nil)
			}
			for _, f := range e.Flags {
				if !slices.ContainsFunc(backends.Flags(), func(bf backends.Flag) bool { return bf.Name == f }) {
					t.Errorf("entry %s reads --%s, which backends.Flags lacks", e.Name, f)
				}
			}
			if !e.RunToCompletion {
				if _, err := backends.NewNode(backends.NodeOptions{Name: e.Name, Client: fake.NewClientset()}); err == nil {
					t.Errorf("NewNode(%s): built a backend the watcher may not run", e.Name)
				}
				return
			}
			b, err := backends.NewNode(backends.NodeOptions{Name: e.Name, Client: fake.NewClientset()})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := nodeexec.As[nodeexec.CompletionPodBuilder](b); !ok || b.Name() != e.Name {
				t.Errorf("NewNode(%s): %s, CompletionPodBuilder %v", e.Name, b.Name(), ok)
			}
			if img, err := backends.DefaultImage(e.Name); err != nil || img != e.DefaultImage {
				t.Errorf("DefaultImage(%s) = %q, %v; entry %q", e.Name, img, err, e.DefaultImage)
			}
		})
	}
}
