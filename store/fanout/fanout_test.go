package fanout

import (
	"context"
	"testing"
	"time"

	"github.com/hearth/hearth/store/storetest"
)

// receive is the next notice of ch (see storetest.Receive).
var receive = storetest.Receive

func TestPublishByTopic(t *testing.T) {
	var h Hub
	ctx := t.Context()
	a, err := h.Subscribe(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.Subscribe(ctx, "b")
	h.Publish("a", "1")
	h.Publish("b", "2")
	h.Publish("a", "3")
	if got := receive(t, a) + receive(t, a); got != "13" {
		t.Fatalf("topic a got %q, want 13 in order", got)
	}
	if got := receive(t, b); got != "2" {
		t.Fatalf("topic b got %q", got)
	}
	h.PublishAll("")
	if receive(t, a) != "" || receive(t, b) != "" {
		t.Fatal("PublishAll did not reach both")
	}
}

func TestSlowListenerFolds(t *testing.T) {
	var h Hub
	ch, _ := h.Subscribe(t.Context(), "t")
	const sent = maxQueue * 3
	for i := 0; i < sent; i++ {
		h.Publish("t", "x")
	}
	// The listener sees fewer notices than were sent, one of them "":
	// what it missed is folded, never dropped silently.
	var got []string
	for {
		select {
		case v := <-ch:
			got = append(got, v)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	folded := false
	for _, v := range got {
		folded = folded || v == ""
	}
	if !folded || len(got) >= sent || got[len(got)-1] != "x" {
		t.Fatalf("a listener that fell behind got %d notices (a fold among them: %v); want fewer than %d with a fold, the newest last", len(got), folded, sent)
	}
}

func TestCloseAndCancel(t *testing.T) {
	var h Hub
	ctx, cancel := context.WithCancel(t.Context())
	a, _ := h.Subscribe(ctx, "t")
	b, _ := h.Subscribe(t.Context(), "t")
	cancel()
	if _, ok := <-a; ok {
		t.Fatal("cancelled listener got a value")
	}
	deadline := time.Now().Add(5 * time.Second)
	for subscribers(&h, "t") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("cancelled listener not removed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.Close()
	if _, ok := <-b; ok {
		t.Fatal("listener open after Close")
	}
	if _, err := h.Subscribe(t.Context(), "t"); err != ErrClosed {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	h.Close()
}

func subscribers(h *Hub, topic string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[topic])
}
