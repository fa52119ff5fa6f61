// Package benchstat reports latency percentiles from benchmarks: one
// duration per iteration, reported as custom metrics beside ns/op.
package benchstat

import (
	"slices"
	"testing"
	"time"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 1, nearest rank below)
// of d in milliseconds, or 0 when d is empty.
func Percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	return float64(s[int(p*float64(len(s)-1))]) / float64(time.Millisecond)
}

// Report reports the median, the 99th percentile and the maximum of d as
// prefix+"p50-ms", prefix+"p99-ms" and prefix+"max-ms".
func Report(b *testing.B, prefix string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	b.ReportMetric(Percentile(d, 0.50), prefix+"p50-ms")
	b.ReportMetric(Percentile(d, 0.99), prefix+"p99-ms")
	b.ReportMetric(Percentile(d, 1), prefix+"max-ms")
}
