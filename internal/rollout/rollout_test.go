package rollout

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestBatchSize(t *testing.T) {
	for _, c := range []struct {
		b     intstr.IntOrString
		total int
		want  int
	}{
		{intstr.FromInt32(3), 10, 3},
		{intstr.FromInt32(30), 10, 30},    // a count is not cut to total
		{intstr.FromString("25%"), 10, 3}, // rounded up
		{intstr.FromString("1%"), 10, 1},
		{intstr.FromString("100%"), 7, 7},
		{intstr.FromString("50%"), 0, 1}, // at least 1
		{intstr.FromString("x"), 10, 1},  // invalid: 0, so 1
	} {
		if got := BatchSize(c.b, c.total); got != c.want {
			t.Errorf("BatchSize(%s, %d) = %d, want %d", c.b.String(), c.total, got, c.want)
		}
	}
}

func TestTolerated(t *testing.T) {
	for _, c := range []struct {
		m     intstr.IntOrString
		total int
		want  int
	}{
		{intstr.FromInt32(0), 10, 0},
		{intstr.FromInt32(2), 10, 2},
		{intstr.FromString("25%"), 10, 2}, // rounded down
		{intstr.FromString("9%"), 10, 0},
		{intstr.FromString("100%"), 10, 10},
	} {
		if got := Tolerated(c.m, c.total); got != c.want {
			t.Errorf("Tolerated(%s, %d) = %d, want %d", c.m.String(), c.total, got, c.want)
		}
	}
}

func TestNth(t *testing.T) {
	b := []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("50%")}
	for i, want := range []string{"1", "50%", "50%", "50%"} {
		if got := Nth(b, i); got.String() != want {
			t.Errorf("Nth(%d) = %s, want %s", i, got.String(), want)
		}
	}
}
