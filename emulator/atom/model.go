package atom

import (
	"encoding/xml"
	"fmt"
	"strings"
)

// XML namespaces of the Service Bus management API.
const (
	nsAtom        = "http://www.w3.org/2005/Atom"
	nsServiceBus  = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
	nsCountDetail = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
	nsXSI         = "http://www.w3.org/2001/XMLSchema-instance"
	nsXSD         = "http://www.w3.org/2001/XMLSchema"
)

// ---- requests ----

// inEntry is a PUT body: an ATOM entry whose content holds one description element.
type inEntry struct {
	XMLName xml.Name `xml:"entry"`
	Content *struct {
		Inner []byte `xml:",innerxml"`
	} `xml:"content"`
}

// inDescription reads a QueueDescription, TopicDescription or SubscriptionDescription.
// Elements are matched by local name whatever their namespace, and in any order.
type inDescription struct {
	XMLName                                   xml.Name
	LockDuration                              *string         `xml:"LockDuration"`
	MaxSizeInMegabytes                        *int32          `xml:"MaxSizeInMegabytes"`
	RequiresDuplicateDetection                *bool           `xml:"RequiresDuplicateDetection"`
	RequiresSession                           *bool           `xml:"RequiresSession"`
	DefaultMessageTimeToLive                  *string         `xml:"DefaultMessageTimeToLive"`
	DeadLetteringOnMessageExpiration          *bool           `xml:"DeadLetteringOnMessageExpiration"`
	DeadLetteringOnFilterEvaluationExceptions *bool           `xml:"DeadLetteringOnFilterEvaluationExceptions"`
	DuplicateDetectionHistoryTimeWindow       *string         `xml:"DuplicateDetectionHistoryTimeWindow"`
	MaxDeliveryCount                          *int32          `xml:"MaxDeliveryCount"`
	EnableBatchedOperations                   *bool           `xml:"EnableBatchedOperations"`
	Status                                    *string         `xml:"Status"`
	AutoDeleteOnIdle                          *string         `xml:"AutoDeleteOnIdle"`
	EnablePartitioning                        *bool           `xml:"EnablePartitioning"`
	SupportOrdering                           *bool           `xml:"SupportOrdering"`
	ForwardTo                                 *string         `xml:"ForwardTo"`
	ForwardDeadLetteredMessagesTo             *string         `xml:"ForwardDeadLetteredMessagesTo"`
	UserMetadata                              *string         `xml:"UserMetadata"`
	MaxMessageSizeInKilobytes                 *int64          `xml:"MaxMessageSizeInKilobytes"`
	AuthorizationRules                        *rawXML         `xml:"AuthorizationRules"`
	DefaultRuleDescription                    *inRuleDescribe `xml:"DefaultRuleDescription"`
}

// inRuleDescribe reads a RuleDescription or a subscription's DefaultRuleDescription.
type inRuleDescribe struct {
	XMLName xml.Name
	Filter  *inFilter `xml:"Filter"`
	Action  *inFilter `xml:"Action"`
	Name    *string   `xml:"Name"`
}

// inFilter reads a Filter or an Action. Elements are matched by local name; any
// other element lands in Unknown, and the rule is refused naming it.
type inFilter struct {
	Attrs                 []xml.Attr `xml:",any,attr"`
	SQLExpression         *string    `xml:"SqlExpression"`
	CompatibilityLevel    *string    `xml:"CompatibilityLevel"`
	RequiresPreprocessing *string    `xml:"RequiresPreprocessing"`
	CorrelationID         *string    `xml:"CorrelationId"`
	MessageID             *string    `xml:"MessageId"`
	To                    *string    `xml:"To"`
	ReplyTo               *string    `xml:"ReplyTo"`
	Label                 *string    `xml:"Label"`
	SessionID             *string    `xml:"SessionId"`
	ReplyToSessionID      *string    `xml:"ReplyToSessionId"`
	ContentType           *string    `xml:"ContentType"`
	Properties            *kvList    `xml:"Properties"`
	Parameters            *kvList    `xml:"Parameters"`
	Unknown               []struct {
		XMLName xml.Name
	} `xml:",any"`
}

// typeName returns the filter's or action's type: its xsi:type attribute. The prefix
// may be any declared for the XML Schema instance namespace (i:, xsi:, the Go encoder's
// _XMLSchema-instance:, ...); i: and xsi: are also taken undeclared, and a bare type
// attribute too. ok is false when there is no type attribute, or more than one.
func (f *inFilter) typeName() (name string, ok bool) {
	n := 0
	for _, a := range f.Attrs {
		if a.Name.Local != "type" {
			continue
		}
		switch a.Name.Space {
		case nsXSI, "i", "xsi", "":
			name = a.Value
			n++
		}
	}
	// A type may come qualified ("d2p1:SqlFilter"); the names are the service's own.
	if _, local, found := strings.Cut(name, ":"); found {
		name = local
	}
	return name, n == 1
}

