package policy

// WithDefaultGate returns l with the default destructive patterns, for
// tests that build Limits by hand.
func WithDefaultGate(l Limits) Limits {
	l.gate = defaultGate
	return l
}
