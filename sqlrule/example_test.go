package sqlrule_test

import (
	"fmt"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/sqlrule"
)

func Example() {
	filter, err := sqlrule.CompileFilter("sys.Label = 'order' AND amount > @min", &sqlrule.CompileOptions{
		Parameters: map[string]any{"@min": 100},
	})
	if err != nil {
		panic(err)
	}
	action, err := sqlrule.CompileAction("SET sys.SessionId = 'customer-' + customer; REMOVE customer", nil)
	if err != nil {
		panic(err)
	}

	label := "order"
	m := &amqp.Message{
		Properties:            &amqp.MessageProperties{Subject: &label},
		ApplicationProperties: map[string]any{"amount": 250.5, "customer": int64(42)},
	}
	ok, err := filter.Match(m)
	fmt.Println(ok, err)
	if err := action.Apply(m); err != nil {
		panic(err)
	}
	fmt.Println(*m.Properties.GroupID, m.ApplicationProperties)

	_, err = sqlrule.CompileFilter("amount > 1 AND", nil)
	fmt.Println(err)
	// Output:
	// true <nil>
	// customer-42 map[amount:250.5]
	// sqlrule: 1:15: expected expression after AND, found EOF
}
