// Package metrics is a minimal Prometheus registry on the standard library:
// counter vectors, histogram vectors with fixed buckets, and gauges whose
// values a function computes at scrape time, written in the Prometheus
// text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Registering a metric with a bad or taken name, or using a vector with
// the wrong number of label values, is a programming error and panics, as
// in the Prometheus client libraries.
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ContentType is the media type of what WriteTo writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Buckets are the upper bounds, in seconds, of every histogram's buckets;
// a last bucket, +Inf, holds every observation.
var Buckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// family is one registered metric: its name, and how to write its lines.
type family interface {
	// write appends the family's HELP, TYPE and sample lines to b.
	write(b *bytes.Buffer) error
}

// Registry holds metrics and writes them. It is safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families map[string]family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{families: map[string]family{}}
}

// register adds f under name, checking the names.
func (r *Registry) register(name string, labels []string, f family) {
	if !metricName.MatchString(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !labelName.MatchString(l) || strings.HasPrefix(l, "__") || l == "le" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.families[name]; ok {
		panic(fmt.Sprintf("metrics: %s registered twice", name))
	}
	r.families[name] = f
}

// WriteTo writes every metric in the text exposition format: families by
// name, each with its HELP and TYPE lines, and its series sorted by label
// values. Gauge functions run first; if one fails, WriteTo writes nothing
// and returns its error.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	names := make([]string, 0, len(r.families))
	for name := range r.families {
		names = append(names, name)
	}
	fams := make([]family, 0, len(names))
	slices.Sort(names)
	for _, name := range names {
		fams = append(fams, r.families[name])
	}
	r.mu.Unlock()
	var b bytes.Buffer
	for _, f := range fams {
		if err := f.write(&b); err != nil {
			return 0, err
		}
	}
	return b.WriteTo(w)
}

// desc is what every family has: name, help and label names.
type desc struct {
	name, help string
	labels     []string
}

// header writes the HELP and TYPE lines.
func (d *desc) header(b *bytes.Buffer, typ string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", d.name, escapeHelp(d.help), d.name, typ)
}

// check panics unless values has one value per label.
func (d *desc) check(values []string) {
	if len(values) != len(d.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values (%s), got %d", d.name, len(d.labels), strings.Join(d.labels, ", "), len(values)))
	}
}

// sample writes one sample line: name{labels…,extra} value.
func (d *desc) sample(b *bytes.Buffer, suffix string, values []string, extraName, extraValue string, v float64) {
	b.WriteString(d.name)
	b.WriteString(suffix)
	if len(values) > 0 || extraName != "" {
		b.WriteByte('{')
		for i, l := range d.labels {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `%s="%s"`, l, escapeLabel(values[i]))
		}
		if extraName != "" {
			if len(values) > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `%s="%s"`, extraName, escapeLabel(extraValue))
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
}

// key joins label values into an unambiguous map key.
func key(values []string) string {
	var b strings.Builder
	for _, v := range values {
		b.WriteString(strconv.Quote(v))
	}
	return b.String()
}

// sorted returns the series of m ordered by their label values.
func sorted[S any](m map[string]*S, values func(*S) []string) []*S {
	list := slices.Collect(maps.Values(m))
	slices.SortFunc(list, func(a, b *S) int { return slices.Compare(values(a), values(b)) })
	return list
}

// CounterVec is a counter per combination of label values.
type CounterVec struct {
	desc
	mu     sync.Mutex
	series map[string]*counterSeries
}

type counterSeries struct {
	values []string
	v      float64
}

// Counter registers a counter named name with the given label names and
// returns it. A counter without labels is written, as 0, from the start;
// a labelled one from its first Add.
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	c := &CounterVec{desc: desc{name, help, labels}, series: map[string]*counterSeries{}}
	if len(labels) == 0 {
		c.series[""] = &counterSeries{}
	}
	r.register(name, labels, c)
	return c
}

// Inc adds 1 to the series of values (one per label, in order).
func (c *CounterVec) Inc(values ...string) { c.Add(1, values...) }

