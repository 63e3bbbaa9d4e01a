// Package configdoc renders the reference of a struct of settings as Markdown: one row per
// setting, its environment variable, its Go field, its default, what it accepts and what it
// means. Everything comes from the code: the variable from the field's envconfig tag, the
// meaning from its desc tag, the default from a defaults value, and what the setting accepts
// from the settings' own validation, which Render asks about each field with probe values
// (negative and zero for numbers, empty and unknown for strings).
//
// It holds no settings of its own and imports nothing of seqbus: cmd/worker feeds it
// worker.Config, worker.RelayConfig and its own settings, and a test there keeps
// docs/configuration.md equal to what it renders.
package configdoc
