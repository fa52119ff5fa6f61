package metrics_test

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hearth/hearth/metrics"
)

// exposition is a parsed scrape: per family its HELP and TYPE, and every
// sample by its series ("name{a=\"x\",le=\"1\"}", labels in written order,
// values unescaped and re-quoted with %q).
type exposition struct {
	help, typ map[string]string
	samples   map[string]float64
	order     []string // series in the order written
}

// parse reads the text exposition format strictly enough to catch what
// Prometheus would refuse: a sample before its family's TYPE, a malformed
// label set or escape, a bad number, a series written twice.
func parse(t *testing.T, text string) exposition {
	t.Helper()
	x := exposition{help: map[string]string{}, typ: map[string]string{}, samples: map[string]float64{}}
	if text != "" && !strings.HasSuffix(text, "\n") {
		t.Fatalf("exposition does not end with a newline:\n%s", text)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			x.help[name] = unescapeHelp(t, help)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if _, dup := x.typ[name]; dup {
				t.Fatalf("TYPE of %s given twice", name)
			}
			x.typ[name] = typ
			continue
		}
		series, value := parseSample(t, line)
		if !hasFamily(x.typ, series) {
			t.Fatalf("sample %q comes before any TYPE of its family", line)
		}
		if _, dup := x.samples[series]; dup {
			t.Fatalf("series %s written twice", series)
		}
		x.samples[series] = value
		x.order = append(x.order, series)
	}
	return x
}

// hasFamily reports whether series belongs to a family already typed: its
// own name, or a histogram's with _bucket, _sum or _count.
func hasFamily(types map[string]string, series string) bool {
	name, _, _ := strings.Cut(series, "{")
	if _, ok := types[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && types[base] == "histogram" {
			return true
		}
	}
	return false
}

// parseSample reads `name{l="v",…} value` and returns the series in its
// canonical form and the value.
func parseSample(t *testing.T, line string) (string, float64) {
	t.Helper()
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		t.Fatalf("malformed sample line %q", line)
	}
	name, rest := line[:i], line[i:]
	series := name
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		var labels []string
		for !strings.HasPrefix(rest, "}") {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				t.Fatalf("malformed label set in %q", line)
			}
			lname := rest[:eq]
			rest = rest[eq+2:]
			// The value runs to the first unescaped quote.
			var val strings.Builder
			for {
				if rest == "" {
					t.Fatalf("unterminated label value in %q", line)
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' {
					switch rest[0] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						t.Fatalf("bad escape \\%c in %q", rest[0], line)
					}
					rest = rest[1:]
					continue
				}
				if c == '\n' {
					t.Fatalf("raw newline in a label value of %q", line)
				}
				val.WriteByte(c)
			}
			labels = append(labels, fmt.Sprintf("%s=%q", lname, val.String()))
			rest = strings.TrimPrefix(rest, ",")
		}
		series += "{" + strings.Join(labels, ",") + "}"
		rest = rest[1:]
	}
	v, err := parseValue(strings.TrimPrefix(rest, " "))
	if err != nil {
		t.Fatalf("bad value in %q: %v", line, err)
	}
	return series, v
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// unescapeHelp undoes the HELP escaping of backslash and newline.
func unescapeHelp(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch {
		case i < len(s) && s[i] == '\\':
			b.WriteByte('\\')
		case i < len(s) && s[i] == 'n':
			b.WriteByte('\n')
		default:
			t.Fatalf("bad escape in %q", s)
		}
	}
	return b.String()
}

// scrape writes reg and parses what it wrote.
func scrape(t *testing.T, reg *metrics.Registry) (exposition, string) {
	t.Helper()
	var b strings.Builder
	n, err := reg.WriteTo(&b)
	if err != nil {
		t.Fatalf("WriteTo = %v", err)
	}
	if n != int64(b.Len()) {
		t.Errorf("WriteTo reported %d bytes, wrote %d", n, b.Len())
	}
	return parse(t, b.String()), b.String()
}