// Add adds v, which must not be negative, to the series of values.
func (c *CounterVec) Add(v float64, values ...string) {
	c.check(values)
	if v < 0 || math.IsNaN(v) {
		panic(fmt.Sprintf("metrics: %s: a counter cannot add %v", c.name, v))
	}
	k := key(values)
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.series[k]
	if !ok {
		s = &counterSeries{values: slices.Clone(values)}
		c.series[k] = s
	}
	s.v += v
}

func (c *CounterVec) write(b *bytes.Buffer) error {
	c.header(b, "counter")
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range sorted(c.series, func(s *counterSeries) []string { return s.values }) {
		c.sample(b, "", s.values, "", "", s.v)
	}
	return nil
}

// HistogramVec is a histogram over Buckets per combination of label values.
type HistogramVec struct {
	desc
	mu     sync.Mutex
	series map[string]*histogramSeries
}

type histogramSeries struct {
	values []string
	counts []uint64 // per bucket of Buckets, not cumulative
	count  uint64   // every observation: the +Inf bucket
	sum    float64
}

// Histogram registers a histogram named name (its unit is seconds, the
// unit of Buckets) with the given label names and returns it. One without
// labels is written, empty, from the start; a labelled one from its first
// Observe.
func (r *Registry) Histogram(name, help string, labels ...string) *HistogramVec {
	h := &HistogramVec{desc: desc{name, help, labels}, series: map[string]*histogramSeries{}}
	if len(labels) == 0 {
		h.series[""] = &histogramSeries{counts: make([]uint64, len(Buckets))}
	}
	r.register(name, labels, h)
	return h
}

// Observe records one observation v in the series of values.
func (h *HistogramVec) Observe(v float64, values ...string) {
	h.check(values)
	k := key(values)
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.series[k]
	if !ok {
		s = &histogramSeries{values: slices.Clone(values), counts: make([]uint64, len(Buckets))}
		h.series[k] = s
	}
	if i, _ := slices.BinarySearch(Buckets, v); i < len(Buckets) {
		s.counts[i]++ // the first bucket whose bound is ≥ v
	}
	s.count++
	s.sum += v
}

func (h *HistogramVec) write(b *bytes.Buffer) error {
	h.header(b, "histogram")
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range sorted(h.series, func(s *histogramSeries) []string { return s.values }) {
		var cum uint64
		for i, bound := range Buckets {
			cum += s.counts[i]
			h.sample(b, "_bucket", s.values, "le", formatFloat(bound), float64(cum))
		}
		h.sample(b, "_bucket", s.values, "le", "+Inf", float64(s.count))
		h.sample(b, "_sum", s.values, "", "", s.sum)
		h.sample(b, "_count", s.values, "", "", float64(s.count))
	}
	return nil
}

// Sample is one value of a gauge function: its label values, in the order
// of the gauge's label names, and the value.
type Sample struct {
	Labels []string
	Value  float64
}

// gaugeFunc is a gauge whose samples fn computes at every write.
type gaugeFunc struct {
	desc
	fn func() ([]Sample, error)
}

// GaugeFunc registers a gauge named name with the given label names, whose
// samples fn returns at every WriteTo. fn must not return two samples with
// the same label values; an error from it fails the WriteTo.
func (r *Registry) GaugeFunc(name, help string, labels []string, fn func() ([]Sample, error)) {
	r.register(name, labels, &gaugeFunc{desc: desc{name, help, labels}, fn: fn})
}

func (g *gaugeFunc) write(b *bytes.Buffer) error {
	samples, err := g.fn()
	if err != nil {
		return fmt.Errorf("metrics: %s: %w", g.name, err)
	}
	for _, s := range samples {
		g.check(s.Labels)
	}
	samples = slices.Clone(samples)
	slices.SortFunc(samples, func(a, b Sample) int { return slices.Compare(a.Labels, b.Labels) })
	g.header(b, "gauge")
	for _, s := range samples {
		g.sample(b, "", s.Labels, "", "", s.Value)
	}
	return nil
}

// formatFloat renders v as the exposition format writes numbers.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// escapeHelp escapes a HELP text: backslash and newline.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// escapeLabel escapes a label value: backslash, newline and double quote.
func escapeLabel(s string) string { return labelEscaper.Replace(s) }
