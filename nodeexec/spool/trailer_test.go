package spool_test

import (
	"bytes"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

func TestTrailerWriter(t *testing.T) {
	end := spool.End{Code: 3, Stdout: 120, Stderr: 17}
	tr := string(end.Trailer())
	for name, tt := range map[string]struct {
		writes  []string
		want    string
		wantEnd bool
	}{
		"text then trailer":          {[]string{"warn\n", tr}, "warn\n", true},
		"trailer in pieces":          {[]string{"warn\n" + tr[:5], tr[5:9], tr[9:]}, "warn\n", true},
		"no trailer":                 {[]string{"warn\n"}, "warn\n", false},
		"cut inside the trailer":     {[]string{"warn\n", tr[:10]}, "warn\n", false},
		"NULs that are not trailers": {[]string{"a\x00b\n\x00\x00nodeexec\n", "c"}, "a\x00b\n\x00\x00nodeexec\nc", false},
		"NUL then a trailer":         {[]string{"x\x00" + tr}, "x\x00", true},
		"output after a trailer":     {[]string{tr, "more\n"}, "more\n", false},
		"bad numbers":                {[]string{"\x00nodeexec-spool-end code=x\n"}, "\x00nodeexec-spool-end code=x\n", false},
		"long NUL line":              {[]string{"\x00nodeexec-spool-end " + string(bytes.Repeat([]byte("z"), 300)) + "\n"}, "\x00nodeexec-spool-end " + string(bytes.Repeat([]byte("z"), 300)) + "\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			w := &spool.TrailerWriter{W: &got}
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			e, ok := w.End()
			if got.String() != tt.want || ok != tt.wantEnd || (ok && e != end) {
				t.Errorf("passed %q, end %+v %v; want %q, end %v", got.String(), e, ok, tt.want, tt.wantEnd)
			}
		})
	}
}
