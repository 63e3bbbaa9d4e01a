// Package sequencer restores the application order of messages within a broker session: the
// sequencing core of seqbus. It holds the Engine (one session's state machine: in order, early,
// duplicate, invalid, drain, end, retry, park), the Runner (many sessions at once, lock renewal,
// graceful stop), the per-session State with its compact binary codec, and the small interfaces
// the core needs from the outside: Session, SessionSource, StateStore, AtomicStore, Handler.
// Time comes from a clock.Clock (EngineDeps.Clock), which tests replace with clock.Fake.
//
// It imports the standard library and the leaf packages clock and contract (the default property
// names), which import nothing of seqbus.
// It must never import the Service Bus SDK, a database driver, or any other seqbus package;
// adapters (the Service Bus adapter, sessionstate/*) implement its interfaces. Test fakes live
// in sequencertest.
//
// # Glossary
//
//   - run: one RunSession call, from the load of the state to the release of the session.
//   - receive batch: the messages one Receive returns (at most EngineConfig.ReceiveBatch; the
//     worker's SEQBUS_PREFETCH). The next batch is the one a pipelined run asks for while it
//     handles the batch in hand.
//   - hand over: call the handler for a message (with its retries and, once they are spent, the
//     poison policy).
//   - window: the reorder window, the early messages a run holds in memory, unsettled.
//   - index: State.Deferred, the broker sequence number of each message set aside (deferred at
//     the broker, or held in the store) by its application sequence.
//   - keeper: where early messages wait outside the window: deferral or holding (EarlyMessages).
//   - record: State.InFlight, a recorded run: the in-order messages in hand saved in one write
//     before they are handed over; its entries are completed without a save of their own.
//   - extension: a record saved again over the next batch while the entries are handed over.
//   - tail: the messages after a record up to the session's last one, covered by the last save.
//   - ahead: with one save each, pipelined, a message handed over before the save that covers it
//     has landed (State.Ahead tells the next holder to wait).
//   - anchor: a handled active message kept unsettled until the drain of the deferred messages
//     after it is durable: it is what makes the broker offer the session again after a crash.
//   - lease: EngineConfig.PipelineLease, how long a pipelined run goes on after the broker last
//     answered it, and how long the next holder waits before it replays.
//   - fence: with a store of its own, the wait for the completions before the next handler call.
//   - tombstone: the state of an ended session, kept for TombstoneTTL so that late copies are
//     duplicates.
//   - cooling: the message for Next waits for a released retry that is not due (State.Retrying).
//   - completer: what completes handled messages at the broker, synchronous or pipelined.
//
// # Settlement strategies
//
// How a handled in-order message is made durable and settled depends on the configuration,
// fixed when the engine is built (strategyOf, session_inorder.go): one save each (perMessage,
// SaveEachMessage), recorded runs (recordedRuns), pipelined runs (pipelinedRuns, Pipelined, the
// default), save-ahead (saveAhead, SaveEachMessage with Pipelined) and transactional
// (transactional, an AtomicStore). Each is a type that holds the fields only it uses and
// implements the steps of the strategy interface that inOrder takes; its crash argument is its
// own section below: In order, one save each; One save each, pipelined; Recorded runs,
// Pipelined runs, Extended runs and The tail of a run; Lock tenure for the AtomicStore.
//
// Where an early message waits once the window does not keep it is the other choice made once
// (keeperOf, keep.go): deferred at the broker (deferral, EarlyDefer, the default) or held in the
// store (holding, EarlyStore, on a HeldStore). It goes with any settlement strategy: the
// strategies settle in-order messages, the keeper sets early ones aside and brings them back.
// Both record what they set aside in the index (State.Deferred), so the decisions, the drain,
// the gap clock and the wake rule are one for both; only the three steps differ (set aside,
// fetch back, settle a fetched copy), each a method of the keeper or a case on msg.stored. Its
// crash argument is "Early messages held in the store" below.
//
// # One in-order message's way
//
// Files in the order a reader opens them, with the default settings:
//
//	engine.go           RunSession: the run is set up with its strategy, run and released
//	session.go          the loop of receive batches; step decides a message (decide.go)
//	decide.go           view.decide: in order; view.settlementOf: an entry of a run or a save of its own
//	session_inorder.go  inOrder: the steps of the strategy (pipelinedRuns: the record saved, and
//	                    extended in the background, session_ahead.go), the handler called
//	                    (handOver), the message settled
//	session_calls.go    the calls: load, save, the handler, receive
//	settler.go          the completer: the entry completed now or in the background
//
// # Where things are
//
// decide.go takes every choice about a message from the state, the window, the message and the
// time alone (view), without I/O; state.go holds State and its transitions. The session files
// carry the choices out: session.go (the run, its phases, the loop), session_start.go (what a
// run settles before it receives; an inherited record), session_inorder.go (the way of an
// in-order message and the settlement strategies), session_ahead.go (saves in the background),
// session_retry.go (a failing handler, the poison policy, pass-through), session_drain.go,
// session_end.go, session_calls.go (the store, the handler, receives, lock renewal),
// keep.go (the keepers: early messages set aside and fetched back) and settler.go (every
// settlement at the broker).
//
// # Message contract
//
// The application sequence is the application property named by EngineConfig.SequenceProperty
// (default contract.SequenceProperty, "Sequence"): any integer type or a base-10 string, the
// first message of a session is 1. The property named by LastProperty (default
// contract.LastProperty, "IsLast", bool or "true") ends the sequence. The
// broker sequence number (Message.BrokerSequence) is the key of receive-deferred. Each message is
// read once, when it arrives; Message.Sequence and Message.IsLast carry the result to the handler.
//
// # What happens to a message
//
// The decision compares the message with the stored State and the window, in this order:
//
//   - unsequenced (no sequence property at all) with UnsequencedPassThrough: handed to the
//     handler at once and completed, outside the order: the state is not advanced for it, and a
//     gap, a parked mark or an unresolved run record does not hold it up. One that keeps failing
//     is dead-lettered (HandlerFailed) whatever the poison policy. With an AtomicStore the
//     handler runs in a SaveWith of the unchanged state (the version check fences it);
//   - invalid (missing under UnsequencedDeadLetter, not an integer, below 1, more than MaxGap
//     ahead, after the last sequence, a second last mark): dead-lettered with reason
//     InvalidSequence and a description naming property and value;
//   - duplicate or late (below Next, or another copy is held, fetched or deferred): completed
//     unhandled;
//   - in order (equal to Next): handed over (see the order of steps below), then whatever is now
//     in order is handed over from the reorder window or drained from the deferred messages, one
//     receive-deferred call per consecutive run of at most DeferredBatch;
//   - early: held in the reorder window, unsettled (its lock is the session lock), up to
//     WindowMessages/WindowBytes. What does not fit, and what is still early when the session
//     is released (idle, shutdown, parked), is set aside by the keeper (deferred at the broker,
//     or held in the store with EarlyStore) and recorded in State.Deferred. A held
//     message that is in order when a shutdown cuts the drain short stays active instead: the
//     broker offers the session again for it (see Waking).
//
// Two more decisions finish what a crash cut off: the message the session is parked on, and a
// poison message PoisonSkip skipped, are dead-lettered when they come back (see Poison). A
// message marked last tells the state the last sequence; held messages beyond it become invalid.
//
// # The session loop
//
// A run loads the state, settles what an earlier run left (an expired tombstone, a parked
// message, a resume, deferred messages already handled), drains, then takes receive batches.
// For each message of a batch: an inherited run record is resolved further (see Recorded runs),
// the message is decided and acted on, and what became due is drained. After the batch the
// window is bounded (deferring what does not fit). An empty receive means the session idles: it
// is released with its state kept, unless that resolves an inherited record or a gap timed out.
// With Pipelined the run asks the broker for its next batch while it handles one, unless
// what it has in hand may end the session (view.asksNextBatch), and for the first with the load
// (except a woken run): the round trip of a receive overlaps the handling (and a recorded run
// may extend over that batch, see Extended runs). The idle timeout still counts from the moment
// the run is ready for the batch, and a run that ends before it takes the batch drops it: its
// messages return to the broker with the session, undecided and unsettled.
// The run is in one phase at a time: resolving an inherited record (Next only a lower bound),
// receiving, or finished (parked, blocked or ended here), which releases the session. The stored
// State, not the phase, says whether the session is parked or ended: a run of a parked session
// defers what arrives until it idles; a run of an ended one completes late copies.
//
// # Crash consistency
//
// The stored state, not a settlement result, decides what has been handled; every run
// re-derives its decisions from the state and the message. The sections below give the order of
// the steps, and why a crash after any single step loses nothing and hands nothing to the
// handler twice except in one window.
//
// # In order, one save each
//
// With EngineConfig.SaveEachMessage, and whenever a recorded run (below) does not apply:
// handler → save(Next+1) → complete. A crash before the handler returns, or after it returned
// but before the save, leaves the message unsettled and Next unchanged: it is redelivered and
// handled again. This is the one documented at-least-once window (Pipelined widens it; an
// AtomicStore, whose SaveWith runs the handler and the save in one transaction, closes it). A crash after the
// save leaves the message unsettled with Next past it: it is redelivered, classified as a
// duplicate and completed.
//
// # One save each, pipelined
//
// With SaveEachMessage and Pipelined (and MaxPendingSettlements > 1) every message is still
// completed only after a save that records it handled (Next exact, no record), but the handler
// is not held up by that save: the save of the messages handled so far runs in the background
// (one at a time: each expects the version the one before returned), the handler goes on with
// the next message, and what it handles meanwhile goes into the next save. While more of the
// batch is in hand, the next save waits for three quarters of MaxPendingSettlements handled
// messages (the rest of the window covers its round trip); at the end of the batch, unless the
// next one is in hand already, the run saves and completes everything handled before it waits
// for the broker. At most MaxPendingSettlements messages are handled and not yet in a save that landed; the next handler
// call waits for the save in flight beyond that. A crash or a lost lock hands over again, in
// order, the messages handled since the last save that landed and the one in hand (at most
// MaxPendingSettlements + 1); those in a save that landed and not yet completed are duplicates,
// as above. A message the broker drops while in hand still shows as a gap: no run is recorded
// and nothing is inferred.
//
// Going ahead of the saves needs the next holder to know: a holder that lost its lock without
// noticing may go on calling the handler for the messages in hand while its saves hang, and a
// state with an exact Next gives the next holder no reason to wait (the record does that for
// Pipelined runs). So every background save sets State.Ahead, and no handler call goes ahead of
// the saves before one with Ahead has landed: the first message of a run goes handler → save →
// (that save awaited), the following ones ahead. A holder that loads a state with Ahead waits
// PipelineLease before its first handler call and its first save, as one that inherits a record
// does, and the lease bounds the old holder's calls as it does there (the saves of a
// session-bound store are answered calls; with a store of its own the version check sorts out a
// save that lands after the next holder loaded, as for a record). Every other save (a deferral,
// the end, a drain's anchor, the release) first waits for the save in flight, covers what was
// handled since and clears Ahead; the release saves for that if nothing else made it save, so a
// session released in good order does not make its next holder wait.
//
// # Pipelined completion
//
// With EngineConfig.MaxPendingSettlements > 1 the complete of message k is still issued only
// after the save that covers k has returned, but the engine does not wait for its answer before
// handler(k+1); up to MaxPendingSettlements completes (of such saved messages and of duplicates)
// run in the background. A crash with completes in flight leaves some of those messages
// unsettled while the stored Next is past them: redelivered, they are duplicates and only
// completed, so the window above does not grow. The first error of a background complete stops
// the run before its next handler call (ErrLockLost also cancels the run at once, as any lost
// lock does) and is what RunSession returns. Every other settlement (defer, dead-letter,
// abandon, the complete of a deferred message or of a drain's anchor), the end of a session
// (before the tombstone or delete) and the release of a session wait for all completes in
// flight first.
//
// # Recorded runs
//
// The default: when the in-order message k is active and later sequences k+1, k+2, … are already
// in hand (held in the window or later in the receive batch), one save records the run
// (State.InFlight: sequence → broker sequence number, Next still k), then each entry goes
// handler → complete, the complete answered before the next handler call, and the next save (of
// the next run, of any other step, or at release) records the new Next. A crash or failure
// between an entry's handler and its completion leaves that entry at the broker and the state
// saying "run from k": it is handled again, the same one-message window as above. An entry is
// completed only after it was handled, and entries are handled in sequence order, so an entry
// gone from the broker was handled and so was every entry below it; the real Next is one past the
// highest entry gone. The broker delivers a session's active messages in broker sequence order,
// so the next run decides each entry from what it is delivered: a delivered entry is still at the
// broker; an entry not delivered whose broker sequence number is below that of a delivered
// message is gone; an entry not delivered before the session idles is gone. A client need not
// see the broker's order, though: the Service Bus SDK releases a message that lands on the link
// between two receives, while a later one may already wait in the link's buffer, and the broker
// delivers the released one again after it. So before the second rule takes an entry as gone, the run asks the broker whether
// it still holds it (HoldingSession, a peek, once per entry and only then): one it holds is left
// to the first or the third rule. Delivered entries below the highest gone one are duplicates.
// Until every entry is decided (the run's phase is
// resolving) Next is a lower bound: no gap is reported or skipped, nothing is handed over,
// delivered entries and other copies of recorded sequences are held (never deferred), and one
// held message is kept active so that the broker offers the session again should this run end
// first.
//
// # Pipelined runs
//
// With Pipelined (and MaxPendingSettlements > 1) the complete of an entry goes
// to the background pipeline like the completes above, and the next entry's handler is called
// without waiting for its answer: one handler call at a time, not one broker round trip at a
// time. Nothing about the record changes: the state still says "run from
// k" until the next save, and an entry is still completed only after it was handled, so the
// inference above holds. What changes is what a crash, a lost lock or a failed complete leaves:
// the entries whose completes had not landed (at most MaxPendingSettlements) and the entry in
// hand are still at the broker, and the next run hands them over again, in sequence order. That
// is the at-least-once window of this mode: up to MaxPendingSettlements + 1 of the entries
// handled last, replayed in order, instead of one message; the handler sees no sequence before
// one it has seen unless it is such a replay. Background completes land in no fixed order (they
// run concurrently, and one may be refused while a later one succeeds), so the entries still at
// the broker need not be the last ones; the per-entry decision above does not care: an entry
// left behind a later gone one is a duplicate, not handed over again, and never waited for as a
// gap. As with pipelined completion, the first failed complete stops the run before its next
// handler call, and every other settlement, the end and the release wait for the pipeline.
//
// A provider may land completions later than Complete returns: one that keeps a session's
// completions until the session closes (Capabilities.CompletionsAtClose: SQS FIFO deleting them in
// one batch) leaves them all at the broker should the run not reach Close, as if that many
// completes were in flight. The inference above does not change (a kept message is still at the
// broker, and handed over again in order); the window does, so a Runner over such a provider
// refuses an EngineConfig whose ReplayWindow is smaller. Complete returns only while the lock
// lasts (a provider keeping a completion after its lock lapsed would claim an answer it does not
// have), so the lease above still bounds a holder that lost its lock.
//
// A lost lock is not always known at once: after a cut connection the broker gives the session to
// another replica while the old run's completions hang in the SDK's recovery, and without a bound
// the old run would go on calling the handler for the entries in hand (up to MaxPendingSettlements
// of them) while the new run replays the same entries, the two runs' calls interleaved. The lease rules it out
// (EngineConfig.PipelineLease, 1s by default). A pipelined run calls the handler without waiting
// for its completions only while the latest call the broker answered for it (the accept that
// locked the session, a settlement or a save in the session) was sent less than the lease ago;
// otherwise it first waits for them, as without pipelining. The broker hands the session over only
// after it last honoured the old run's lock, so the old run starts no handler call later than the
// lease after the handover, but for the one that follows an await whose completions all landed, as
// without pipelining. A run that inherits a record waits the lease after it loaded the state
// before its first handler call, so its replay comes after the old run's calls, except one still
// running, as without pipelining; and before its first save, because a save that resolves the
// record removes it, and the run after that one, finding no record, waits for nothing, and would replay
// at once while the first holder is still calling. The lease costs nothing while completions
// are answered in milliseconds, and a replacement waits one lease for a session whose earlier run
// ended without its release.
//
// With a store of its own (not session-bound, see Lock tenure) the same holds, with the record and
// the lease in place of the fence's wait for the entries of a run: their handler calls do not wait
// for the completions before them while the lease lasts. Such a store's saves are not calls the
// broker answers, so the lease runs from the accept and the run's settlements alone (a run given
// no accept time, RunOptions.AcceptSent, waits for the completions before each entry until one is
// answered), and a save does not show the lock held: an old holder may save a record after a new
// holder loaded the state. The old holder's entries follow its record's save, the first at once,
// and the new holder saves before its first handler call (its claim, its own record or the save
// that resolves the record it inherited), both with the version each loaded: if the new holder
// loaded the old holder's record, it waits the lease from then on, as above, so its calls come
// after the old holder's first entry as well as after its later ones; if it loaded the state
// before that record landed, one of the two saves fails on the version, and either the old holder
// hands no entry of that record over or the new holder stops before any handler call. However many
// records the old holder saves after it lost its lock unnoticed, this holds for each; and it holds
// for a message saved on its own (handler → save → complete) right after a record this run saved
// (the last message after a run, say): the record is what the next holder loads, or the save that
// replaces it meets the version check. A message saved on its own after any other save has nothing
// to tell the next holder to wait, so the fence's wait stays before it.
//
// # Extended runs
//
// With pipelined runs the next batch is received while a run's entries are handled (see The
// session loop), and a run whose entries are in hand when that batch lands extends over it: one
// save, sent in the background while the entries go on, records the run from the entry about to
// be handed over through everything in hand (State.InFlight as above, Next that entry). The
// entries of the next batch then need no record of their own, and the save's round trip
// overlaps the handler calls. It is a record like any other, so the inference and the lease
// above hold as they are: the stored record is the old one or the extension, and either names
// every entry handed over and not completed. One difference: an entry of the extension may be
// handed over before the extension has landed (the stored record tells the next holder to wait
// as well), but it is completed only after that, and the entries so handed over and the
// completions in flight stay within MaxPendingSettlements. A crash before the extension lands
// leaves them at the broker, not named by the stored record: the next holder hands them over
// again, in order, within the window above. The extension's save is the run's one save in
// flight; any other save and the end wait for it first, and a failed extension fails the run as
// any failed save does.
//
// # The tail of a run
//
// The messages after a run's record up to the session's last message, when they are all in hand
// (the last batch came in after the run's entries were handed over), are handed over with no
// record or save of their own while the stored state is this run's record: the last message's
// save (the end) covers them, and they are completed after it has landed. A crash before that
// leaves them at the broker and the record as it was: the next holder waits its lease, resolves
// the record and hands them over again, in order. They count in the window (the tail handed over
// and the completions in flight stay within MaxPendingSettlements; past that, the rest is a run
// of its own). Any save before the end (a failure's, a stop's release) covers them too.
//
// Runs never contain a deferred message, the last message, or the message before a deferred one
// (a drain's anchor, see Waking), and any deferral first saves the exact Next (so no entry is
// ever deferred while recorded); with an AtomicStore each message has its own transaction and
// runs are not used. The inference needs the broker's session FIFO (or a HoldingSession) and
// that only this engine settles the session's messages: an entry that vanished otherwise (its
// time to live expired, the broker dead-lettered it after too many deliveries, an operator
// purged it) is taken as handled, where one save per message would wait for it as a gap. Two
// rules keep the common case of that, a handler that crashes its process on the same message
// again and again until the broker dead-letters the messages in hand, out of reach: a redelivered
// message (DeliveryCount above 1) never joins a run, and a run that resolves an inherited record
// saves the exact Next at once, so a record outlives the first redelivery of its entries only when
// that run fails before it is resolved. Sessions where the rest matters set SaveEachMessage.
//
// # Deferral
//
// save(Deferred[seq] = broker sequence) → defer. A crash between leaves an index entry whose
// message is still active; when it is redelivered its broker sequence number matches the entry
// and it is treated as the recorded message (held or handled), never as a duplicate. Deferring
// first would risk a deferred message nobody knows about.
//
// # Early messages held in the store
//
// With EarlyStore an early message leaves the broker: Hold(index entries and the messages, with
// the state, in one write) → complete each at the broker. The three guarantees of HeldStore carry
// the argument:
//
//   - A crash before the Hold commits leaves the message at the broker, unsettled: it is
//     delivered again and decided afresh. A crash after it, before the completion landed, leaves
//     both copies: the one delivered again has the entry's broker sequence number, so it is the
//     held message itself (handed over when in order, or held again, which keeps the first copy),
//     never a duplicate of it. A Hold that fails its version check stores nothing.
//   - The copy fetched back (Held) is read against the contract like a received one and handed
//     over like a deferred message (never as an entry of a run, never ahead of its save). Its
//     settlement is the store's: its completion is no call (msg.stored) and the save that moves
//     Next past it removes it in the same write, so a crash before that save leaves it held, and
//     it is handed over again, as a message at the broker would be delivered again.
//   - A held message that turns poison, or is invalid once the last sequence is known, is moved
//     to the store's dead letters with the state that records it (parked on it, passed by
//     PoisonSkip, its index entry gone) in one write (DeadLetterHeld): no crash leaves the mark
//     without the move, nor a skip that removed the message before it was moved. The parked mark
//     says where the message went (Parked.Held): a copy the broker delivers again, its
//     completion cut off, is then a duplicate, and the session parks on a held message through
//     the store's copy even when the broker's copy failed (the broker's is completed), so that
//     one dead letter is left whichever copy a later run sees. PoisonBlock, which gives the
//     message back to the broker, does not go with EarlyStore.
//
// The broker offers no session whose messages all left it, so a session whose Next is held needs
// a wake: the index makes State.NeedsWake true as for a deferred Next, and the sweepers wake it.
// The anchor rule of Waking still applies to the active message that reaches a held Next.
// Entries the store does not have (set aside by deferral before a switch to EarlyStore) are
// fetched from the broker if the session can defer, and with EarlyDefer on a HeldStore the
// entries the broker does not return are looked for in the store: switching modes loses nothing.
//
// HeldLimits bound what is held. Past a bound the run holds none of the batch's early messages:
// they and what arrives after them wait unsettled in the window, up to WindowBytes, so that the
// run reaches the message for Next behind them (a release alone would loop: the broker delivers
// the early ones first again); past WindowBytes the run ends (OutcomeHeldFull). What the window
// keeps goes back to the broker when the session is released, and nothing is lost; the message
// for Next of a released retry is never refused.
//
// # Drain
//
// A deferred message keeps its index entry when it is handled (save(Next+1) keeps the entry
// below Next) and loses it only in a save after its completion. A crash between save and
// completion leaves an entry below Next, which the next run settles (it fetches the message and
// completes it as a duplicate); State.DueDeferred reports it.
//
// # Waking
//
// The broker never offers a session whose messages are all deferred to accept-next. So the
// active message that made Next reach a deferred sequence (the anchor) is kept unsettled until
// the drain is durable: only after the drained messages are handled, saved, completed and
// removed from the index is the anchor completed. A crash at any point of the drain leaves the
// anchor, which the broker redelivers, which wakes the session, which drains. That holds for an
// active message an index entry names as well (a deferral whose defer a crash cut off): once
// handled it is the anchor like any other, and its index entry goes in the save after its
// completion. Runs started by id
// (an operator's Resume, a sweeper) have no anchor: if they crash, the state says so
// (State.DueDeferred) and a sweeper hands the session to Runner.Wake.
//
// A settlement the broker refused as busy (ErrSettlementRefused) is treated like one a crash cut
// off: the message stays where it was (locked to the run until it releases the session), so its
// index entries stay too (Deferred, SkippedPoison, the parked message's), and the run does not
// look for it again. An active message comes back by itself; for a deferred one the entry below
// Next (in a tombstone too) makes State.DueDeferred true, and a sweeper wakes the session. The
// entry of a recorded run whose completion was refused stays at the broker like one whose
// completion a crash cut off, but its slot in the pipeline is free again: under a throttle the
// entries a lost lock hands over again would grow with every refusal. So once the refused entries since the last save and the completions in flight
// reach EngineConfig.ReplayWindow, the run saves before its next in-order message: the save
// records every message handled so far (the refused ones come back as duplicates) and ends the
// run's record.
//
// # Poison
//
// PoisonPark: save(Parked) → dead-letter. A crash between finds the parked mark on the next run:
// the redelivered (or still deferred) message with the parked broker sequence number is
// dead-lettered then, even when another copy of its sequence came in ahead of it (out of broker
// order): it is not that copy's duplicate. PoisonSkip: save(Next+1 and State.SkippedPoison[seq]) →
// dead-letter; a redelivered message matching the SkippedPoison entry is dead-lettered, not
// completed as a duplicate, and the entry goes in a save after the dead-lettering. Like a handled
// message, a skipped active message is the anchor while a drain depends on it. PoisonBlock:
// save(Blocked) → abandon, and the run releases the session; the broker redelivers the message
// until it succeeds (handling it clears State.Blocked) or its max delivery count dead-letters it
// (the mark stays, for an operator: State.Unblock, State.SkipTo). The mark is a report, not a gate.
//
// # Released retries
//
// With EngineConfig.RetryReleaseAfter = N > 0 the first N attempts of a failing in-order message
// wait in place as above; after that each wait is spent with the session released:
// save(State.Retrying{sequence, broker sequence, At, Attempts, Reason} and Deferred[seq]) →
// defer → release (OutcomeRetrying, EventReleasedRetry). The later messages of the session wait
// behind it (deferred), so nothing overtakes; the session holds no lock and no runner slot, and
// the broker does not offer it (all its messages are deferred). At Retrying.At a sweeper wakes
// it (State.RetryDue; the Runner that released it wakes it then too, Runner.Wake), and the run
// fetches the message by its broker sequence number and calls the handler once: on success
// Retrying goes with the save of Next+1; on failure the next wait is planned the same way,
// Retry.Backoff(attempts) after now; once Retry.Attempts calls have failed the poison policy acts
// as ever (park clears the plan; PoisonBlock does not go with released retries). The attempts
// count across runs and processes, from the stored state.
//
// A run of such a session before its time hands nothing over (view.cooling): a message that
// arrives is held, and the run ends after that receive batch, deferring it; a run started for a
// wake (RunOptions.Woken) ends at once. A crash between the save and the defer leaves the
// message active with its index entry: redelivered, it is recognised by its broker sequence
// number and held until the plan is due (then deferred, or handed over). A crash after the defer,
// or during a woken attempt, leaves the plan, which the next run follows. The deferral costs no
// delivery (Service Bus counts a delivery at an abandon or a lock's expiry, not at a defer): a
// message waits any number of released retries without reaching the entity's max delivery
// count; only a process that dies during an attempt (its locks expire) counts one.
//
// # End
//
// The save that records the last message as handled sets State.EndedAt, so the state is a
// tombstone before the last message is completed; leftovers are settled (the tombstone is saved
// again only if that changed it: held or deferred messages, counters), and the tombstone is
// kept for TombstoneTTL so that a late copy of any sequence of the ended session is a duplicate;
// the first run after expiry deletes it. With NoTombstone the state is deleted at once and a
// late copy starts a new sequence. Only a holder that lost its lock could write over a
// tombstone; the tenure rule below rules that out. A run that loads a tombstone completes the
// late copies it receives and, when the broker had no more and none of those completions was
// refused as busy, releases the session at once instead of holding it (and a runner slot) for
// the idle timeout; a later copy makes the broker offer the session again.
//
// # Lock tenure
//
// Every step above assumes that the run held the session lock without a break from its Load to
// each save and settlement: a holder whose lock was lost meanwhile acts on a view another holder
// may have changed. A lost session lock (from RenewLock, which runs in the background for the
// whole run, or from any call) cancels the run's context at once: the handler's ctx ends, nothing
// more is saved or settled, and the broker offers the session again once the lock has expired.
// That covers every stretch in which the run makes calls, provided no call can succeed on a lock
// that was lost and taken again behind the run's back. The Service Bus SDK does exactly that when
// it retries: it recovers the link, which locks the session again, seconds after another worker
// could have taken the session, ended it and let it go; a state write would then replace the
// tombstone with a state from before the end, and a late copy of sequence 1 be handled after the
// last message. The adapter (sbadapter, "Lock tenure") turns the SDK's retries off and refuses every
// call on a session once one call showed the lock gone, so a Session either holds its first
// lock or fails.
//
// A run notices a lost lock only at its next call, and the handler is called between calls, so
// what matters is that every handler call follows a call that showed the lock still held, with
// nothing slow in between. With the Service Bus session state (SessionBoundStore) every save is
// such a call. A store of its own (Postgres) is not: a holder that lost its lock in a cut could
// go on saving there and handing messages over while its completions hang in the SDK's retries
// (seconds), and meanwhile another holder, started from a state the first then overwrote, hands
// the same messages over again: a call for N after N+1.
// For such a store the engine fences:
//
//   - before a run's first handler call it saves the state once (a claim): the version moves, so
//     an earlier holder that lost its lock without noticing can save no more, and this run goes
//     on from the latest state;
//   - before each handler call it waits for the answers to the completions issued since the
//     last save (no completion overlaps the next message; completions of a lost lock fail),
//     except, with Pipelined, before the entries of a recorded run (an extension's
//     included), the tail of a run and a message saved on its own right after a record, which
//     the record and the lease bound instead, and before a message that goes ahead of its save
//     after a save with Ahead (see Pipelined runs, Extended runs, The tail of a run and One
//     save each, pipelined);
//   - after a retry backoff, the one stretch without calls, it renews the lock before it hands
//     the message over again.
//
// With either store, after a retry backoff the engine also re-reads the stored version and stops
// with ErrVersionConflict if another holder wrote meanwhile. With an AtomicStore the handler's
// effects in the store commit only with the version check, whatever the interleaving; a
// handler's effects elsewhere (an HTTP call) are at least once, as ever: at most the message a
// holder had in hand when it lost its lock is handed over again, by the next holder (with
// Pipelined, up to MaxPendingSettlements + 1 of the messages it handled last, in order).
//
// # Gaps
//
// When Next is missing while later messages wait, State.GapSince records since when. After the
// idle timeout the session is released with its state kept (a run that opened the gap logs a
// warning and emits EventGapOpened), and the gap wait is reported (Stats.GapWait,
// EventGapResolved) once Next arrives. With a GapTimeout, once the wait is that long (checked
// when the session idles or is accepted, and after each receive batch; State.GapExpired lets a
// sweeper wake such sessions) GapPolicy acts: GapWait keeps waiting, GapSkip skips to the lowest
// waiting sequence, GapPark parks the session on the missing sequence (State.Parked with broker
// sequence 0, Parked.OnGap): save(Parked) and release, the waiting messages deferred. The missing
// message arriving later unparks the session and is handled; State.Unpark with skip goes on from
// the lowest deferred sequence, without it the wait starts again.
package sequencer
