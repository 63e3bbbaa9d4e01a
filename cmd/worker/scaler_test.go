package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// `worker scaler` refuses what it cannot run, naming the setting, before it connects to anything.
func TestScalerRejects(t *testing.T) {
	const cs = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=topsecret;UseDevelopmentEmulator=true"
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantErr  []string
	}{
		{"an argument", []string{"scaler", "now"}, nil, 2, []string{`scaler takes no arguments, got ["now"]`, "usage: worker"}},
		{"nothing set", []string{"scaler"}, nil, 1, []string{"SEQBUS_CONNECTION_STRING", "SEQBUS_QUEUE"}},
		{"zero max replicas", []string{"scaler"}, map[string]string{
			"SEQBUS_CONNECTION_STRING": cs, "SEQBUS_QUEUE": "q", "SEQBUS_SCALE_MAX_REPLICAS": "0",
		}, 1, []string{"SEQBUS_SCALE_MAX_REPLICAS: must be positive, got 0"}},
		{"bad interval", []string{"scaler"}, map[string]string{
			"SEQBUS_CONNECTION_STRING": cs, "SEQBUS_QUEUE": "q", "SEQBUS_SCALE_INTERVAL": "often",
		}, 1, []string{"SEQBUS_SCALE_INTERVAL"}},
		{"no sessions to count", []string{"scaler"}, map[string]string{
			"SEQBUS_CONNECTION_STRING": cs, "SEQBUS_QUEUE": "q", "SEQBUS_ORDERING": "none",
		}, 1, []string{"SEQBUS_ORDERING: the scaling signal counts sessions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, _, errOut := newTestCLI()
			require.Equal(t, tt.wantCode, c.run(context.Background(), tt.args), errOut.String())
			for _, w := range tt.wantErr {
				require.Contains(t, errOut.String(), w)
			}
			require.NotContains(t, errOut.String(), "topsecret")
		})
	}
}
