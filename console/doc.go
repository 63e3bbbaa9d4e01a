// Package console is the web console of a seqbus entity (`worker console`): an overview of the
// sessions parked, blocked, retrying and waiting on a gap, the dead letters by reason, the
// replicas wanted and whether the broker and the store answer; the sessions and dead letters
// with their pages; and the operator's actions (resume, skip, retry now, replay dead letters in
// order), each behind a confirmation and logged with who did it.
//
// Everything it shows or changes goes through [Operations], which *operator.Operator
// implements: the same API as the `worker sessions …` and `worker dlq …` commands, never a
// second path to the tables or the session state.
//
// # Authentication and roles
//
// [New] refuses a Config with no way to authenticate. A request is authenticated by
//
//   - a Bearer token (Authorization: Bearer …): Config.Token has the act role (read and change),
//     Config.ReadToken the read role;
//   - the login form, where the same tokens are entered once: the console then keeps a
//     server-side login named by a random id in a Secure, HttpOnly, SameSite=Strict cookie;
//   - the header Config.ProxyUserHeader, set by an authenticating proxy, only when that setting
//     is given: the act role under the name the proxy passes.
//
// Every action needs the act role. Failed logins and failed Bearer tokens are limited per client
// address. A request without the right credentials changes nothing.
//
// # Cross-site requests and the browser
//
// Every POST passes net/http's CrossOriginProtection (a cross-site browser request is refused),
// and an action from a login or a proxy identity must carry the CSRF token of its form, an HMAC of
// that login under a key drawn at start (a Bearer token is never sent by a browser on its own,
// so a Bearer request needs none). Every response carries a Content-Security-Policy without
// inline script or style, frame denial and nosniff; message bodies are shown as escaped text.
// Access logs (debug level) name the route pattern, never the session id or a message's
// content; the action log names the sessions the operator acted on.
//
// The pages and their assets (a style sheet and a small script that refreshes the overview's
// counts from GET /api/overview) are embedded: the console needs no network beyond the worker.
//
// console imports operator and worker (for the scaling signal's type); nothing imports console
// but cmd/worker.
package console