// unknownElement returns the local name of the first element the filter or action
// holds that the emulator does not read, or "".
func (f *inFilter) unknownElement() string {
	if len(f.Unknown) == 0 {
		return ""
	}
	return f.Unknown[0].XMLName.Local
}

// correlationSet reports whether any element of a correlation filter is present.
func (f *inFilter) correlationSet() bool {
	return f.CorrelationID != nil || f.MessageID != nil || f.To != nil || f.ReplyTo != nil || f.Label != nil ||
		f.SessionID != nil || f.ReplyToSessionID != nil || f.ContentType != nil || f.Properties != nil
}

// kvList is a list of KeyValueOfstringanyType, the way filter properties and SQL
// parameters travel, in both directions.
type kvList struct {
	Items []kvItem `xml:"KeyValueOfstringanyType"`
}

type kvItem struct {
	Key   string  `xml:"Key"`
	Value kvValue `xml:"Value"`
}

// kvValue is a typed value such as <Value xmlns:l28="…XMLSchema" i:type="l28:string">x</Value>.
type kvValue struct {
	Attrs []xml.Attr `xml:",any,attr"`
	Text  string     `xml:",chardata"`
}

// xsdType returns the XML Schema type of the value ("string", "int", ...).
func (v kvValue) xsdType() string {
	for _, a := range v.Attrs {
		if a.Name.Local == "type" && a.Name.Space != "xmlns" {
			_, t, ok := strings.Cut(a.Value, ":")
			if !ok {
				return a.Value
			}
			return t
		}
	}
	return ""
}

func newKVValue(xsdType, text string) kvValue {
	return kvValue{
		Attrs: []xml.Attr{
			{Name: xml.Name{Local: "xmlns:d6p1"}, Value: nsXSD},
			{Name: xml.Name{Local: "i:type"}, Value: "d6p1:" + xsdType},
		},
		Text: text,
	}
}

// rawXML keeps an element's inner XML as received (authorization rules are stored and
// echoed, not interpreted).
type rawXML struct {
	Inner []byte `xml:",innerxml"`
}

// ---- responses ----

type outTitle struct {
	Type string `xml:"type,attr"`
	Text string `xml:",chardata"`
}

type outLink struct {
	Rel  string `xml:"rel,attr"`
	Href string `xml:"href,attr"`
}

type outAuthor struct {
	Name string `xml:"name"`
}

type outContent struct {
	Type string `xml:"type,attr"`
	Body any
}

type outEntry struct {
	XMLName   xml.Name   `xml:"http://www.w3.org/2005/Atom entry"`
	ID        string     `xml:"id"`
	Title     outTitle   `xml:"title"`
	Published string     `xml:"published,omitempty"`
	Updated   string     `xml:"updated"`
	Author    *outAuthor `xml:"author,omitempty"`
	Link      outLink    `xml:"link"`
	Content   outContent `xml:"content"`
}

type outFeed struct {
	XMLName xml.Name   `xml:"http://www.w3.org/2005/Atom feed"`
	Title   outTitle   `xml:"title"`
	ID      string     `xml:"id"`
	Updated string     `xml:"updated"`
	Link    outLink    `xml:"link"`
	Entries []outEntry `xml:"entry"`
}

type outError struct {
	XMLName xml.Name `xml:"Error"`
	Code    int      `xml:"Code"`
	Detail  string   `xml:"Detail"`
}

// outCountDetails is written as Service Bus writes it, with the counts in a
// namespace bound to the prefix d2p1 on CountDetails itself: the JavaScript
// admin client reads them as "<prefix>:ActiveMessageCount" with the prefix
// taken from CountDetails' only xmlns attribute (Go matches local names).
type outCountDetails struct {
	XMLNS              string `xml:"xmlns:d2p1,attr"`
	Active             int64  `xml:"d2p1:ActiveMessageCount"`
	DeadLetter         int64  `xml:"d2p1:DeadLetterMessageCount"`
	Scheduled          int64  `xml:"d2p1:ScheduledMessageCount"`
	Transfer           int64  `xml:"d2p1:TransferMessageCount"`
	TransferDeadLetter int64  `xml:"d2p1:TransferDeadLetterMessageCount"`
}

