// Package engine is the server side of the emulator's AMQP 1.0 connections:
// protocol header and SASL negotiation, open/close with heartbeats, sessions
// with their transfer windows, links with credit, multi-frame transfers in both
// directions and settlement. On top of that it serves the Service Bus nodes the
// azservicebus SDK talks to: entity links (senders and peek-lock /
// receive-and-delete receivers, session receivers; receivers also on the
// subqueues "<entity>/$DeadLetterQueue" and "<entity>/$Transfer/$DeadLetterQueue",
// the SDK's SubQueueDeadLetter and SubQueueTransfer), the $cbs node (put-token
// with shared access signature checks) and the $management request/response
// node (with the rule operations add-rule, remove-rule and enumerate-rules on
// a subscription's node). $cbs and $management answer every reply-link shape
// of the official SDKs (reply.go): a target address named in reply-to, no
// target address and the link name in reply-to (rhea), the node's own address
// and no reply-to at all (pyamqp). Client receivers may drain their credit.
// A token is checked when it is put, when a link attaches and again
// whenever the link carries a message or a management request: once it
// expires, sends are rejected, receivers detach and management answers 401,
// all with amqp:unauthorized-access, until a fresh token is put.
//
// Config.Pressure (pressure.go) loads the server like a busy namespace: a
// delay line per connection holds every outgoing frame for the latency, in
// order; a credit throttle refuses sends, link settlements and $management
// requests with com.microsoft:server-busy (deliveries wait instead); and a
// share of those operations fails with an injected com.microsoft:timeout.
//
// Messages are never lost between the broker and the wire: receivers lock
// what they take from the broker (receive-and-delete ones too) and a
// receive-and-delete message is deleted only when its delivery goes out;
// deliveries still waiting for the client's session window when their link
// goes away return to the entity at once. Locks of deliveries the client did
// get outlive the link, so $management settlement works (reference §8).
//
// Each connection has one goroutine reading frames and one goroutine writing
// them; receiver links have a pump goroutine that waits on the broker. One
// mutex per connection (conn.mu) guards its sessions and links; the broker's
// own mutex may be taken while holding it, never the other way round.
//
// Frames and performatives come from emulator/amqpwire; message bodies are
// encoded and decoded with go-amqp's public amqp.Message. The package must
// never import the root emulator package, cmd/ or anything of seqbus outside
// emulator/.
package engine
