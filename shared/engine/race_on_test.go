//go:build race

package engine_test

// raceDetector: the tests run under the race detector, which makes a
// decision some ten times slower; the widest jobs run narrower then.
const raceDetector = true