func (x exposition) want(t *testing.T, series string, v float64) {
	t.Helper()
	got, ok := x.samples[series]
	if !ok {
		t.Errorf("no series %s", series)
		return
	}
	if got != v {
		t.Errorf("%s = %v, want %v", series, got, v)
	}
}

func TestCounters(t *testing.T) {
	reg := metrics.NewRegistry()
	req := reg.Counter("hearth_requests_total", "Calls answered, by verb and code.", "verb", "code")
	trips := reg.Counter("hearth_breaker_trips_total", "Breaker trips.")
	req.Inc("sandbox.create", "ok")
	req.Inc("sandbox.create", "ok")
	req.Add(3, "sandbox.exec", "not_found")
	req.Inc("audit.list", "ok")

	x, text := scrape(t, reg)
	x.want(t, `hearth_requests_total{verb="sandbox.create",code="ok"}`, 2)
	x.want(t, `hearth_requests_total{verb="sandbox.exec",code="not_found"}`, 3)
	x.want(t, `hearth_requests_total{verb="audit.list",code="ok"}`, 1)
	x.want(t, `hearth_breaker_trips_total`, 0) // written before its first trip
	if x.typ["hearth_requests_total"] != "counter" || x.help["hearth_requests_total"] != "Calls answered, by verb and code." {
		t.Errorf("TYPE %q HELP %q", x.typ["hearth_requests_total"], x.help["hearth_requests_total"])
	}
	// Families by name, series by label values.
	want := []string{
		`hearth_breaker_trips_total`,
		`hearth_requests_total{verb="audit.list",code="ok"}`,
		`hearth_requests_total{verb="sandbox.create",code="ok"}`,
		`hearth_requests_total{verb="sandbox.exec",code="not_found"}`,
	}
	if !slices.Equal(x.order, want) {
		t.Errorf("series written in the order\n%q\nwant\n%q\n%s", x.order, want, text)
	}
	trips.Inc()
	x, _ = scrape(t, reg)
	x.want(t, `hearth_breaker_trips_total`, 1)
}

func TestEscaping(t *testing.T) {
	reg := metrics.NewRegistry()
	c := reg.Counter("odd_total", "A help with a \\ backslash\nand a second line.", "v")
	for _, v := range []string{`quote"d`, `back\slash`, "new\nline", "", "ünïcode"} {
		c.Inc(v)
	}
	x, text := scrape(t, reg)
	for _, v := range []string{`quote"d`, `back\slash`, "new\nline", "", "ünïcode"} {
		x.want(t, fmt.Sprintf("odd_total{v=%q}", v), 1)
	}
	if got := x.help["odd_total"]; got != "A help with a \\ backslash\nand a second line." {
		t.Errorf("HELP round-trips as %q", got)
	}
	if strings.Count(text, "\n") != 2+5 {
		t.Errorf("a raw newline escaped the escaping:\n%s", text)
	}
}

func TestHistogram(t *testing.T) {
	reg := metrics.NewRegistry()
	h := reg.Histogram("req_seconds", "Durations.", "verb")
	reg.Histogram("exec_seconds", "Exec durations.")
	for _, v := range []float64{0.0005, 0.001, 0.003, 0.2, 0.2, 7, 11} {
		h.Observe(v, "a")
	}
	h.Observe(0.01, "b")

	x, _ := scrape(t, reg)
	if x.typ["req_seconds"] != "histogram" {
		t.Errorf("TYPE = %q, want histogram", x.typ["req_seconds"])
	}
	// Cumulative: le is "less than or equal".
	wantA := map[string]float64{
		"0.001": 2, "0.0025": 2, "0.005": 3, "0.01": 3, "0.025": 3, "0.05": 3, "0.1": 3,
		"0.25": 5, "0.5": 5, "1": 5, "2.5": 5, "5": 5, "10": 6, "+Inf": 7,
	}
	for le, v := range wantA {
		x.want(t, fmt.Sprintf(`req_seconds_bucket{verb="a",le=%q}`, le), v)
	}
	x.want(t, `req_seconds_count{verb="a"}`, 7)
	if got := x.samples[`req_seconds_sum{verb="a"}`]; math.Abs(got-18.4045) > 1e-9 {
		t.Errorf(`req_seconds_sum{verb="a"} = %v, want 18.4045`, got)
	}
	x.want(t, `req_seconds_bucket{verb="b",le="0.005"}`, 0)
	x.want(t, `req_seconds_bucket{verb="b",le="0.01"}`, 1)
	x.want(t, `req_seconds_count{verb="b"}`, 1)
	// Without labels it is written, empty, before its first observation.
	x.want(t, `exec_seconds_bucket{le="+Inf"}`, 0)
	x.want(t, `exec_seconds_count`, 0)
	x.want(t, `exec_seconds_sum`, 0)
	// Buckets ascend, then _sum and _count.
	var les []string
	for _, s := range x.order {
		if strings.HasPrefix(s, `req_seconds_bucket{verb="a"`) {
			les = append(les, s)
		}
	}
	if len(les) != len(metrics.Buckets)+1 || !strings.Contains(les[0], `le="0.001"`) || !strings.Contains(les[len(les)-1], `le="+Inf"`) {
		t.Errorf("buckets of a: %q", les)
	}
}