type outQueue struct {
	XMLName                             xml.Name        `xml:"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect QueueDescription"`
	XMLNSI                              string          `xml:"xmlns:i,attr"`
	LockDuration                        string          `xml:"LockDuration"`
	MaxSizeInMegabytes                  int32           `xml:"MaxSizeInMegabytes"`
	RequiresDuplicateDetection          bool            `xml:"RequiresDuplicateDetection"`
	RequiresSession                     bool            `xml:"RequiresSession"`
	DefaultMessageTimeToLive            string          `xml:"DefaultMessageTimeToLive"`
	DeadLetteringOnMessageExpiration    bool            `xml:"DeadLetteringOnMessageExpiration"`
	DuplicateDetectionHistoryTimeWindow string          `xml:"DuplicateDetectionHistoryTimeWindow"`
	MaxDeliveryCount                    int32           `xml:"MaxDeliveryCount"`
	EnableBatchedOperations             bool            `xml:"EnableBatchedOperations"`
	SizeInBytes                         int64           `xml:"SizeInBytes"`
	MessageCount                        int64           `xml:"MessageCount"`
	IsAnonymousAccessible               bool            `xml:"IsAnonymousAccessible"`
	AuthorizationRules                  rawXML          `xml:"AuthorizationRules"`
	Status                              string          `xml:"Status"`
	ForwardTo                           *string         `xml:"ForwardTo,omitempty"`
	CreatedAt                           string          `xml:"CreatedAt"`
	UpdatedAt                           string          `xml:"UpdatedAt"`
	AccessedAt                          string          `xml:"AccessedAt"`
	SupportOrdering                     bool            `xml:"SupportOrdering"`
	CountDetails                        outCountDetails `xml:"CountDetails"`
	AutoDeleteOnIdle                    string          `xml:"AutoDeleteOnIdle"`
	EnablePartitioning                  bool            `xml:"EnablePartitioning"`
	EntityAvailabilityStatus            string          `xml:"EntityAvailabilityStatus"`
	EnableExpress                       bool            `xml:"EnableExpress"`
	ForwardDeadLetteredMessagesTo       *string         `xml:"ForwardDeadLetteredMessagesTo,omitempty"`
	UserMetadata                        *string         `xml:"UserMetadata,omitempty"`
	MaxMessageSizeInKilobytes           int64           `xml:"MaxMessageSizeInKilobytes"`
}

type outTopic struct {
	XMLName                             xml.Name        `xml:"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect TopicDescription"`
	XMLNSI                              string          `xml:"xmlns:i,attr"`
	DefaultMessageTimeToLive            string          `xml:"DefaultMessageTimeToLive"`
	MaxSizeInMegabytes                  int32           `xml:"MaxSizeInMegabytes"`
	RequiresDuplicateDetection          bool            `xml:"RequiresDuplicateDetection"`
	DuplicateDetectionHistoryTimeWindow string          `xml:"DuplicateDetectionHistoryTimeWindow"`
	EnableBatchedOperations             bool            `xml:"EnableBatchedOperations"`
	SizeInBytes                         int64           `xml:"SizeInBytes"`
	FilteringMessagesBeforePublishing   bool            `xml:"FilteringMessagesBeforePublishing"`
	IsAnonymousAccessible               bool            `xml:"IsAnonymousAccessible"`
	AuthorizationRules                  rawXML          `xml:"AuthorizationRules"`
	Status                              string          `xml:"Status"`
	CreatedAt                           string          `xml:"CreatedAt"`
	UpdatedAt                           string          `xml:"UpdatedAt"`
	AccessedAt                          string          `xml:"AccessedAt"`
	SupportOrdering                     bool            `xml:"SupportOrdering"`
	CountDetails                        outCountDetails `xml:"CountDetails"`
	SubscriptionCount                   int32           `xml:"SubscriptionCount"`
	AutoDeleteOnIdle                    string          `xml:"AutoDeleteOnIdle"`
	EnablePartitioning                  bool            `xml:"EnablePartitioning"`
	EntityAvailabilityStatus            string          `xml:"EntityAvailabilityStatus"`
	EnableSubscriptionPartitioning      bool            `xml:"EnableSubscriptionPartitioning"`
	EnableExpress                       bool            `xml:"EnableExpress"`
	UserMetadata                        *string         `xml:"UserMetadata,omitempty"`
	MaxMessageSizeInKilobytes           int64           `xml:"MaxMessageSizeInKilobytes"`
	SQLFilterCount                      int32           `xml:"SqlFilterCount"`
	CorrelationFilterCount              int32           `xml:"CorrelationFilterCount"`
}

