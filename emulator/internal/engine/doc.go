// Package engine is the server side of the emulator's AMQP 1.0 connections:
// protocol header and SASL negotiation, open/close with heartbeats, sessions
// with their transfer windows, links with credit, multi-frame transfers in both
// directions and settlement. On top of that it serves the Service Bus nodes the
// azservicebus SDK talks to: entity links (senders and peek-lock /
// receive-and-delete receivers, session receivers; receivers also on the
// subqueues "<entity>/$DeadLetterQueue" and "<entity>/$Transfer/$DeadLetterQueue",
// the SDK's SubQueueDeadLetter and SubQueueTransfer), the $cbs node (put-token
// with shared access signature checks) and the $management request/response
// node.
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
