package webhook_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
	"github.com/hearth/hearth/webhook"
)

func TestPostDelivers(t *testing.T) {
	got := make(chan sandbox.Alarm, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a sandbox.Alarm
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&a) != nil {
			t.Errorf("request %s %s, type %q", r.Method, r.URL, r.Header.Get("Content-Type"))
		}
		got <- a
	}))
	defer srv.Close()
	want := sandbox.Alarm{Kind: "circuit_open", Tenant: "acme", Agent: "bot", Message: "circuit open", Recent: 30, Limit: 30, At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	webhook.New(srv.URL, slog.New(slog.DiscardHandler)).Post(want)
	select {
	case a := <-got:
		if a != want {
			t.Errorf("delivered %+v, want %+v", a, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery in 10s")
	}
}

func TestPostLogsFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	var log testenv.Buffer
	webhook.New(srv.URL, slog.New(slog.NewTextHandler(&log, nil))).Post(sandbox.Alarm{Kind: "create_rate", Agent: "bot"})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "500 Internal Server Error"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log = %q, want the failed delivery", log.String())
		}
	}
}

func TestPostNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	var log testenv.Buffer
	p := webhook.New(srv.URL, slog.New(slog.NewTextHandler(&log, nil)))
	start := time.Now()
	for range webhook.InFlight + 3 {
		p.Post(sandbox.Alarm{Kind: "create_rate", Agent: "bot"})
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("%d posts to a stuck receiver took %v", webhook.InFlight+3, took)
	}
	if n := strings.Count(log.String(), "alarm dropped"); n != 3 {
		t.Errorf("%d alarms dropped, want 3 beyond the %d in flight; log %q", n, webhook.InFlight, log.String())
	}
}
