package durationcheck

import "testing"

func TestOverflows(t *testing.T) {
	for s, want := range map[string]bool{
		"9999999999h": true, "100000000h": true, "999999999999999999999s": true, "1h9999999999h": true,
		"1h": false, "596523h": false, "soon": false, "h": false, "": false, "-1h": false, "1x": false, "99999999999999999999x": false,
	} {
		if got := Overflows(s); got != want {
			t.Errorf("Overflows(%q) = %t, want %t", s, got, want)
		}
	}
}
