// Package asciicast records a terminal session in asciinema's asciicast v2
// format, which `asciinema play FILE` replays.
//
// A recording is a header line (a JSON object: version 2, the terminal's width and height in columns and rows, the
// start as a Unix time in seconds, the command, a title, the environment),
// then one line per event, a JSON array [time, code, data]:
//
//	{"version":2,"width":120,"height":40,"timestamp":1795860000,"command":"sh -l","title":"nodeexec shell node-1"}
//	[0.412345,"o","root@node-1:~# "]
//	[2.100000,"i","ls\r"]
//	[3.050000,"r","100x30"]
//
// time is in seconds since the start (microsecond precision); code is "o"
// (what the terminal printed), "i" (what was typed) or "r" (the terminal was
// resized to COLSxROWS). Each event is written at once, so a session cut by a
// killed client still leaves every event before the cut, and the file plays.
//
// Output arrives in chunks that may split a UTF-8 character; the Writer keeps
// an incomplete character's first bytes until the rest arrives (asciicast
// data is a JSON string, which holds whole characters only). Bytes that are
// not UTF-8 become U+FFFD, as asciinema records them.
package asciicast

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Version is the asciicast format version written in the header.
const Version = 2

// Event codes.
const (
	Output = "o"
	Input  = "i"
	Resize = "r"
)

