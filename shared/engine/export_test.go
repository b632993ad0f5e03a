package engine

// Deciding reports whether a decision runs now (commit.go): a test's
// adapters refuse any call made while one does.
func (e *Engine) Deciding() bool { return e.deciding.Load() > 0 }
