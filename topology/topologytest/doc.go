// Package topologytest holds test helpers for topology: Fake, an in-memory
// topology.Admin, and Exercise, the conformance suite every topology.Admin must pass.
//
// # Imports
//
// It imports topology, testify and the standard library, and must never import the
// emulator or the Azure SDK. Production code must never import it.
package topologytest