// Header is the first line of a recording. Width and Height are required
// (positive); Timestamp is filled from the Writer's clock when zero.
type Header struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Command   string            `json:"command,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// Writer writes a recording to an io.Writer. Its methods may be called from
// several goroutines (output, input and resizes arrive on different ones).
// After a failed write every method returns the first error, which Err
// also reports.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	now     func() time.Time
	start   time.Time
	pending map[string][]byte // the first bytes of a split UTF-8 character, by event code
	width   int
	height  int
	err     error
}

// NewWriter writes h (Version set to 2) to w and returns the Writer of the
// events that follow. now is the clock (time.Now when nil): event times
// are measured from its value here. It returns an error when h's size is
// not positive or the header cannot be written.
func NewWriter(w io.Writer, h Header, now func() time.Time) (*Writer, error) {
	if now == nil {
		now = time.Now
	}
	if h.Width <= 0 || h.Height <= 0 {
		return nil, fmt.Errorf("asciicast: terminal size %dx%d: want positive columns and rows", h.Width, h.Height)
	}
	start := now()
	h.Version = Version
	if h.Timestamp == 0 {
		h.Timestamp = start.Unix()
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("asciicast: header: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("asciicast: header: %w", err)
	}
	return &Writer{w: w, now: now, start: start, pending: map[string][]byte{}, width: h.Width, height: h.Height}, nil
}

// Output records p as printed by the terminal ("o").
func (w *Writer) Output(p []byte) error { return w.text(Output, p) }

// Input records p as typed ("i").
func (w *Writer) Input(p []byte) error { return w.text(Input, p) }

// Resize records a new terminal size ("r", COLSxROWS) when it differs from
// the last one recorded (the header's at first).
func (w *Writer) Resize(cols, rows int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cols == w.width && rows == w.height {
		return w.err
	}
	w.width, w.height = cols, rows
	return w.event(Resize, strconv.Itoa(cols)+"x"+strconv.Itoa(rows))
}

// Err is the first write error, nil when every event was written.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Tee returns an io.Writer that writes to dst and records what dst accepted
// as code's events (Output or Input). A failed recording never fails the
// write to dst: it is reported by Err.
func (w *Writer) Tee(dst io.Writer, code string) io.Writer {
	return &tee{dst: dst, rec: w, code: code}
}

type tee struct {
	dst  io.Writer
	rec  *Writer
	code string
}

func (t *tee) Write(p []byte) (int, error) {
	n, err := t.dst.Write(p)
	if n > 0 {
		_ = t.rec.text(t.code, p[:n])
	}
	return n, err
}

// TeeReader returns an io.Reader that reads from src and records what it
// read as Input events.
func (w *Writer) TeeReader(src io.Reader) io.Reader { return &teeReader{src: src, rec: w} }

type teeReader struct {
	src io.Reader
	rec *Writer
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.src.Read(p)
	if n > 0 {
		_ = t.rec.text(Input, p[:n])
	}
	return n, err
}

// text writes p as one event of code, keeping a split UTF-8 character's
// first bytes for the next event of the same code.
func (w *Writer) text(code string, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if prev := w.pending[code]; len(prev) > 0 {
		p = append(append([]byte(nil), prev...), p...)
		delete(w.pending, code)
	}
	if cut := incompleteTail(p); cut < len(p) {
		w.pending[code] = append([]byte(nil), p[cut:]...)
		p = p[:cut]
	}
	if len(p) == 0 {
		return nil
	}
	return w.event(code, string(p))
}

// incompleteTail returns where a trailing incomplete UTF-8 character of p
// starts (len(p) when there is none): the start of at most 3 last bytes that
// begin a character which more bytes could complete.
func incompleteTail(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return len(p)
}

// event writes [time, code, data] and a newline; w.mu is held.
func (w *Writer) event(code, data string) error {
	if w.err != nil {
		return w.err
	}
	d, err := json.Marshal(data)
	if err != nil {
		w.err = fmt.Errorf("asciicast: %w", err)
		return w.err
	}
	secs := w.now().Sub(w.start).Seconds()
	if secs < 0 {
		secs = 0
	}
	line := make([]byte, 0, len(d)+24)
	line = append(line, '[')
	line = strconv.AppendFloat(line, secs, 'f', 6, 64)
	line = append(line, ",\""...)
	line = append(line, code...)
	line = append(line, "\","...)
	line = append(line, d...)
	line = append(line, "]\n"...)
	if _, err := w.w.Write(line); err != nil {
		w.err = fmt.Errorf("asciicast: %w", err)
	}
	return w.err
}

// Close records what is left of a split UTF-8 character (as U+FFFD) and
// returns Err. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, code := range []string{Output, Input} {
		if p := w.pending[code]; len(p) > 0 {
			delete(w.pending, code)
			_ = w.event(code, string(utf8.RuneError)) // one character, cut
		}
	}
	return w.err
}

// ErrNotRecording is returned by Parse for input that is not asciicast v2.
var ErrNotRecording = errors.New("asciicast: not an asciicast v2 recording")

// Event is one parsed event line.
type Event struct {
	Time float64 // seconds since the start
	Code string  // Output, Input, Resize, or another code of the format
	Data string
}

// Parse reads a recording: its header and events, in order. It returns an
// error wrapping ErrNotRecording when the header is not a version 2 header or
// a line is not an event. A last line cut short (a client killed mid-write)
// is an error too.
func Parse(r io.Reader) (Header, []Event, error) {
	dec := json.NewDecoder(r)
	var h Header
	if err := dec.Decode(&h); err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrNotRecording, err)
	}
	if h.Version != Version {
		return h, nil, fmt.Errorf("%w: version %d", ErrNotRecording, h.Version)
	}
	var events []Event
	for {
		var raw []json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return h, events, nil
		} else if err != nil {
			return h, events, fmt.Errorf("%w: event %d: %v", ErrNotRecording, len(events)+1, err)
		}
		var e Event
		if len(raw) != 3 || json.Unmarshal(raw[0], &e.Time) != nil || json.Unmarshal(raw[1], &e.Code) != nil || json.Unmarshal(raw[2], &e.Data) != nil {
			return h, events, fmt.Errorf("%w: event %d: want [time, code, data]", ErrNotRecording, len(events)+1)
		}
		events = append(events, e)
	}
}

// ParseFile is Parse of the file at path.
func ParseFile(path string) (Header, []Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, fmt.Errorf("asciicast: %w", err)
	}
	defer f.Close()
	return Parse(f)
}
