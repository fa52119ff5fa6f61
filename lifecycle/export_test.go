package lifecycle

import (
	"context"
	"time"
)

// SetCrashHook makes s call fn with the name of each crash point it passes
// (see core.crash), so that a test can kill an operation there.
func SetCrashHook(s *Service, fn func(point string)) { s.core.crashHook = fn }

// Sweep runs one sweep of s, as Run does every SweepInterval.
func Sweep(ctx context.Context, s *Service) { s.sweep.sweep(ctx) }

// FillPool runs one refill of s's warm pool, as Run's refiller does.
func FillPool(ctx context.Context, s *Service) { s.Pool.refill(ctx) }

// SetRefillWait sets how long the refill after a claim waits for the
// claimed sandbox to be quiet, and at most (refillQuiet, refillWaitMax).
func SetRefillWait(s *Service, quiet, max time.Duration) {
	s.Pool.mu.Lock()
	defer s.Pool.mu.Unlock()
	s.Pool.quiet, s.Pool.waitMax = quiet, max
}

// Queued returns how many foreground calls wait in s's heavy queue.
func Queued(s *Service) int {
	s.core.heavy.mu.Lock()
	defer s.core.heavy.mu.Unlock()
	return s.core.heavy.waiting
}

// QueuedCommands returns how many commands wait in s's command queue.
func QueuedCommands(s *Service) int {
	s.Processes.commands.mu.Lock()
	defer s.Processes.commands.mu.Unlock()
	return s.Processes.commands.waiting
}

// SetCommandHold sets the longest a command holds its slot of the command
// queue (execHold). Call it before any exec.
func SetCommandHold(s *Service, d time.Duration) { s.Processes.hold = d }

// ProbeGap is the least time between two of the sweep's probes of agents.
const ProbeGap = probeGap

// SampleUsage samples the usage of s's running sandboxes once.
func SampleUsage(ctx context.Context, s *Service) { s.Usage.sample(ctx) }
