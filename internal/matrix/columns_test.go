package matrix

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseColumns(t *testing.T) {
	got, err := ParseColumns("-columns", " 1.37.1/debian, v1.37.1/2.3.7,1.34.4/v2.3.7 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []Column{{"1.37.1", "debian"}, {"1.37.1", "2.3.7"}, {"1.34.4", "2.3.7"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if s := got[0].String(); s != "1.37.1/debian" {
		t.Errorf("String() = %q", s)
	}
	if a := strings.Join(got[0].UpArgs(), " "); a != "--kubernetes-version 1.37.1" {
		t.Errorf("UpArgs of the debian column = %q: no --containerd-version wanted", a)
	}
	if a := strings.Join(got[2].UpArgs(), " "); a != "--kubernetes-version 1.34.4 --containerd-version 2.3.7" {
		t.Errorf("UpArgs = %q", a)
	}
}

func TestParseColumnsRefused(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "-columns is empty"},
		{"  ", "-columns is empty"},
		{"1.37.1/debian,", "empty column"},
		{"1.37.1", `column "1.37.1" is not KUBERNETES/CONTAINERD`},
		{"1.37.1/debian/x", "is not KUBERNETES/CONTAINERD"},
		{"1.37/debian", `Kubernetes version "1.37" is not x.y.z`},
		{"latest/debian", "Kubernetes version"},
		{"1.37.1/", `containerd "" is neither "debian" nor a version`},
		{"1.37.1/Debian", `containerd "Debian" is neither`},
		{"1.37.1/2.3", `containerd "2.3"`},
		{"1.37.1/debian,v1.37.1/debian", "column 1.37.1/debian is listed twice"},
		{"1.34.4/2.3.7,1.34.4/v2.3.7", "listed twice"},
	} {
		_, err := ParseColumns("-columns", tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "-columns") {
			t.Errorf("ParseColumns(%q) = %v, want an error starting with the flag and containing %q", tc.in, err, tc.want)
		}
	}
}
