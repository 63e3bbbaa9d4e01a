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

func TestInlineParams(t *testing.T) {
	t.Parallel()
	params := []param{
		{key: "@s", xsdType: "string", text: "it's"},
		{key: "n", xsdType: "int", text: "42"},
		{key: "d", xsdType: "double", text: "2.000000"},
		{key: "b", xsdType: "boolean", text: "false"},
		{key: "Ünï", xsdType: "string", text: "u"},
	}
	tests := []struct {
		expr, want string
		wantErr    bool
	}{
		{"a = @s", "a = 'it''s'", false},
		{"a = @N + @n", "a = 42 + 42", false},
		{"a = @d AND b = @b", "a = 2.0 AND b = FALSE", false},
		{"x = '@s' AND [@s] = @s AND \"@n\" = 1", "x = '@s' AND [@s] = 'it''s' AND \"@n\" = 1", false},
		{"x = 'it''s @s' OR y = @s", "x = 'it''s @s' OR y = 'it''s'", false},
		{"p = @ünï", "p = 'u'", false},
		{"no params", "no params", false},
		{"a = @missing", "", true},
		{"a = @", "", true},
		{"a = 'unterminated @s", "a = 'unterminated @s", false},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			got, err := inlineParams(tt.expr, params)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
