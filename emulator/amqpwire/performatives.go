package amqpwire

import (
	"fmt"
	"time"
)

// Descriptor codes of the performatives and types of this package.
const (
	descOpen          uint64 = 0x10
	descBegin         uint64 = 0x11
	descAttach        uint64 = 0x12
	descFlow          uint64 = 0x13
	descTransfer      uint64 = 0x14
	descDisposition   uint64 = 0x15
	descDetach        uint64 = 0x16
	descEnd           uint64 = 0x17
	descClose         uint64 = 0x18
	descError         uint64 = 0x1d
	descReceived      uint64 = 0x23
	descAccepted      uint64 = 0x24
	descRejected      uint64 = 0x25
	descReleased      uint64 = 0x26
	descModified      uint64 = 0x27
	descSource        uint64 = 0x28
	descTarget        uint64 = 0x29
	descSASLMechanism uint64 = 0x40
	descSASLInit      uint64 = 0x41
	descSASLChallenge uint64 = 0x42
	descSASLResponse  uint64 = 0x43
	descSASLOutcome   uint64 = 0x44
)

var symbolicDescriptors = map[Symbol]uint64{
	"amqp:open:list":                  descOpen,
	"amqp:begin:list":                 descBegin,
	"amqp:attach:list":                descAttach,
	"amqp:flow:list":                  descFlow,
	"amqp:transfer:list":              descTransfer,
	"amqp:disposition:list":           descDisposition,
	"amqp:detach:list":                descDetach,
	"amqp:end:list":                   descEnd,
	"amqp:close:list":                 descClose,
	"amqp:error:list":                 descError,
	"amqp:received:list":              descReceived,
	"amqp:accepted:list":              descAccepted,
	"amqp:rejected:list":              descRejected,
	"amqp:released:list":              descReleased,
	"amqp:modified:list":              descModified,
	"amqp:source:list":                descSource,
	"amqp:target:list":                descTarget,
	"amqp:sasl-mechanisms:list":       descSASLMechanism,
	"amqp:sasl-init:list":             descSASLInit,
	"amqp:sasl-challenge:list":        descSASLChallenge,
	"amqp:sasl-response:list":         descSASLResponse,
	"amqp:sasl-outcome:list":          descSASLOutcome,
	"amqp:header:list":                SectionHeader,
	"amqp:delivery-annotations:map":   SectionDeliveryAnnotations,
	"amqp:message-annotations:map":    SectionMessageAnnotations,
	"amqp:properties:list":            SectionProperties,
	"amqp:application-properties:map": SectionApplicationProperties,
	"amqp:data:binary":                SectionData,
	"amqp:amqp-sequence:list":         SectionAMQPSequence,
	"amqp:amqp-value:*":               SectionAMQPValue,
	"amqp:footer:map":                 SectionFooter,
}

// Role is the role of a link endpoint: false for sender, true for receiver.
type Role bool

// Link roles.
const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

func (r Role) String() string {
	if r {
		return "receiver"
	}
	return "sender"
}

// SenderSettleMode is the snd-settle-mode of a link.
type SenderSettleMode uint8

// Sender settle modes.
const (
	SenderSettleModeUnsettled SenderSettleMode = 0
	SenderSettleModeSettled   SenderSettleMode = 1
	SenderSettleModeMixed     SenderSettleMode = 2 // the default
)

// ReceiverSettleMode is the rcv-settle-mode of a link.
type ReceiverSettleMode uint8

// Receiver settle modes.
const (
	ReceiverSettleModeFirst  ReceiverSettleMode = 0 // the default
	ReceiverSettleModeSecond ReceiverSettleMode = 1
)

// Terminus expiry policies.
const (
	ExpiryLinkDetach      Symbol = "link-detach"
	ExpirySessionEnd      Symbol = "session-end" // the default
	ExpiryConnectionClose Symbol = "connection-close"
	ExpiryNever           Symbol = "never"
)

// SASL outcome codes.
const (
	SASLCodeOK      uint8 = 0
	SASLCodeAuth    uint8 = 1
	SASLCodeSys     uint8 = 2
	SASLCodeSysPerm uint8 = 3
	SASLCodeSysTemp uint8 = 4
)

