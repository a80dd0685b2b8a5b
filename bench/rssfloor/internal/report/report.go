// Package report prints, as one JSON line, the memory of the running process
// after a garbage collection: what linking a set of packages costs before it
// does any work (bench/rssfloor, `make bench-rss-floor`).
package report

import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Print writes {"program", "binary_mib", "vmrss_mib", "rss_anon_mib",
// "rss_file_mib"} for the running executable, named program, to stdout,
// from /proc/self/status once a GC has run and the scavenger has returned
// what it frees (debug.FreeOSMemory) and 200 ms have passed.
func Print(program string) {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(200 * time.Millisecond)
	out := map[string]any{"program": program}
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			out["binary_mib"] = mib(fi.Size() / 1024)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		out["error"] = err.Error()
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			out["vmrss_mib"] = mib(kb)
		case "RssAnon:":
			out["rss_anon_mib"] = mib(kb)
		case "RssFile:":
			out["rss_file_mib"] = mib(kb)
		case "RssShmem:":
			out["rss_shmem_mib"] = mib(kb)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func mib(kb int64) float64 { return float64(kb*100/1024) / 100 }
