// Package clock supplies time to the emulator: the wall clock in production and a
// fake clock in tests, so that lock expiry, message time-to-live and scheduled
// messages can be fast-forwarded instead of slept through.
//
// A Fake clock fires due timers synchronously, in time order, inside Advance, on the
// caller's goroutine. Timer callbacks may call the clock again (Now, AfterFunc).
//
// This package imports only the standard library and must never import anything of
// seqbus.
package clock
