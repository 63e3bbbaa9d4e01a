package worker

import (
	"context"
	"errors"
)

// Broker names the broker the connections reach, for probes and pages: "sqs" or "service bus".
func (c *Connections) Broker() string {
	if c.SQS != nil {
		return "sqs"
	}
	return "service bus"
}

// ProbeBroker checks with one call that the broker answers for the entity: with SQS that the
// queue exists, is FIFO and the credentials may read it; with Service Bus that the entity
// exists and its session list may be read (on the management client).
func (c *Connections) ProbeBroker(ctx context.Context) error {
	switch {
	case c.SQS != nil && c.SQSSource != nil:
		return probeSQS(ctx, c.SQS, c.SQSSource.QueueURL())
	case c.ManagementSource != nil:
		return c.ManagementSource.Probe(ctx)
	}
	return errors.New("worker: no broker connection to probe")
}
