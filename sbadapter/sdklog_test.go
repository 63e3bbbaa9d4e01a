package sbadapter

import "testing"

func TestIsSettleRefusedLine(t *testing.T) {
	t.Parallel()
	const busy = "*Error{Condition: com.microsoft:server-busy, Description: The request was terminated because the namespace ns is being throttled. Error code : 50009., Info: map[]}"
	for _, tc := range []struct {
		name, line string
		want       bool
	}{
		// The line azservicebus v1.11.0 logs (internal/utils/retrier.go) for a refused
		// settlement, as TestSettlementRefusedAsBusyIsNoticedFromTheSDKLog sees it.
		{"settlement refused as busy", "[c:1, l:1, r:name:mf1wiw] (settle) Retry attempt 0 returned retryable error: " + busy, true},
		{"its later attempt", "[c:1, l:1, r:name:mf1wiw] (settle) Retry attempt 1 returned retryable error: " + busy, true},
		{"the sleep that follows", "[c:1, l:1, r:name:mf1wiw] (settle) Retry attempt 1 sleeping for 4.905176043s", false},
		{"a settlement on a cut connection", "[c:1, l:1, r:name:mf1wiw] (settle) Retry attempt 0 returned retryable error: read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer", false},
		{"a send refused as busy", "[c:1, l:2, s:name:abcdef] (send) Retry attempt 0 returned retryable error: " + busy, false},
		{"a settlement given up", "[c:1, l:1, r:name:mf1wiw] (settle) Retry attempt 3 returned non-retryable error: " + busy, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := isSettleRefusedLine(tc.line); got != tc.want {
				t.Fatalf("isSettleRefusedLine(%q) = %t, want %t", tc.line, got, tc.want)
			}
		})
	}
}
