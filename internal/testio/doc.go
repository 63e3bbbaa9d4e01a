// Package testio holds io helpers shared by tests: SyncBuffer, an output sink that a process's
// copier (or a logger on other goroutines) and the test read and write at once; and the goleak
// option for the SDK goroutine that tests may leave behind (IgnoreSDKClaimRenewer).
package testio
