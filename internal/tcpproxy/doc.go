// Package tcpproxy is a TCP proxy for tests that cut connections: every connection accepted on
// its listener is piped to a fixed upstream address, and [Proxy.Cut] closes all of them at once
// while new connections keep being accepted. The chaos tests put one between worker processes
// and the emulator, so that a cut looks to the client exactly like a network failure: the TCP
// connection ends and the broker releases what the connection held (session locks).
//
// It imports only the standard library.
package tcpproxy
