package clock

import "time"

// Clock tells the time and runs functions after a delay.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f (on a goroutine of the clock's choosing) once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call. It reports whether the call was still pending.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
