// Package contract holds what seqbus shares with the world outside one process: the names of
// the application properties that carry a session's order (the message contract between
// publishers and the worker), and the duration format of Service Bus, which the management API,
// the emulator's Config.json and topology files use.
//
// # Message contract
//
// SequenceProperty ("Sequence") carries the application sequence of a message within its
// session, 1, 2, 3, …; LastProperty ("IsLast") is true on the last message. They are the
// defaults of the worker (sequencer.EngineConfig, SEQBUS_SEQUENCE_PROPERTY and
// SEQBUS_LAST_PROPERTY), the publisher and the outbox relay; each of those can be configured
// to other names.
//
// [Parse] is the one reader of the contract, for the engine, the operator commands and the
// tools alike. A sequence is an integer of any Go integer type or a base-10 string, at least 1.
// The last mark is true when the property is the bool true or the string "true" in any case;
// it is false when the property is absent, nil, the bool false, "false" in any case or the
// empty string; any other value makes the message invalid (as an invalid sequence does).
//
// # Durations
//
// Service Bus is a .NET service: its management API reads and writes a TimeSpan as an XML
// Schema duration (xs:duration) through XmlConvert. ParseDuration accepts exactly what
// XmlConvert.ToTimeSpan accepts, except negative durations, which no Service Bus property
// takes:
//
//	P [n Y] [n M] [n D] [T [n H] [n M] [n [.f] S]]
//
// with the designators in this order, at least one of them, T only before a time part, every
// n a decimal integer of at most 2147483647, and a fraction (up to nanoseconds; further digits
// are dropped) only on the seconds. A year counts 365 days; months count 365 days per 12 and 30
// days for each month left over, as .NET converts them (P1M is 30 days, P12M 365). ISO 8601
// forms outside xs:duration are refused, as the service refuses them: weeks (P2W), a decimal
// comma (PT0,5S), fractions of other units (P1.5D), lower-case designators. Surrounding white
// space is ignored.
//
// A duration longer than a time.Duration can hold (about 292 years) is Forever; this includes
// TimeSpan.MaxValue (P10675199DT2H48M5.4775807S), which Service Bus reports for "no limit". A
// duration longer than TimeSpan.MaxValue is an error, as it is for the service.
//
// FormatDuration writes what XmlConvert.ToString writes for a TimeSpan: days, hours, minutes
// and seconds with a fraction, designators for zero parts left out (P14D, PT1M, P1DT2H30M,
// PT0.5S, PT0S), and Forever as TimeSpan.MaxValue. ParseDuration(FormatDuration(d)) is d for
// every d from 0 to Forever.
//
// This package imports only the standard library and must never import anything of seqbus.
package contract
