package benchstat_test

import (
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/benchstat"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := benchstat.Percentile(d, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := benchstat.Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if d[0] != 100*time.Millisecond {
		t.Errorf("Percentile sorted its argument in place")
	}
}
