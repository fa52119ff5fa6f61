package lifecycle

import (
	"context"
	"time"
)

// SetCrashHook makes s call fn with the name of each crash point it passes
// (see Service.crash), so that a test can kill an operation there.
func SetCrashHook(s *Service, fn func(point string)) { s.crashHook = fn }

// Sweep runs one sweep of s, as Run does every SweepInterval.
func Sweep(ctx context.Context, s *Service) { s.sweep(ctx) }

// FillPool runs one refill of s's warm pool, as Run's refiller does.
func FillPool(ctx context.Context, s *Service) { s.refill(ctx) }

// SetRefillWait sets how long the refill after a claim waits for the
// claimed sandbox to be quiet, and at most (refillQuiet, refillWaitMax).
func SetRefillWait(s *Service, quiet, max time.Duration) {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	s.pool.quiet, s.pool.waitMax = quiet, max
}
