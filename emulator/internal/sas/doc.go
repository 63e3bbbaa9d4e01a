// Package sas parses and verifies Service Bus shared access signature
// tokens ("SharedAccessSignature sr=…&sig=…&se=…&skn=…") the way the
// emulator's $cbs node and HTTP endpoints need to.
//
// It imports only the standard library and must never import the emulator's
// AMQP, broker or server packages.
package sas
