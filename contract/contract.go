package contract

// The default names of the application properties of the message contract.
const (
	// SequenceProperty carries a message's application sequence within its session (1, 2, 3, …).
	SequenceProperty = "Sequence"
	// LastProperty is true on the last message of a session.
	LastProperty = "IsLast"
)
