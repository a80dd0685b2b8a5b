package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// FuzzDecodeRequest: the resident agent's request frame, as its listener
// reads it from anyone who may port-forward to it. Whatever the bytes, no
// panic; an accepted request has this protocol's version, is one of the
// agent's own command lines that runs a command, gives --spool (in any
// spelling, before "--") only as a spool directory of the agents', carries
// only variables an environment can hold, and encodes back to a request
// that decodes the same.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--target","1","--","id"],"stdin":true}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--spool","/tmp/nodeexec/spool/abc","--","id"]}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--spool","/usr/local/new","--","id"]}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","-spool=/","--","id"]}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","attach","--spool","/dev","--stop"]}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","container-exec","--container-id","x","--env-from-agent","--","id"],"env":{"A":"1"}}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","container-exec","--","id"],"env":{"A=B":"1"}}`,
		`{"version":1,"command":["/usr/local/bin/nodeexec","agent","serve"]}`,
		`{"version":2,"command":[]}`, `{}`, `[]`, `{"version":1,"command":null}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeRequest(p)
		if err != nil {
			return
		}
		if r.Version != WireVersion || !isAgentArgv(r.Command) || slices.Contains([]string{"hold", "serve", "warm"}, r.Command[2]) {
			t.Fatalf("accepted %+v", r)
		}
		for i, a := range r.Command[3:] {
			if a == "--" {
				break
			}
			if name, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "spool" && strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "---") {
				if !ok && i+4 < len(r.Command) {
					v = r.Command[i+4]
				}
				if spool.CheckDir(v) != nil {
					t.Fatalf("accepted --spool %q in %q", v, r.Command)
				}
			}
		}
		if CheckExecEnv(r.Env) != nil {
			t.Fatalf("accepted Env %q", r.Env)
		}
		again, err := EncodeRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeRequest(again)
		if err != nil || !slices.Equal(r.Command, r2.Command) || r.Stdin != r2.Stdin || r.TTY != r2.TTY || len(r.Env) != len(r2.Env) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, r2, err)
		}
	})
}
