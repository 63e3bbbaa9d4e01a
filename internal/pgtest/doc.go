// Package pgtest gives tests a real, isolated Postgres: every test that calls [NewPool] gets a
// pool whose search_path points at a fresh schema of its own, dropped when the test ends, so
// Postgres tests can run with t.Parallel().
//
// The server is found through SEQBUS_TEST_DATABASE_URL (default [DefaultDSN]). When it does not
// answer, pgtest tries once per process to start the local cluster with pg_ctlcluster and waits
// for it. When it still does not answer, the test fails if CI=true and is skipped otherwise, in
// both cases with a message that says how to fix it.
//
// pgtest is for tests only: production code must never import it. It imports only pgx and the
// standard library (never another seqbus package).
package pgtest
