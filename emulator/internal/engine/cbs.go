package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

// audiencePath returns the entity path of a CBS audience such as
// "amqp://host:port/q1/$management", lower-cased and without slashes at the
// ends ("" for the namespace itself).
func audiencePath(audience string) string {
	p := audience
	if _, after, ok := strings.Cut(p, "://"); ok {
		p = after
		if _, rest, ok := strings.Cut(p, "/"); ok {
			p = rest
		} else {
			p = ""
		}
	}
	return strings.Trim(strings.ToLower(p), "/")
}

// claimedLocked reports whether a valid token covers address.
func (c *conn) claimedLocked(address string) bool {
	addr := strings.Trim(strings.ToLower(address), "/")
	now := c.srv.cfg.Now()
	for path, exp := range c.claims {
		if !now.Before(exp) {
			continue
		}
		if path == "" || addr == path || strings.HasPrefix(addr, path+"/") {
			return true
		}
	}
	return false
}

// handleCBSLocked serves a $cbs put-token request.
func (c *conn) handleCBSLocked(req *amqp.Message) *amqp.Message {
	op, _ := req.ApplicationProperties["operation"].(string)
	if op != "put-token" {
		return statusResponse(400, fmt.Sprintf("unsupported $cbs operation %q", op))
	}
	typ, _ := req.ApplicationProperties["type"].(string)
	name, _ := req.ApplicationProperties["name"].(string)
	token, ok := req.Value.(string)
	if !ok {
		return statusResponse(400, "put-token body must be the token string")
	}
	if typ != "servicebus.windows.net:sastoken" {
		return statusResponse(401, fmt.Sprintf("token type %q is not supported by the emulator; use a shared access key", typ))
	}
	t, err := c.srv.verifier.Verify(token, name)
	if err != nil {
		c.log.Debug("engine: put-token refused", slog.String("audience", name), slog.Any("error", err))
		if errors.Is(err, sas.ErrMalformed) {
			return statusResponse(400, err.Error())
		}
		return statusResponse(401, fmt.Sprintf("unauthorized: %v", err))
	}
	path := audiencePath(name)
	if path != "" {
		if _, err := c.srv.cfg.Broker.Lookup(strings.TrimSuffix(path, "/$management")); err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				return statusResponse(404, fmt.Sprintf("the messaging entity %q could not be found", path))
			}
			return statusResponse(500, err.Error())
		}
	}
	exp := t.Expiry
	if old, ok := c.claims[path]; !ok || old.Before(exp) {
		c.claims[path] = exp
	}
	return statusResponse(202, "Accepted")
}

// statusResponse builds a management/cbs response with status-code (AMQP int)
// and status-description, and the same under statusCode and
// statusDescription: Go and JavaScript read the former, the .NET and Python
// SDKs read the latter on $management responses.
func statusResponse(code int32, desc string) *amqp.Message {
	return &amqp.Message{
		Properties: &amqp.MessageProperties{},
		ApplicationProperties: map[string]any{
			"status-code":        code,
			"status-description": desc,
			"statusCode":         code,
			"statusDescription":  desc,
		},
	}
}