// Open is the open performative (descriptor 0x10).
type Open struct {
	ContainerID         string
	Hostname            string
	MaxFrameSize        uint32 // default 4294967295
	ChannelMax          uint16 // default 65535
	IdleTimeout         time.Duration
	OutgoingLocales     []Symbol
	IncomingLocales     []Symbol
	OfferedCapabilities []Symbol
	DesiredCapabilities []Symbol
	Properties          map[Symbol]any
}

func (o *Open) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if o == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descOpen, depth)
	e.strAlways(o.ContainerID)
	e.str(o.Hostname)
	e.uint32Or(o.MaxFrameSize, 4294967295)
	if o.ChannelMax == 65535 {
		e.null()
	} else {
		e.value("channel-max", o.ChannelMax)
	}
	if o.IdleTimeout > 0 {
		e.uint32(uint32(min(o.IdleTimeout.Milliseconds(), 4294967295)))
	} else {
		e.null()
	}
	e.symbols("outgoing-locales", o.OutgoingLocales)
	e.symbols("incoming-locales", o.IncomingLocales)
	e.symbols("offered-capabilities", o.OfferedCapabilities)
	e.symbols("desired-capabilities", o.DesiredCapabilities)
	e.symMap("properties", o.Properties)
	return e.finish()
}

func decodeOpen(items []any) (*Open, error) {
	f := fieldList{what: "open", items: items}
	f.mandatory(0, "container-id")
	o := &Open{
		ContainerID:         f.str(0, "container-id"),
		Hostname:            f.str(1, "hostname"),
		MaxFrameSize:        fieldOr[uint32](&f, 2, "max-frame-size", 4294967295),
		ChannelMax:          fieldOr[uint16](&f, 3, "channel-max", 65535),
		IdleTimeout:         f.milliseconds(4, "idle-time-out"),
		OutgoingLocales:     f.symbols(5, "outgoing-locales"),
		IncomingLocales:     f.symbols(6, "incoming-locales"),
		OfferedCapabilities: f.symbols(7, "offered-capabilities"),
		DesiredCapabilities: f.symbols(8, "desired-capabilities"),
		Properties:          f.symMap(9, "properties"),
	}
	return o, f.err
}

// Begin is the begin performative (descriptor 0x11).
type Begin struct {
	RemoteChannel       *uint16 // nil when the peer initiates the session
	NextOutgoingID      uint32
	IncomingWindow      uint32
	OutgoingWindow      uint32
	HandleMax           uint32 // default 4294967295
	OfferedCapabilities []Symbol
	DesiredCapabilities []Symbol
	Properties          map[Symbol]any
}

func (b *Begin) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if b == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descBegin, depth)
	if b.RemoteChannel != nil {
		e.value("remote-channel", *b.RemoteChannel)
	} else {
		e.null()
	}
	e.uint32(b.NextOutgoingID)
	e.uint32(b.IncomingWindow)
	e.uint32(b.OutgoingWindow)
	e.uint32Or(b.HandleMax, 4294967295)
	e.symbols("offered-capabilities", b.OfferedCapabilities)
	e.symbols("desired-capabilities", b.DesiredCapabilities)
	e.symMap("properties", b.Properties)
	return e.finish()
}

func decodeBegin(items []any) (*Begin, error) {
	f := fieldList{what: "begin", items: items}
	f.mandatory(1, "next-outgoing-id")
	f.mandatory(2, "incoming-window")
	f.mandatory(3, "outgoing-window")
	b := &Begin{
		RemoteChannel:       fieldPtr[uint16](&f, 0, "remote-channel"),
		NextOutgoingID:      fieldOr[uint32](&f, 1, "next-outgoing-id", 0),
		IncomingWindow:      fieldOr[uint32](&f, 2, "incoming-window", 0),
		OutgoingWindow:      fieldOr[uint32](&f, 3, "outgoing-window", 0),
		HandleMax:           fieldOr[uint32](&f, 4, "handle-max", 4294967295),
		OfferedCapabilities: f.symbols(5, "offered-capabilities"),
		DesiredCapabilities: f.symbols(6, "desired-capabilities"),
		Properties:          f.symMap(7, "properties"),
	}
	return b, f.err
}

