// Package durationcheck tells a duration too large to parse from one that is
// not a duration at all, so that both the CLI and NodeScript validation can
// say "too large, at most ..." instead of "not a duration".
package durationcheck

import "time"

// Overflows reports whether s is a duration in Go's syntax that
// time.ParseDuration refuses only because it is too large (more than about
// 292 years of nanoseconds): s with each run of digits made "1" parses.
func Overflows(s string) bool {
	if _, err := time.ParseDuration(s); err == nil {
		return false
	}
	isDigit := func(i int) bool { return i >= 0 && s[i] >= '0' && s[i] <= '9' }
	small := make([]byte, 0, len(s))
	for i := range len(s) {
		switch {
		case !isDigit(i):
			small = append(small, s[i])
		case !isDigit(i - 1):
			small = append(small, '1')
		}
	}
	_, err := time.ParseDuration(string(small))
	return err == nil
}
