package agent

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	fw := NewFrameWriter(&b)
	big := bytes.Repeat([]byte("x"), MaxFramePayload+10)
	_ = fw.Write(FrameStdout, []byte("hi"))
	_ = fw.Write(FrameStderr, big) // split in two frames
	_ = fw.WriteResize(80, 24)
	_ = fw.WriteExit(-1)
	_ = fw.Write(FrameStdinEOF, nil)
	r := bufio.NewReader(&b)
	want := []struct {
		t FrameType
		n int
	}{{FrameStdout, 2}, {FrameStderr, MaxFramePayload}, {FrameStderr, 10}, {FrameResize, 4}, {FrameExit, 4}, {FrameStdinEOF, 0}}
	for i, w := range want {
		typ, p, err := ReadFrame(r, nil)
		if err != nil || typ != w.t || len(p) != w.n {
			t.Fatalf("frame %d: %q %d bytes %v, want %q %d", i, typ, len(p), err, w.t, w.n)
		}
		switch typ {
		case FrameResize:
			if w, h, err := SizeOf(p); w != 80 || h != 24 || err != nil {
				t.Errorf("size %d %d %v", w, h, err)
			}
		case FrameExit:
			if code, err := ExitCodeOf(p); code != -1 || err != nil {
				t.Errorf("exit %d %v", code, err)
			}
		}
	}
	if _, _, err := ReadFrame(r, nil); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
	// A cut inside a frame, and a frame announcing too much.
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader([]byte{'1', 0, 0, 0, 9, 'a'})), nil); err != io.ErrUnexpectedEOF {
		t.Errorf("cut frame: %v", err)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader([]byte{'1', 0xff, 0, 0, 0})), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("huge frame: %v", err)
	}
	if _, err := ExitCodeOf([]byte{1}); err == nil {
		t.Error("short exit frame accepted")
	}
}

func TestDecodeRequest(t *testing.T) {
	ok, _ := EncodeRequest(WireRequest{Version: WireVersion, Command: []string{Path, "agent", "nsenter", "--", "id"}, Stdin: true})
	if r, err := DecodeRequest(ok); err != nil || !r.Stdin || r.Command[2] != "nsenter" {
		t.Errorf("%+v %v", r, err)
	}
	// The agents' own spools, and a --spool that is the command's argument.
	for _, argv := range [][]string{
		{Path, "agent", "nsenter", "--spool", "/tmp/nodeexec/spool/abc", "--target", "1", "--", "id"},
		{Path, "agent", "nsenter", "--spool=/tmp/nodeexec/spool/nodeexec-tc-1-x2c4v", "--", "id"},
		{Path, "agent", "attach", "--spool", "/tmp/nodeexec/spool/abc", "--stop"},
		{Path, "agent", "nsenter", "--", "tool", "--spool", "/x"},
	} {
		p, _ := EncodeRequest(WireRequest{Version: WireVersion, Command: argv})
		if _, err := DecodeRequest(p); err != nil {
			t.Errorf("%q: %v", argv, err)
		}
	}
	for _, tc := range []struct{ req, want string }{
		{`{`, "bad request frame"},
		{`{"version":2,"command":["/usr/local/bin/nodeexec","agent","nsenter"]}`, "protocol version 2"},
		{`{"version":1,"command":["sh","-c","id"]}`, "only its own command lines"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","hold"]}`, "main process"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","warm"]}`, "main process"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","-x"]}`, "only its own command lines"},
		// A spool anywhere but the agents' parent, in every spelling of the flag.
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--spool","/usr/local/new","--","true"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--spool=/x","--","true"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","-spool","/","--","true"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","-spool=/tmp/nodeexec/spool/../x","--","true"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","container-exec","--container-id","x","--spool","/tmp/nodeexec/spool/a/b","--","true"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","attach","--spool","/dev","--stop"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","attach","--check","--spool"]}`, "--spool"},
		{`{"version":1,"command":["/usr/local/bin/nodeexec","agent","nsenter","--spool","/tmp/nodeexec/spool/ok","--spool","/x","--","true"]}`, "--spool"},
	} {
		if _, err := DecodeRequest([]byte(tc.req)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.req, err, tc.want)
		}
	}
}