// Attach is the attach performative (descriptor 0x12). A nil Source or Target
// is encoded as null, which is how a refused attach is signalled.
type Attach struct {
	Name                 string
	Handle               uint32
	Role                 Role
	SndSettleMode        SenderSettleMode   // default mixed
	RcvSettleMode        ReceiverSettleMode // default first
	Source               *Source
	Target               *Target
	Unsettled            map[any]any
	IncompleteUnsettled  bool
	InitialDeliveryCount uint32
	MaxMessageSize       uint64 // 0 = no limit (encoded as null)
	OfferedCapabilities  []Symbol
	DesiredCapabilities  []Symbol
	Properties           map[Symbol]any
}

func (a *Attach) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if a == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descAttach, depth)
	e.strAlways(a.Name)
	e.uint32(a.Handle)
	e.booleanAlways(bool(a.Role))
	e.ubyte(uint8(a.SndSettleMode))
	e.ubyte(uint8(a.RcvSettleMode))
	e.nested("source", a.Source, a.Source == nil)
	e.nested("target", a.Target, a.Target == nil)
	if a.Unsettled != nil {
		e.value("unsettled", a.Unsettled)
	} else {
		e.null()
	}
	e.boolean(a.IncompleteUnsettled)
	if a.Role == RoleSender {
		e.uint32(a.InitialDeliveryCount)
	} else {
		e.uint32Or(a.InitialDeliveryCount, 0)
	}
	e.ulongOr(a.MaxMessageSize, 0)
	e.symbols("offered-capabilities", a.OfferedCapabilities)
	e.symbols("desired-capabilities", a.DesiredCapabilities)
	e.symMap("properties", a.Properties)
	return e.finish()
}

func decodeAttach(items []any) (*Attach, error) {
	f := fieldList{what: "attach", items: items}
	f.mandatory(0, "name")
	f.mandatory(1, "handle")
	f.mandatory(2, "role")
	a := &Attach{
		Name:                 f.str(0, "name"),
		Handle:               fieldOr[uint32](&f, 1, "handle", 0),
		Role:                 Role(fieldOr(&f, 2, "role", false)),
		SndSettleMode:        SenderSettleMode(fieldOr[uint8](&f, 3, "snd-settle-mode", uint8(SenderSettleModeMixed))),
		RcvSettleMode:        ReceiverSettleMode(fieldOr[uint8](&f, 4, "rcv-settle-mode", uint8(ReceiverSettleModeFirst))),
		Unsettled:            f.anyMap(7, "unsettled"),
		IncompleteUnsettled:  fieldOr(&f, 8, "incomplete-unsettled", false),
		InitialDeliveryCount: fieldOr[uint32](&f, 9, "initial-delivery-count", 0),
		MaxMessageSize:       fieldOr[uint64](&f, 10, "max-message-size", 0),
		OfferedCapabilities:  f.symbols(11, "offered-capabilities"),
		DesiredCapabilities:  f.symbols(12, "desired-capabilities"),
		Properties:           f.symMap(13, "properties"),
	}
	if code, fields, ok := f.described(5, "source"); ok {
		if code != descSource {
			f.fail("source", "want source, got descriptor %#x", code)
		} else if s, err := decodeSource(fields); err != nil {
			f.fail("source", "%v", err)
		} else {
			a.Source = s
		}
	}
	if code, fields, ok := f.described(6, "target"); ok {
		if code != descTarget {
			f.fail("target", "want target, got descriptor %#x", code)
		} else if t, err := decodeTarget(fields); err != nil {
			f.fail("target", "%v", err)
		} else {
			a.Target = t
		}
	}
	return a, f.err
}

// Flow is the flow performative (descriptor 0x13). The link fields (Handle,
// DeliveryCount, LinkCredit, Available) are nil for a session-only flow.
type Flow struct {
	NextIncomingID *uint32
	IncomingWindow uint32
	NextOutgoingID uint32
	OutgoingWindow uint32
	Handle         *uint32
	DeliveryCount  *uint32
	LinkCredit     *uint32
	Available      *uint32
	Drain          bool
	Echo           bool
	Properties     map[Symbol]any
}

