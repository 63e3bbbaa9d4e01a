package amqpwire

// Source is the source terminus of a link (descriptor 0x28).
type Source struct {
	Address               string // "" = null
	Durable               uint32 // terminus-durability: 0 none, 1 configuration, 2 unsettled-state
	ExpiryPolicy          Symbol // "" encodes as null; decoding applies the default "session-end"
	Timeout               uint32 // seconds
	Dynamic               bool
	DynamicNodeProperties map[Symbol]any
	DistributionMode      Symbol
	Filter                map[Symbol]any // values are normally Described
	DefaultOutcome        DeliveryState
	Outcomes              []Symbol
	Capabilities          []Symbol
}

func (s *Source) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSource, depth)
	e.str(s.Address)
	e.uint32Or(s.Durable, 0)
	e.sym(s.ExpiryPolicy)
	e.uint32Or(s.Timeout, 0)
	e.boolean(s.Dynamic)
	e.symMap("dynamic-node-properties", s.DynamicNodeProperties)
	e.sym(s.DistributionMode)
	e.symMap("filter", s.Filter)
	e.nested("default-outcome", s.DefaultOutcome, s.DefaultOutcome == nil)
	e.symbols("outcomes", s.Outcomes)
	e.symbols("capabilities", s.Capabilities)
	return e.finish()
}

func decodeSource(items []any) (*Source, error) {
	f := fieldList{what: "source", items: items}
	s := &Source{
		Address:               f.str(0, "address"),
		Durable:               fieldOr[uint32](&f, 1, "durable", 0),
		ExpiryPolicy:          fieldOr(&f, 2, "expiry-policy", ExpirySessionEnd),
		Timeout:               fieldOr[uint32](&f, 3, "timeout", 0),
		Dynamic:               fieldOr(&f, 4, "dynamic", false),
		DynamicNodeProperties: f.symMap(5, "dynamic-node-properties"),
		DistributionMode:      f.sym(6, "distribution-mode"),
		Filter:                f.symMap(7, "filter"),
		DefaultOutcome:        f.deliveryState(8, "default-outcome"),
		Outcomes:              f.symbols(9, "outcomes"),
		Capabilities:          f.symbols(10, "capabilities"),
	}
	return s, f.err
}

// Target is the target terminus of a link (descriptor 0x29).
type Target struct {
	Address               string // "" = null
	Durable               uint32
	ExpiryPolicy          Symbol // "" encodes as null; decoding applies the default "session-end"
	Timeout               uint32 // seconds
	Dynamic               bool
	DynamicNodeProperties map[Symbol]any
	Capabilities          []Symbol
}

func (t *Target) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if t == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descTarget, depth)
	e.str(t.Address)
	e.uint32Or(t.Durable, 0)
	e.sym(t.ExpiryPolicy)
	e.uint32Or(t.Timeout, 0)
	e.boolean(t.Dynamic)
	e.symMap("dynamic-node-properties", t.DynamicNodeProperties)
	e.symbols("capabilities", t.Capabilities)
	return e.finish()
}

func decodeTarget(items []any) (*Target, error) {
	f := fieldList{what: "target", items: items}
	t := &Target{
		Address:               f.str(0, "address"),
		Durable:               fieldOr[uint32](&f, 1, "durable", 0),
		ExpiryPolicy:          fieldOr(&f, 2, "expiry-policy", ExpirySessionEnd),
		Timeout:               fieldOr[uint32](&f, 3, "timeout", 0),
		Dynamic:               fieldOr(&f, 4, "dynamic", false),
		DynamicNodeProperties: f.symMap(5, "dynamic-node-properties"),
		Capabilities:          f.symbols(6, "capabilities"),
	}
	return t, f.err
}

// DeliveryState is a delivery state or outcome: *Accepted, *Rejected,
// *Released, *Modified or *Received.
type DeliveryState interface {
	appender
	deliveryState()
}

// Accepted is the accepted outcome (descriptor 0x24).
type Accepted struct{}

// Rejected is the rejected outcome (descriptor 0x25).
type Rejected struct {
	Error *Error
}

// Released is the released outcome (descriptor 0x26).
type Released struct{}

// Modified is the modified outcome (descriptor 0x27).
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations map[any]any
}

// Received is the received delivery state (descriptor 0x23).
type Received struct {
	SectionNumber uint32
	SectionOffset uint64
}

func (*Accepted) deliveryState() {}
func (*Rejected) deliveryState() {}
func (*Released) deliveryState() {}
func (*Modified) deliveryState() {}
func (*Received) deliveryState() {}

func (*Accepted) appendAMQP(dst []byte, depth int) ([]byte, error) {
	e := newListEncoder(dst, descAccepted, depth)
	return e.finish()
}

func (*Released) appendAMQP(dst []byte, depth int) ([]byte, error) {
	e := newListEncoder(dst, descReleased, depth)
	return e.finish()
}

func (r *Rejected) appendAMQP(dst []byte, depth int) ([]byte, error) {
	e := newListEncoder(dst, descRejected, depth)
	if r != nil {
		e.nested("error", r.Error, r.Error == nil)
	}
	return e.finish()
}

func (m *Modified) appendAMQP(dst []byte, depth int) ([]byte, error) {
	e := newListEncoder(dst, descModified, depth)
	if m != nil {
		e.boolean(m.DeliveryFailed)
		e.boolean(m.UndeliverableHere)
		if m.MessageAnnotations != nil {
			e.value("message-annotations", m.MessageAnnotations)
		} else {
			e.null()
		}
	}
	return e.finish()
}

func (r *Received) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if r == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descReceived, depth)
	e.uint32(r.SectionNumber)
	e.buf = appendUlong(e.buf, r.SectionOffset)
	e.mark()
	return e.finish()
}

func decodeDeliveryState(code uint64, items []any) (DeliveryState, error) {
	switch code {
	case descAccepted:
		return &Accepted{}, nil
	case descReleased:
		return &Released{}, nil
	case descRejected:
		f := fieldList{what: "rejected", items: items}
		return &Rejected{Error: f.errorField(0, "error")}, f.err
	case descModified:
		f := fieldList{what: "modified", items: items}
		m := &Modified{
			DeliveryFailed:     fieldOr(&f, 0, "delivery-failed", false),
			UndeliverableHere:  fieldOr(&f, 1, "undeliverable-here", false),
			MessageAnnotations: f.anyMap(2, "message-annotations"),
		}
		return m, f.err
	case descReceived:
		f := fieldList{what: "received", items: items}
		f.mandatory(0, "section-number")
		f.mandatory(1, "section-offset")
		r := &Received{
			SectionNumber: fieldOr[uint32](&f, 0, "section-number", 0),
			SectionOffset: fieldOr[uint64](&f, 1, "section-offset", 0),
		}
		return r, f.err
	}
	return nil, malformed("unknown delivery state descriptor %#x", code)
}
