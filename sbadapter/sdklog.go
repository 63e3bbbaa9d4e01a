package sbadapter

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	azlog "github.com/Azure/azure-sdk-for-go/sdk/azcore/log"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The SDK's log (azcore/log) is the only place it reports a settlement the broker refused as
// busy when it happens: the settlement's retry loop logs "(settle) Retry attempt 0 returned
// retryable error: *Error{Condition: com.microsoft:server-busy, …}" at once and then sleeps its
// fixed delay (see refusedSettlementHint). The adapter listens for that line so that a session
// whose settlement is held that way learns it now, not 4 s later (Session.watchSettlement).
//
// azcore's log has one listener per process, and setting it is not safe while any SDK client
// runs (azcore/log.SetListener writes a global the SDK reads unguarded), so the adapter installs
// it when the package is initialised, before any client exists, and enables only the SDK's
// connection, receiver and sender events. A program that installs a listener of its own takes
// the signal away (settlements refused as busy are then noticed only after the SDK's delay, as
// before). The count is the process's: sources in one process (the bench's replicas) see each
// other's refusals, which changes little, since a settlement is presumed refused only if it is
// itself still unanswered 500 ms later.

// sdkLog is the process's listener state.
var sdkLog struct {
	// logger receives the SDK's retry lines at debug level (nil: not logged).
	logger atomic.Pointer[slog.Logger]
	// settleRefusals counts settlements the SDK logged as refused with server-busy.
	settleRefusals atomic.Uint64
}

func init() {
	azlog.SetEvents(azservicebus.EventConn, azservicebus.EventReceiver, azservicebus.EventSender)
	azlog.SetListener(noteSDKLog)
}

// LogSDKRetries makes logger receive the SDK's retry lines (a retry it makes without telling its
// caller: a throttled settlement or send) at debug level. NewSource sets the source's logger
// unless one was set already.
func LogSDKRetries(logger *slog.Logger) {
	if logger != nil {
		sdkLog.logger.Store(logger)
	}
}

// noteSDKLog is the listener: it counts settlements refused as busy and forwards retry lines.
func noteSDKLog(ev azlog.Event, msg string) {
	if !strings.Contains(msg, "Retry attempt") {
		return
	}
	if isSettleRefusedLine(msg) {
		sdkLog.settleRefusals.Add(1)
	}
	if l := sdkLog.logger.Load(); l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		l.Debug("azservicebus: "+msg, slog.String("event", string(ev)))
	}
}

// isSettleRefusedLine tells whether msg is the SDK's report of a settlement attempt refused as
// busy (not its "sleeping" line, not another error).
func isSettleRefusedLine(msg string) bool {
	return strings.Contains(msg, "(settle) Retry attempt") &&
		strings.Contains(msg, "returned retryable error") &&
		strings.Contains(msg, string(condServerBusy))
}
