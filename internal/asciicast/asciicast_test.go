package asciicast

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clock advances by step at each reading.
func clock(start time.Time, step time.Duration) func() time.Time {
	var mu sync.Mutex
	t := start
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := t
		t = t.Add(step)
		return now
	}
}

func TestWriterFormat(t *testing.T) {
	var buf bytes.Buffer
	start := time.Unix(1795860000, 0)
	w, err := NewWriter(&buf, Header{Width: 120, Height: 40, Command: "sh -l", Title: "nodeexec shell node-1", Env: map[string]string{"TERM": "xterm"}}, clock(start, 250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var screen bytes.Buffer
	out := w.Tee(&screen, Output)
	if _, err := io.WriteString(out, "root@node-1:~# "); err != nil {
		t.Fatal(err)
	}
	in := w.TeeReader(strings.NewReader("ls\r"))
	if b, err := io.ReadAll(in); err != nil || string(b) != "ls\r" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := w.Resize(120, 40); err != nil { // the header's size: no event
		t.Fatal(err)
	}
	if err := w.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	if err := w.Resize(100, 30); err != nil { // unchanged: no event
		t.Fatal(err)
	}
	if _, err := io.WriteString(out, "\"quoted\"\x1b[0m\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"width":120,"height":40,"timestamp":1795860000,"command":"sh -l","title":"nodeexec shell node-1","env":{"TERM":"xterm"}}
[0.250000,"o","root@node-1:~# "]
[0.500000,"i","ls\r"]
[0.750000,"r","100x30"]
[1.000000,"o","\"quoted\"\u001b[0m\n"]
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("recording (-want +got):\n%s", diff)
	}
	if screen.String() != "root@node-1:~# \"quoted\"\x1b[0m\n" {
		t.Errorf("the terminal got %q", screen.String())
	}
	h, events, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != 2 || h.Width != 120 || h.Height != 40 || h.Timestamp != 1795860000 {
		t.Errorf("parsed header %+v", h)
	}
	wantEvents := []Event{
		{0.25, Output, "root@node-1:~# "},
		{0.5, Input, "ls\r"},
		{0.75, Resize, "100x30"},
		{1, Output, "\"quoted\"\x1b[0m\n"},
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("parsed events (-want +got):\n%s", diff)
	}
}

func TestWriterSplitUTF8(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Width: 80, Height: 24}, clock(time.Unix(1, 0), time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s := "é€😀" // 2, 3 and 4 bytes
	b := []byte(s)
	// every split point, one byte at a time
	for i := range b {
		if err := w.Output(b[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	// an invalid byte, then a character cut by the end of the session
	if err := w.Output([]byte{'a', 0xff, 'b', 0xe2, 0x82}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, events, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, e := range events {
		got.WriteString(e.Data)
	}
	if want := s + "a\ufffdb\ufffd"; got.String() != want {
		t.Errorf("recorded %q, want %q", got.String(), want)
	}
	if len(events) != 5 { // é, €, 😀, "a?b", the cut character
		t.Errorf("%d events, want 5: %+v", len(events), events)
	}
}

func TestWriterBadHeader(t *testing.T) {
	for _, h := range []Header{{Width: 0, Height: 24}, {Width: 80, Height: -1}} {
		if _, err := NewWriter(io.Discard, h, nil); err == nil || !strings.Contains(err.Error(), "terminal size") {
			t.Errorf("%+v: %v, want a terminal size error", h, err)
		}
	}
	if _, err := NewWriter(failWriter{}, Header{Width: 80, Height: 24}, nil); err == nil {
		t.Error("an unwritable header: no error")
	}
}

type failWriter struct{}

var errDiskFull = errors.New("no space left on device")

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// failAfter accepts n writes, then fails.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errDiskFull
	}
	f.n--
	return len(p), nil
}

func TestWriterErrorKeepsTheSession(t *testing.T) {
	w, err := NewWriter(&failAfter{n: 2}, Header{Width: 80, Height: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var screen bytes.Buffer
	out := w.Tee(&screen, Output)
	for i := 0; i < 3; i++ {
		if _, err := fmt.Fprintf(out, "line %d\n", i); err != nil {
			t.Fatalf("the terminal's write failed with the recording's error: %v", err)
		}
	}
	if screen.String() != "line 0\nline 1\nline 2\n" {
		t.Errorf("the terminal got %q", screen.String())
	}
	if err := w.Err(); !errors.Is(err, errDiskFull) {
		t.Errorf("Err() = %v, want the write error", err)
	}
	if err := w.Resize(10, 10); !errors.Is(err, errDiskFull) {
		t.Errorf("Resize after the error: %v", err)
	}
	if err := w.Close(); !errors.Is(err, errDiskFull) {
		t.Errorf("Close: %v", err)
	}
}

func TestWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Width: 80, Height: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				switch g {
				case 0:
					_ = w.Output([]byte("out\n"))
				case 1:
					_ = w.Input([]byte("in"))
				default:
					_ = w.Resize(80+i%2, 24)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, events, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	last := 0.0
	for _, e := range events {
		n[e.Code]++
		if e.Time < last {
			t.Errorf("time went back: %v after %v", e.Time, last)
		}
		last = e.Time
	}
	if n[Output] != 100 || n[Input] != 100 || n[Resize] == 0 {
		t.Errorf("events by code %v", n)
	}
}

func TestParseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.cast")
	if err := os.WriteFile(path, []byte("{\"version\":2,\"width\":80,\"height\":24}\n[0.5,\"o\",\"hi\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, events, err := ParseFile(path)
	if err != nil || h.Width != 80 || len(events) != 1 || events[0].Data != "hi" {
		t.Errorf("ParseFile: %+v %+v %v", h, events, err)
	}
	if _, _, err := ParseFile(filepath.Join(t.TempDir(), "missing.cast")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
}

func TestParseRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":     "",
		"version 1": `{"version":1,"width":80,"height":24}`,
		"event":     "{\"version\":2,\"width\":80,\"height\":24}\n[0.1,\"o\"]\n",
		"cut":       "{\"version\":2,\"width\":80,\"height\":24}\n[0.1,\"o\",\"ab",
	} {
		if _, _, err := Parse(strings.NewReader(in)); !errors.Is(err, ErrNotRecording) {
			t.Errorf("%s: %v, want ErrNotRecording", name, err)
		}
	}
}
