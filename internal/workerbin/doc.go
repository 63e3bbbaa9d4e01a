// Package workerbin builds the worker binary for what runs it as a process: the end-to-end
// tests, the soak and its tests.
package workerbin
