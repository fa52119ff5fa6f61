package lifecycle

// SetCrashHook makes s call fn with the name of each crash point it passes
// (see Service.crash), so that a test can kill an operation there.
func SetCrashHook(s *Service, fn func(point string)) { s.crashHook = fn }
