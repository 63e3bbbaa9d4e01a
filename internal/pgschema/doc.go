// Package pgschema creates a migrated Postgres schema of one run's own (the demo, a benchmark
// cell, a soak) and drops it afterwards, so that runs share a database without seeing each other.
package pgschema