func (fl *Flow) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if fl == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descFlow, depth)
	e.uint32Ptr(fl.NextIncomingID)
	e.uint32(fl.IncomingWindow)
	e.uint32(fl.NextOutgoingID)
	e.uint32(fl.OutgoingWindow)
	e.uint32Ptr(fl.Handle)
	e.uint32Ptr(fl.DeliveryCount)
	e.uint32Ptr(fl.LinkCredit)
	e.uint32Ptr(fl.Available)
	e.boolean(fl.Drain)
	e.boolean(fl.Echo)
	e.symMap("properties", fl.Properties)
	return e.finish()
}

func decodeFlow(items []any) (*Flow, error) {
	f := fieldList{what: "flow", items: items}
	f.mandatory(1, "incoming-window")
	f.mandatory(2, "next-outgoing-id")
	f.mandatory(3, "outgoing-window")
	fl := &Flow{
		NextIncomingID: fieldPtr[uint32](&f, 0, "next-incoming-id"),
		IncomingWindow: fieldOr[uint32](&f, 1, "incoming-window", 0),
		NextOutgoingID: fieldOr[uint32](&f, 2, "next-outgoing-id", 0),
		OutgoingWindow: fieldOr[uint32](&f, 3, "outgoing-window", 0),
		Handle:         fieldPtr[uint32](&f, 4, "handle"),
		DeliveryCount:  fieldPtr[uint32](&f, 5, "delivery-count"),
		LinkCredit:     fieldPtr[uint32](&f, 6, "link-credit"),
		Available:      fieldPtr[uint32](&f, 7, "available"),
		Drain:          fieldOr(&f, 8, "drain", false),
		Echo:           fieldOr(&f, 9, "echo", false),
		Properties:     f.symMap(10, "properties"),
	}
	return fl, f.err
}

// Transfer is the transfer performative (descriptor 0x14). The message bytes
// travel in Frame.Payload, not here.
type Transfer struct {
	Handle        uint32
	DeliveryID    *uint32 // nil on continuation frames of a multi-frame delivery
	DeliveryTag   []byte  // nil = absent
	MessageFormat *uint32
	Settled       *bool
	More          bool
	RcvSettleMode *ReceiverSettleMode
	State         DeliveryState
	Resume        bool
	Aborted       bool
	Batchable     bool
}

func (t *Transfer) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if t == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descTransfer, depth)
	e.uint32(t.Handle)
	e.uint32Ptr(t.DeliveryID)
	e.binary(t.DeliveryTag)
	e.uint32Ptr(t.MessageFormat)
	e.boolPtr(t.Settled)
	e.boolean(t.More)
	if t.RcvSettleMode != nil {
		e.ubyte(uint8(*t.RcvSettleMode))
	} else {
		e.null()
	}
	e.nested("state", t.State, t.State == nil)
	e.boolean(t.Resume)
	e.boolean(t.Aborted)
	e.boolean(t.Batchable)
	return e.finish()
}

func decodeTransfer(items []any) (*Transfer, error) {
	f := fieldList{what: "transfer", items: items}
	f.mandatory(0, "handle")
	t := &Transfer{
		Handle:        fieldOr[uint32](&f, 0, "handle", 0),
		DeliveryID:    fieldPtr[uint32](&f, 1, "delivery-id"),
		DeliveryTag:   f.binary(2, "delivery-tag"),
		MessageFormat: fieldPtr[uint32](&f, 3, "message-format"),
		Settled:       fieldPtr[bool](&f, 4, "settled"),
		More:          fieldOr(&f, 5, "more", false),
		State:         f.deliveryState(7, "state"),
		Resume:        fieldOr(&f, 8, "resume", false),
		Aborted:       fieldOr(&f, 9, "aborted", false),
		Batchable:     fieldOr(&f, 10, "batchable", false),
	}
	if m, ok := field[uint8](&f, 6, "rcv-settle-mode"); ok {
		mode := ReceiverSettleMode(m)
		t.RcvSettleMode = &mode
	}
	return t, f.err
}

