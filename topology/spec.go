package topology

// Spec is a topology file as written: entities and sequenced blocks. Expand turns it
// into the Namespace it stands for.
type Spec struct {
	Queues    []*Queue
	Topics    []*Topic
	Sequenced []*Sequenced
	Src       Source
}

// Sequenced is a sequenced entity: messages published to the Sources topics that carry
// the session key's properties are forwarded, by a subscription on each source topic
// whose SQL action sets sys.SessionId, into Topic, whose Subscription requires sessions
// and feeds the workers.
type Sequenced struct {
	// Name names the sequence; the default entity names derive from it.
	Name string
	// Sources are the topics publishers write to. Topics the file does not declare are
	// created with default properties.
	Sources []string
	// ForwardingSubscription is the name of the subscription created on each source topic.
	// Default Name + "-fwd".
	ForwardingSubscription string
	// Topic is the sequencing topic. Default Name + "-seq". It may be declared under
	// topics to set its properties.
	Topic string
	// Subscription is the session-enabled subscription of Topic the workers receive from.
	// Default "workers".
	Subscription string
	// Filter is an optional SQL condition ANDed to the generated filter.
	Filter string
	// SessionID says how the session id is built.
	SessionID *SessionKey
	// Props are the worker subscription's properties (lockDuration, maxDeliveryCount,
	// defaultMessageTimeToLive, deadLetteringOnMessageExpiration, …). RequiresSession
	// defaults to true unless the strategy is none.
	Props Properties
	Src   Source
}

// Strategy names a way to build a session id from a message's application properties.
type Strategy string

// Strategies. Composite, Entity, Repository and Fallback can be expressed as SQL rule
// actions; None assigns no session id.
const (
	// StrategyComposite joins Properties with Separator (default "_"), e.g. the Gjura
	// layout SessionName_TransactionId_InstanceId.
	StrategyComposite Strategy = "composite"
	// StrategyEntity is the ordering scope "entity": owner/repo/entity_type/entity_id,
	// from the properties Owner, Repo, EntityType and EntityId unless overridden.
	StrategyEntity Strategy = "entity"
	// StrategyRepository is the ordering scope "repository": owner/repo/repository, from
	// the properties Owner and Repo unless overridden.
	StrategyRepository Strategy = "repository"
	// StrategyFallback uses the first of Alternatives whose properties the message has.
	StrategyFallback Strategy = "fallback"
	// StrategyNone forwards without a session id (unordered processing).
	StrategyNone Strategy = "none"
)

// SessionKey describes how the session id is built.
type SessionKey struct {
	Strategy Strategy
	// Properties are the application properties the key is made of, in order.
	Properties []*KeyProperty
	// Separator goes between the parts. Default "_" (composite) or "/" (entity,
	// repository).
	Separator string
	// Suffix is a literal appended after a separator ("repository" for the repository
	// strategy).
	Suffix string
	// Alternatives are the keys a fallback tries, in order.
	Alternatives []*SessionKey
	Src          Source
}

// KeyProperty is one application property of a session key.
type KeyProperty struct {
	Name string
	// MaxLength is the longest value publishers send (in characters); 0 means unbounded.
	MaxLength int
	Src       Source
}

// Default property names of the entity and repository strategies.
var (
	EntityProperties     = []string{"Owner", "Repo", "EntityType", "EntityId"}
	RepositoryProperties = []string{"Owner", "Repo"}
)

// resolved returns the key with the strategy's defaults filled in.
func (k *SessionKey) resolved() *SessionKey {
	out := *k
	defaults := func(names []string, sep string) {
		if len(out.Properties) == 0 {
			for _, n := range names {
				out.Properties = append(out.Properties, &KeyProperty{Name: n, Src: k.Src})
			}
		}
		if out.Separator == "" {
			out.Separator = sep
		}
	}
	switch k.Strategy {
	case StrategyComposite:
		if out.Separator == "" {
			out.Separator = "_"
		}
	case StrategyEntity:
		defaults(EntityProperties, "/")
	case StrategyRepository:
		defaults(RepositoryProperties, "/")
		if out.Suffix == "" {
			out.Suffix = "repository"
		}
	}
	return &out
}
