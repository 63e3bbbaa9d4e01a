// Package clock supplies time to seqbus: the Clock interface that the sequencer (handler retry
// backoff, lock renewal, idle timeouts) and the emulator (lock expiry, time-to-live, scheduled
// messages) take, the wall clock (Real), and Fake, a clock that moves only when a test advances
// it, so that tests fast-forward instead of sleeping.
//
// A Fake fires due timers inside Advance (or Set), in time order, on the caller's goroutine:
// AfterFunc callbacks run there with no clock lock held (they may call the clock again, and
// Now reports their due time while they run), and NewTimer timers receive on their channel.
// WaitForTimers lets a test advance only once the code under test waits.
//
// This package imports only the standard library and must never import anything of seqbus.
package clock
