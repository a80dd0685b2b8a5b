package crdenum

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// crdFiles are the committed copies of the NodeScript CRD.
var crdFiles = []string{"../../deploy/crd/nodeexec.io_nodescripts.yaml", "../../charts/nodeexec/crds/nodeexec.io_nodescripts.yaml"}

// backendEnum reads spec.backend.name's enum of every version of crd.
func backendEnum(t *testing.T, crd []byte) [][]string {
	t.Helper()
	var doc struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									Backend struct {
										Properties struct {
											Name struct {
												Enum []string `json:"enum"`
											} `json:"name"`
										} `json:"properties"`
									} `json:"backend"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(crd, &doc); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, v := range doc.Spec.Versions {
		out = append(out, v.Schema.OpenAPIV3Schema.Properties.Spec.Properties.Backend.Properties.Name.Enum)
	}
	return out
}

// TestCommittedCRDEnum pins the committed CRDs' spec.backend.name enum to
// the registration table: `make generate` writes it.
func TestCommittedCRDEnum(t *testing.T) {
	want := backends.WatcherNames()
	if len(want) == 0 {
		t.Fatal("no backend the watcher may run")
	}
	for _, f := range crdFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		enums := backendEnum(t, b)
		if len(enums) == 0 {
			t.Fatalf("%s: no version", f)
		}
		for _, got := range enums {
			if !slices.Equal(got, want) {
				t.Errorf("%s: spec.backend.name enum %v, the table says %v: run make generate", f, got, want)
			}
		}
		patched, err := Patch(b, want)
		if err != nil {
			t.Fatal(err)
		}
		if string(patched) != string(b) {
			t.Errorf("%s: Patch changes the committed CRD: run make generate", f)
		}
	}
}

// TestPatch: an enum is inserted where controller-gen's sorted keys put it,
// replaced when there, and nothing else changes.
func TestPatch(t *testing.T) {
	const without = `spec:
  versions:
  - schema:
      openAPIV3Schema:
        properties:
          spec:
            properties:
              backend:
                properties:
                  name:
                    description: |-
                      Name of the backend.
                    type: string
                  profile:
                    enum:
                    - a
                    type: string
                type: object
`
	want := strings.Replace(without, "                      Name of the backend.\n", "                      Name of the backend.\n                    enum:\n                    - x\n                    - y\n", 1)
	got, err := Patch([]byte(without), []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("Patch:\n%s\nwant:\n%s", got, want)
	}
	again, err := Patch(got, []string{"z"})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Replace(without, "                      Name of the backend.\n", "                      Name of the backend.\n                    enum:\n                    - z\n", 1); string(again) != w {
		t.Errorf("Patch over an enum:\n%s\nwant:\n%s", again, w)
	}
	if _, err := Patch([]byte("spec: {}\n"), []string{"x"}); err == nil {
		t.Error("Patch of a CRD without spec.backend.name: no error")
	}
}