// Disposition is the disposition performative (descriptor 0x15).
type Disposition struct {
	Role      Role
	First     uint32
	Last      *uint32 // nil = same as First
	Settled   bool
	State     DeliveryState
	Batchable bool
}

func (d *Disposition) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if d == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descDisposition, depth)
	e.booleanAlways(bool(d.Role))
	e.uint32(d.First)
	e.uint32Ptr(d.Last)
	e.boolean(d.Settled)
	e.nested("state", d.State, d.State == nil)
	e.boolean(d.Batchable)
	return e.finish()
}

func decodeDisposition(items []any) (*Disposition, error) {
	f := fieldList{what: "disposition", items: items}
	f.mandatory(0, "role")
	f.mandatory(1, "first")
	d := &Disposition{
		Role:      Role(fieldOr(&f, 0, "role", false)),
		First:     fieldOr[uint32](&f, 1, "first", 0),
		Last:      fieldPtr[uint32](&f, 2, "last"),
		Settled:   fieldOr(&f, 3, "settled", false),
		State:     f.deliveryState(4, "state"),
		Batchable: fieldOr(&f, 5, "batchable", false),
	}
	return d, f.err
}

// Detach is the detach performative (descriptor 0x16).
type Detach struct {
	Handle uint32
	Closed bool
	Error  *Error
}

func (d *Detach) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if d == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descDetach, depth)
	e.uint32(d.Handle)
	e.boolean(d.Closed)
	e.nested("error", d.Error, d.Error == nil)
	return e.finish()
}

func decodeDetach(items []any) (*Detach, error) {
	f := fieldList{what: "detach", items: items}
	f.mandatory(0, "handle")
	d := &Detach{
		Handle: fieldOr[uint32](&f, 0, "handle", 0),
		Closed: fieldOr(&f, 1, "closed", false),
		Error:  f.errorField(2, "error"),
	}
	return d, f.err
}

// End is the end performative (descriptor 0x17).
type End struct {
	Error *Error
}

func (x *End) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if x == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descEnd, depth)
	e.nested("error", x.Error, x.Error == nil)
	return e.finish()
}

// Close is the close performative (descriptor 0x18).
type Close struct {
	Error *Error
}

func (x *Close) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if x == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descClose, depth)
	e.nested("error", x.Error, x.Error == nil)
	return e.finish()
}

// Error is the AMQP error type (descriptor 0x1d), carried by detach, end,
// close and the rejected outcome.
type Error struct {
	Condition   Symbol
	Description string
	Info        map[Symbol]any
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Description == "" {
		return "amqp error " + string(e.Condition)
	}
	return fmt.Sprintf("amqp error %s: %s", e.Condition, e.Description)
}

func (e *Error) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if e == nil {
		return append(dst, codeNull), nil
	}
	l := newListEncoder(dst, descError, depth)
	l.symAlways(e.Condition)
	l.str(e.Description)
	l.symMap("info", e.Info)
	return l.finish()
}

func decodeError(items []any) (*Error, error) {
	f := fieldList{what: "error", items: items}
	f.mandatory(0, "condition")
	e := &Error{
		Condition:   f.sym(0, "condition"),
		Description: f.str(1, "description"),
		Info:        f.symMap(2, "info"),
	}
	return e, f.err
}

// SASLMechanisms is the sasl-mechanisms frame body (descriptor 0x40).
type SASLMechanisms struct {
	Mechanisms []Symbol
}

func (s *SASLMechanisms) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSASLMechanism, depth)
	if len(s.Mechanisms) == 0 {
		return dst, fmt.Errorf("amqpwire: encode sasl-mechanisms: no mechanisms")
	}
	e.value("sasl-server-mechanisms", SymbolArray(s.Mechanisms...))
	return e.finish()
}

// SASLInit is the sasl-init frame body (descriptor 0x41).
type SASLInit struct {
	Mechanism       Symbol
	InitialResponse []byte
	Hostname        string
}

func (s *SASLInit) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSASLInit, depth)
	e.symAlways(s.Mechanism)
	e.binary(s.InitialResponse)
	e.str(s.Hostname)
	return e.finish()
}

