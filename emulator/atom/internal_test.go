package atom

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want route
	}{
		{"/$namespaceinfo", route{kind: routeNamespace}},
		{"/$Resources/Queues", route{kind: routeResources, listWhat: "queues"}},
		{"/$resources/topics/", route{kind: routeResources, listWhat: "topics"}},
		{"/$Resources/Widgets", route{kind: routeNotFound}},
		{"/", route{kind: routeNotFound}},
		{"/q1", route{kind: routeEntity, entity: "q1"}},
		{"/q1/", route{kind: routeEntity, entity: "q1"}},
		{"/a/b", route{kind: routeEntity, entity: "a/b"}},
		{"/t/Subscriptions", route{kind: routeSubscriptions, topic: "t"}},
		{"/t/subscriptions/", route{kind: routeSubscriptions, topic: "t"}},
		{"/t/Subscriptions/s", route{kind: routeSubscription, topic: "t", sub: "s"}},
		{"/a/b/Subscriptions/s", route{kind: routeSubscription, topic: "a/b", sub: "s"}},
		{"/t/Subscriptions/s/Rules", route{kind: routeRules, topic: "t", sub: "s"}},
		{"/t/Subscriptions/s/Rules/", route{kind: routeRules, topic: "t", sub: "s"}},
		{"/t/Subscriptions/s/Rules/$Default", route{kind: routeRule, topic: "t", sub: "s", rule: "$Default"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, parseRoute(tt.path))
		})
	}
}
