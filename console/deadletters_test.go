package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/operator"
)

// heldDLQ is the operator with dead letters the state store holds, and dead letters of an SQS
// dead-letter queue the listing could not read.
type heldDLQ struct {
	*operator.Operator
	held   []operator.HeldInfo
	unread int
}

func (h heldDLQ) DLQList(ctx context.Context, p operator.DLQListParams) (*operator.DLQListResult, error) {
	res, err := h.Operator.DLQList(ctx, p)
	if err == nil {
		res.Held, res.Unread = h.held, h.unread
	}
	return res, err
}

func (h heldDLQ) Show(ctx context.Context, p operator.ShowParams) (*operator.ShowResult, error) {
	res, err := h.Operator.Show(ctx, p)
	if err == nil {
		res.Held = &operator.HeldSummary{Listed: []operator.HeldInfo{}, DeadLetters: h.held}
	}
	return res, err
}

// The dead letters the state store holds are listed, counted and replayable next to the
// dead-letter queue's, and the dead letters an SQS listing could not read are counted.
func TestDeadLettersHeldInTheStore(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.park(t, "tenant-q", 2, 1, "poison", "queue failure")
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	con, err := console.New(console.Config{Operations: heldDLQ{Operator: b.op, unread: 3, held: []operator.HeldInfo{
		{SessionID: "tenant-h", Sequence: 5, Reason: "StoreFailed", Description: "<i>boom</i>", DeadAt: &at},
	}}, Entity: queue, Token: actToken, ReadToken: readToken})
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	get := func(path, token string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}

	page := get("/deadletters", actToken)
	require.Contains(t, page, "In the dead-letter queue")
	require.Contains(t, page, `href="/session?id=tenant-q"`)
	require.Contains(t, page, "Held in the state store")
	require.Contains(t, page, `<input type="checkbox" name="session" value="tenant-h"`, "a held dead letter's session can be selected for a replay")
	require.Contains(t, page, "&lt;i&gt;boom&lt;/i&gt;")
	require.Contains(t, page, "2026-11-29T03:00:00Z")
	require.Contains(t, page, "3 more in the dead-letter queue could not be read")
	require.NotContains(t, get("/deadletters", readToken), `type="checkbox"`, "the read role selects nothing")

	var ov struct {
		Counts   map[string]int `json:"counts"`
		ByReason []struct {
			Reason string `json:"reason"`
			Count  int    `json:"count"`
		} `json:"dead_letters_by_reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(get("/api/overview", readToken)), &ov))
	require.Equal(t, 2, ov.Counts["dead_letters"], "the queue's and the store's")
	reasons := map[string]int{}
	for _, r := range ov.ByReason {
		reasons[r.Reason] = r.Count
	}
	require.Equal(t, map[string]int{"HandlerFailed": 1, "StoreFailed": 1}, reasons)
	overview := get("/", readToken)
	require.Contains(t, overview, "dead letters+", "a count the unread make a bound from below")
	require.Contains(t, overview, "3 more in the dead-letter queue could not be read")

	// A session whose only dead letter is in the store offers its replay.
	session := get("/session?id=tenant-h", actToken)
	require.Contains(t, session, "Dead letters held in the state store")
	require.Contains(t, session, `id="replay"`)
}
