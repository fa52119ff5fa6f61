package lifecycle

import "context"

// SetCrashHook makes s call fn with the name of each crash point it passes
// (see Service.crash), so that a test can kill an operation there.
func SetCrashHook(s *Service, fn func(point string)) { s.crashHook = fn }

// Sweep runs one sweep of s, as Run does every SweepInterval.
func Sweep(ctx context.Context, s *Service) { s.sweep(ctx) }

// FillPool runs one refill of s's warm pool, as Run's refiller does.
func FillPool(ctx context.Context, s *Service) { s.refill(ctx) }
