package sqlrule_test

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/sqlrule"
)

// brokerSQL plugs sqlrule into the broker's SQLCompiler hook; the emulator's
// wiring needs exactly this adapter.
type brokerSQL struct{}

func (brokerSQL) CompileFilter(expr string) (broker.Filter, error) {
	f, err := sqlrule.CompileFilter(expr, nil)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (brokerSQL) CompileAction(expr string) (broker.Action, error) {
	a, err := sqlrule.CompileAction(expr, nil)
	if err != nil {
		return nil, err
	}
	return a, nil
}

var _ broker.SQLCompiler = brokerSQL{}

// TestBrokerGjuraLayout routes messages through a broker subscription whose rule
// gives every transaction its own session, as the Gjura layout does.
func TestBrokerGjuraLayout(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{SQL: brokerSQL{}})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateTopic("orders", broker.EntityProperties{}))
	require.NoError(t, b.CreateSubscriptionWithRules("orders", "by-transaction", broker.EntityProperties{}, []broker.Rule{{
		Name:                "gjura",
		FilterType:          broker.FilterSQL,
		SQLExpression:       "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)",
		ActionSQLExpression: "SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId",
	}}))
	err := b.CreateSubscriptionWithRules("orders", "broken", broker.EntityProperties{}, []broker.Rule{{
		Name: "bad", FilterType: broker.FilterSQL, SQLExpression: "a = ",
	}})
	require.ErrorContains(t, err, "sqlrule: 1:5: expected expression after '=', found EOF")

	topic, err := b.Lookup("orders")
	require.NoError(t, err)
	withTx := amqp.NewMessage([]byte("a"))
	withTx.ApplicationProperties = map[string]any{"SessionName": "customer-9", "TransactionId": int64(17), "InstanceId": "i1"}
	withoutTx := amqp.NewMessage([]byte("b"))
	withoutTx.ApplicationProperties = map[string]any{"SessionName": "customer-9"}
	require.NoError(t, topic.Send(t.Context(), []*amqp.Message{withTx, withoutTx}))

	sub, err := b.Lookup("orders/Subscriptions/by-transaction")
	require.NoError(t, err)
	ds, err := sub.TryReceive(10, broker.ReceiveOptions{Mode: broker.ReceiveAndDelete})
	require.NoError(t, err)
	require.Len(t, ds, 1, "only the message with a transaction matches the filter")
	require.Equal(t, "customer-9_17_i1", *ds[0].Message.Properties.GroupID)
	require.Nil(t, withTx.Properties, "the action changes the subscription's copy, not the sent message")
}
