// Package webhook posts the platform's alarms (sandbox.Alarm) to an
// operator's URL as JSON, in the background: a slow or dead receiver never
// holds up a create.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Timeout bounds one delivery; InFlight is how many may run at once (more
// are dropped, and logged).
const (
	Timeout  = 5 * time.Second
	InFlight = 4
)

// Poster delivers alarms to one URL. It is safe for concurrent use.
type Poster struct {
	url    string
	client *http.Client
	log    *slog.Logger
	slots  chan struct{}
}

// New returns a Poster to url that logs failed deliveries to log.
func New(url string, log *slog.Logger) *Poster {
	return &Poster{url: url, client: &http.Client{Timeout: Timeout}, log: log, slots: make(chan struct{}, InFlight)}
}

// Post sends a as the JSON body of a POST, in the background, and returns
// at once. A delivery that fails or is answered with a status other than
// 2xx is logged, not retried.
func (p *Poster) Post(a sandbox.Alarm) {
	select {
	case p.slots <- struct{}{}:
	default:
		p.log.Warn("webhook: too many deliveries in flight; alarm dropped", "kind", a.Kind, "agent", a.Agent)
		return
	}
	go func() {
		defer func() { <-p.slots }()
		if err := p.deliver(a); err != nil {
			p.log.Warn("webhook: alarm not delivered", "kind", a.Kind, "agent", a.Agent, "err", err)
		}
	}()
}

func (p *Poster) deliver(a sandbox.Alarm) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", p.url, resp.Status)
	}
	return nil
}