// SASLChallenge is the sasl-challenge frame body (descriptor 0x42).
type SASLChallenge struct {
	Challenge []byte
}

func (s *SASLChallenge) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSASLChallenge, depth)
	e.buf = appendVariable(e.buf, codeVbin8, codeVbin32, s.Challenge)
	e.mark()
	return e.finish()
}

// SASLResponse is the sasl-response frame body (descriptor 0x43).
type SASLResponse struct {
	Response []byte
}

func (s *SASLResponse) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSASLResponse, depth)
	e.buf = appendVariable(e.buf, codeVbin8, codeVbin32, s.Response)
	e.mark()
	return e.finish()
}

// SASLOutcome is the sasl-outcome frame body (descriptor 0x44).
type SASLOutcome struct {
	Code           uint8
	AdditionalData []byte
}

func (s *SASLOutcome) appendAMQP(dst []byte, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, codeNull), nil
	}
	e := newListEncoder(dst, descSASLOutcome, depth)
	e.ubyte(s.Code)
	e.binary(s.AdditionalData)
	return e.finish()
}

// DecodePerformative decodes the performative at the start of b (a frame
// body) and reports how many bytes it used; the bytes after it are the frame
// payload. The result is one of *Open, *Begin, *Attach, *Flow, *Transfer,
// *Disposition, *Detach, *End, *Close, *SASLMechanisms, *SASLInit,
// *SASLChallenge, *SASLResponse or *SASLOutcome.
func DecodePerformative(b []byte) (any, int, error) {
	v, n, err := DecodeValue(b)
	if err != nil {
		return nil, 0, fmt.Errorf("decode performative: %w", err)
	}
	code, items, err := describedList(v)
	if err != nil {
		return nil, 0, fmt.Errorf("decode performative: %w", err)
	}
	var body any
	switch code {
	case descOpen:
		body, err = decodeOpen(items)
	case descBegin:
		body, err = decodeBegin(items)
	case descAttach:
		body, err = decodeAttach(items)
	case descFlow:
		body, err = decodeFlow(items)
	case descTransfer:
		body, err = decodeTransfer(items)
	case descDisposition:
		body, err = decodeDisposition(items)
	case descDetach:
		body, err = decodeDetach(items)
	case descEnd:
		f := fieldList{what: "end", items: items}
		body, err = &End{Error: f.errorField(0, "error")}, f.err
	case descClose:
		f := fieldList{what: "close", items: items}
		body, err = &Close{Error: f.errorField(0, "error")}, f.err
	case descSASLMechanism:
		f := fieldList{what: "sasl-mechanisms", items: items}
		f.mandatory(0, "sasl-server-mechanisms")
		body, err = &SASLMechanisms{Mechanisms: f.symbols(0, "sasl-server-mechanisms")}, f.err
	case descSASLInit:
		f := fieldList{what: "sasl-init", items: items}
		f.mandatory(0, "mechanism")
		body, err = &SASLInit{
			Mechanism:       f.sym(0, "mechanism"),
			InitialResponse: f.binary(1, "initial-response"),
			Hostname:        f.str(2, "hostname"),
		}, f.err
	case descSASLChallenge:
		f := fieldList{what: "sasl-challenge", items: items}
		f.mandatory(0, "challenge")
		body, err = &SASLChallenge{Challenge: f.binary(0, "challenge")}, f.err
	case descSASLResponse:
		f := fieldList{what: "sasl-response", items: items}
		f.mandatory(0, "response")
		body, err = &SASLResponse{Response: f.binary(0, "response")}, f.err
	case descSASLOutcome:
		f := fieldList{what: "sasl-outcome", items: items}
		f.mandatory(0, "code")
		body, err = &SASLOutcome{
			Code:           fieldOr[uint8](&f, 0, "code", 0),
			AdditionalData: f.binary(1, "additional-data"),
		}, f.err
	default:
		return nil, 0, fmt.Errorf("decode performative: %w", malformed("unknown performative descriptor %#x", code))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("decode performative: %w", err)
	}
	return body, n, nil
}