func TestGaugeFunc(t *testing.T) {
	reg := metrics.NewRegistry()
	var running float64
	var fail error
	reg.GaugeFunc("sandboxes", "Sandboxes by tenant and status.", []string{"tenant", "status"}, func() ([]metrics.Sample, error) {
		return []metrics.Sample{
			{Labels: []string{"zeta", "running"}, Value: 1},
			{Labels: []string{"acme", "sleeping"}, Value: 2},
			{Labels: []string{"acme", "running"}, Value: running},
		}, fail
	})
	reg.Counter("a_total", "Comes first.").Inc()

	running = 3
	x, _ := scrape(t, reg)
	x.want(t, `sandboxes{tenant="acme",status="running"}`, 3)
	want := []string{`a_total`, `sandboxes{tenant="acme",status="running"}`, `sandboxes{tenant="acme",status="sleeping"}`, `sandboxes{tenant="zeta",status="running"}`}
	if !slices.Equal(x.order, want) {
		t.Errorf("order %q, want %q", x.order, want)
	}
	if x.typ["sandboxes"] != "gauge" {
		t.Errorf("TYPE = %q, want gauge", x.typ["sandboxes"])
	}
	// Evaluated at every scrape.
	running = 5
	x, _ = scrape(t, reg)
	x.want(t, `sandboxes{tenant="acme",status="running"}`, 5)

	// A failing gauge fails the whole scrape, which writes nothing.
	fail = errors.New("store down")
	var b strings.Builder
	if _, err := reg.WriteTo(&b); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Errorf("WriteTo with a failing gauge = %v, want its error", err)
	}
	if b.Len() != 0 {
		t.Errorf("WriteTo with a failing gauge wrote %q, want nothing", b.String())
	}
}

func TestConcurrentUse(t *testing.T) {
	reg := metrics.NewRegistry()
	c := reg.Counter("c_total", "c", "k")
	h := reg.Histogram("h_seconds", "h", "k")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				c.Inc(fmt.Sprint(g % 2))
				h.Observe(float64(i)/1000, fmt.Sprint(g%2))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			var b strings.Builder
			reg.WriteTo(&b)
		}
	})
	wg.Wait()
	x, _ := scrape(t, reg)
	x.want(t, `c_total{k="0"}`, 4000)
	x.want(t, `c_total{k="1"}`, 4000)
	x.want(t, `h_seconds_count{k="1"}`, 4000)
}

func TestMisuse(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	reg := metrics.NewRegistry()
	c := reg.Counter("x_total", "x", "a", "b")
	mustPanic("a second x_total", func() { reg.Counter("x_total", "again") })
	mustPanic("a bad metric name", func() { reg.Counter("x-total", "x") })
	mustPanic("a bad label name", func() { reg.Counter("y_total", "y", "a-b") })
	mustPanic("a histogram label le", func() { reg.Histogram("z_seconds", "z", "le") })
	mustPanic("too few label values", func() { c.Inc("only-a") })
	mustPanic("a negative counter step", func() { c.Add(-1, "a", "b") })
}
