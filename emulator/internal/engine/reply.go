package engine

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/Azure/go-amqp"
)

// Reply links are the client receivers of $cbs and $management responses.
// The official SDKs shape them in four ways, and the service answers all of
// them:
//
//   - go-amqp (Go) and the JavaScript SDK's $management client: a target
//     address of the client's choosing, and reply-to = that address on every
//     request (JavaScript names the link after it too).
//   - rhea (the JavaScript SDK's $cbs client): no target address; the link's
//     name is what the requests carry in reply-to.
//   - Microsoft.Azure.Amqp (.NET) and azure-core-amqp (Java): a target address
//     (a GUID, or "<node without $>-client-reply-to") in reply-to; .NET sends
//     its requests pre-settled and Java uses ulong message-ids, which the
//     response echoes as its correlation-id unchanged.
//   - pyamqp (Python): target address = the node's own address ("$cbs",
//     "<entity>/$management"), so two reply links of a connection can share
//     it; put-token requests carry no reply-to at all.
//
// A response therefore goes to the reply link whose target address is the
// request's reply-to, else to the one named so; when several qualify (or the
// request has no reply-to and a link on the request's own session reads from
// its node), the one on the request's session wins, then the latest attached.

// replyLinkAttachedLocked records a reply link that was just attached.
func (c *conn) replyLinkAttachedLocked(l *link) {
	c.replyLinks = append(c.replyLinks, l)
}

// replyLinkGoneLocked forgets a reply link.
func (c *conn) replyLinkGoneLocked(l *link) {
	c.replyLinks = slices.DeleteFunc(c.replyLinks, func(x *link) bool { return x == l })
}

// replyTarget returns a reply link's target address ("" when it has none).
func (l *link) replyTarget() string {
	if l.attach.Target == nil {
		return ""
	}
	return l.attach.Target.Address
}

// replyLinkForLocked finds the reply link for a request that came on the
// request link req with reply-to replyTo ("" when absent).
func (c *conn) replyLinkForLocked(req *link, replyTo string) *link {
	matches := []func(*link) bool{
		func(l *link) bool { return replyTo != "" && l.replyTarget() == replyTo },
		func(l *link) bool { return replyTo != "" && l.name == replyTo },
		func(l *link) bool {
			return replyTo == "" && l.s == req.s && strings.EqualFold(l.address, req.address)
		},
	}
	for _, match := range matches {
		var found *link
		// Latest attached first; the request's own session before others.
		for _, l := range slices.Backward(c.replyLinks) {
			if l.state != linkAttached || !match(l) {
				continue
			}
			if l.s == req.s {
				return l
			}
			if found == nil {
				found = l
			}
		}
		if found != nil {
			return found
		}
	}
	return nil
}

// replyLocked routes the response to a $cbs or $management request that came
// on request link req to its reply link, with correlation-id = the request's
// message-id.
func (c *conn) replyLocked(req *link, reqMsg, resp *amqp.Message) {
	var replyTo string
	var messageID any
	if reqMsg.Properties != nil {
		if reqMsg.Properties.ReplyTo != nil {
			replyTo = *reqMsg.Properties.ReplyTo
		}
		messageID = reqMsg.Properties.MessageID
	}
	if resp.Properties == nil {
		resp.Properties = &amqp.MessageProperties{}
	}
	resp.Properties.CorrelationID = messageID
	rl := c.replyLinkForLocked(req, replyTo)
	if rl == nil {
		c.log.Debug("engine: no reply link for a request; response dropped", slog.String("node", req.address), slog.String("reply_to", replyTo))
		return
	}
	rl.replies = append(rl.replies, resp)
	rl.flushRepliesLocked()
}