type outSubscription struct {
	XMLName                                   xml.Name        `xml:"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect SubscriptionDescription"`
	XMLNSI                                    string          `xml:"xmlns:i,attr"`
	LockDuration                              string          `xml:"LockDuration"`
	RequiresSession                           bool            `xml:"RequiresSession"`
	DefaultMessageTimeToLive                  string          `xml:"DefaultMessageTimeToLive"`
	DeadLetteringOnMessageExpiration          bool            `xml:"DeadLetteringOnMessageExpiration"`
	DeadLetteringOnFilterEvaluationExceptions bool            `xml:"DeadLetteringOnFilterEvaluationExceptions"`
	MessageCount                              int64           `xml:"MessageCount"`
	MaxDeliveryCount                          int32           `xml:"MaxDeliveryCount"`
	EnableBatchedOperations                   bool            `xml:"EnableBatchedOperations"`
	Status                                    string          `xml:"Status"`
	ForwardTo                                 *string         `xml:"ForwardTo,omitempty"`
	CreatedAt                                 string          `xml:"CreatedAt"`
	UpdatedAt                                 string          `xml:"UpdatedAt"`
	AccessedAt                                string          `xml:"AccessedAt"`
	CountDetails                              outCountDetails `xml:"CountDetails"`
	UserMetadata                              *string         `xml:"UserMetadata,omitempty"`
	ForwardDeadLetteredMessagesTo             *string         `xml:"ForwardDeadLetteredMessagesTo,omitempty"`
	AutoDeleteOnIdle                          string          `xml:"AutoDeleteOnIdle"`
	EntityAvailabilityStatus                  string          `xml:"EntityAvailabilityStatus"`
}

type outRule struct {
	XMLName   xml.Name  `xml:"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect RuleDescription"`
	XMLNSI    string    `xml:"xmlns:i,attr"`
	Filter    outFilter `xml:"Filter"`
	Action    outAction `xml:"Action"`
	CreatedAt string    `xml:"CreatedAt,omitempty"`
	Name      string    `xml:"Name"`
}

type outFilter struct {
	Type               string  `xml:"i:type,attr"`
	CorrelationID      *string `xml:"CorrelationId,omitempty"`
	MessageID          *string `xml:"MessageId,omitempty"`
	To                 *string `xml:"To,omitempty"`
	ReplyTo            *string `xml:"ReplyTo,omitempty"`
	Label              *string `xml:"Label,omitempty"`
	SessionID          *string `xml:"SessionId,omitempty"`
	ReplyToSessionID   *string `xml:"ReplyToSessionId,omitempty"`
	ContentType        *string `xml:"ContentType,omitempty"`
	Properties         *kvList `xml:"Properties,omitempty"`
	SQLExpression      *string `xml:"SqlExpression,omitempty"`
	Parameters         *kvList `xml:"Parameters,omitempty"`
	CompatibilityLevel int     `xml:"CompatibilityLevel,omitempty"`
}

type outAction struct {
	Type               string  `xml:"i:type,attr"`
	SQLExpression      *string `xml:"SqlExpression,omitempty"`
	Parameters         *kvList `xml:"Parameters,omitempty"`
	CompatibilityLevel int     `xml:"CompatibilityLevel,omitempty"`
}

type outNamespaceInfo struct {
	XMLName        xml.Name `xml:"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect NamespaceInfo"`
	XMLNSI         string   `xml:"xmlns:i,attr"`
	CreatedTime    string   `xml:"CreatedTime"`
	MessagingSKU   string   `xml:"MessagingSKU"`
	MessagingUnits *int64   `xml:"MessagingUnits,omitempty"`
	ModifiedTime   string   `xml:"ModifiedTime"`
	Name           string   `xml:"Name"`
	NamespaceType  string   `xml:"NamespaceType"`
}

// xmlReferences rewrites the numeric character references encoding/xml
// writes into the forms every client decodes: the JavaScript admin client's
// parser (fast-xml-parser without HTML entities) leaves "&#39;" undecoded, so
// a SQL filter "color = 'red'" would come back as "color = &#39;red&#39;".
// Service Bus itself writes quotes, tabs and newlines as they are; the
// attributes written here never contain tabs or newlines.
var xmlReferences = strings.NewReplacer("&#34;", "&quot;", "&#39;", "&apos;", "&#x9;", "\t", "&#xA;", "\n")

// marshalXML encodes v with an XML declaration.
func marshalXML(v any) ([]byte, error) {
	body, err := xml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return append([]byte(xml.Header), xmlReferences.Replace(string(body))...), nil
}
