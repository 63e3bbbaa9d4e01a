package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// loginCookie names the login cookie; the __Host- prefix makes the browser keep it only when
// Secure, host-only and for the path /.
const loginCookie = "__Host-seqbus-console"

// Login rate limit: at most loginFailures failed attempts (login form or Bearer token) per
// client address within loginWindow; further attempts are refused until the window ends.
const (
	loginFailures = 10
	loginWindow   = time.Minute
)

// maxForm bounds the body of a POST.
const maxForm = 1 << 20

// identity is who made a request.
type identity struct {
	// User names the person or token for the action log: "token:act", "token:read", the
	// proxy's user name.
	User string
	Role string
	// Via is how the request was authenticated: bearer, login or proxy.
	Via string
	// CSRF is the token the forms of this identity carry ("" for Bearer: none needed).
	CSRF string
}

// can reports whether the identity has role.
func (id identity) can(role string) bool { return role == roleRead || id.Role == roleAct }

// login is a login made through the form.
type login struct {
	user, role string
	expires    time.Time
}

// failures counts an address's failed attempts in its current window.
type failures struct {
	n     int
	since time.Time
}

// authenticator tells who a request comes from and keeps the logins.
type authenticator struct {
	cfg Config
	key []byte

	mu     sync.Mutex
	logins map[string]login
	failed map[string]*failures
}

func newAuthenticator(cfg Config, key []byte) *authenticator {
	return &authenticator{cfg: cfg, key: key, logins: map[string]login{}, failed: map[string]*failures{}}
}

var (
	errUnauthenticated = errors.New("authentication required")
	errRateLimited     = errors.New("too many failed attempts; try again later")
)

// tokenRole returns the role of a token, "" for none.
func (a *authenticator) tokenRole(token string) string {
	match := func(want string) bool {
		return want != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
	}
	switch {
	case match(a.cfg.Token):
		return roleAct
	case match(a.cfg.ReadToken):
		return roleRead
	}
	return ""
}

// clientAddr is the address the rate limit counts by: the peer's IP (not a forwarded header,
// which the client chooses).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limited reports whether addr has used up its failed attempts.
func (a *authenticator) limited(addr string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.failed[addr]
	return f != nil && f.n >= loginFailures && a.cfg.Clock.Now().Sub(f.since) < loginWindow
}

// fail counts a failed attempt of addr.
func (a *authenticator) fail(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Clock.Now()
	f := a.failed[addr]
	if f == nil || now.Sub(f.since) >= loginWindow {
		if len(a.failed) > 10000 { // bound the memory many addresses take
			for k, v := range a.failed {
				if now.Sub(v.since) >= loginWindow {
					delete(a.failed, k)
				}
			}
		}
		f = &failures{since: now}
		a.failed[addr] = f
	}
	f.n++
}

// csrf is the CSRF token of a login or proxy identity: an HMAC of what names it.
func (a *authenticator) csrf(binding string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(binding))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authenticate tells who r comes from: a Bearer token, a login cookie, or (when enabled) the
// proxy's header, in that order.
func (a *authenticator) authenticate(r *http.Request) (identity, error) {
	addr := clientAddr(r)
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if a.limited(addr) {
			return identity{}, errRateLimited
		}
		if !strings.EqualFold(scheme, "Bearer") {
			a.fail(addr)
			return identity{}, errUnauthenticated
		}
		role := a.tokenRole(strings.TrimSpace(token))
		if role == "" {
			a.fail(addr)
			return identity{}, errUnauthenticated
		}
		return identity{User: "token:" + role, Role: role, Via: "bearer"}, nil
	}
	if ck, err := r.Cookie(loginCookie); err == nil {
		a.mu.Lock()
		l, ok := a.logins[ck.Value]
		if ok && !a.cfg.Clock.Now().Before(l.expires) {
			delete(a.logins, ck.Value)
			ok = false
		}
		a.mu.Unlock()
		if ok {
			return identity{User: l.user, Role: l.role, Via: "login", CSRF: a.csrf("login\x00" + ck.Value)}, nil
		}
	}
	if hdr := a.cfg.ProxyUserHeader; hdr != "" {
		if user := strings.TrimSpace(r.Header.Get(hdr)); user != "" {
			return identity{User: user, Role: roleAct, Via: "proxy", CSRF: a.csrf("proxy\x00" + user)}, nil
		}
	}
	return identity{}, errUnauthenticated
}

// newLogin records a login of token's role and returns its cookie value.
func (a *authenticator) newLogin(role string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, l := range a.logins {
		if !now.Before(l.expires) {
			delete(a.logins, k)
		}
	}
	a.logins[id] = login{user: "login:" + role, role: role, expires: now.Add(a.cfg.LoginSessionTTL)}
	return id, nil
}

// endLogin forgets the login of r's cookie.
func (a *authenticator) endLogin(r *http.Request) {
	if ck, err := r.Cookie(loginCookie); err == nil {
		a.mu.Lock()
		delete(a.logins, ck.Value)
		a.mu.Unlock()
	}
}

// checkCSRF reports whether a POST of id carries its CSRF token (a Bearer request needs none).
func (id identity) checkCSRF(r *http.Request) bool {
	if id.Via == "bearer" {
		return true
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(id.CSRF))
}

// authed wraps a page or action that needs role: an unauthenticated browser is sent to the
// login form, a script gets 401; a request without role gets 403; a POST without its CSRF
// token gets 403.
func (c *Console) authed(role string, h func(w http.ResponseWriter, r *http.Request, id identity)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := c.auth.authenticate(r)
		switch {
		case errors.Is(err, errRateLimited):
			c.fail(w, r, http.StatusTooManyRequests, err)
			return
		case err != nil:
			if r.Method == http.MethodGet && r.Header.Get("Authorization") == "" && !strings.HasPrefix(r.URL.Path, "/api/") {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="seqbus console"`)
			c.fail(w, r, http.StatusUnauthorized, err)
			return
		}
		if !id.can(role) {
			c.log.WarnContext(r.Context(), "console: refused: the act role is needed", slog.String("user", id.User), slog.String("route", r.Pattern))
			c.fail(w, r, http.StatusForbidden, errors.New("this needs the act role"))
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		}
		if r.Method == http.MethodPost && !id.checkCSRF(r) {
			c.log.WarnContext(r.Context(), "console: refused: missing or wrong CSRF token", slog.String("user", id.User), slog.String("route", r.Pattern))
			c.fail(w, r, http.StatusForbidden, errors.New("missing or wrong CSRF token: reload the page and try again"))
			return
		}
		h(w, r, id)
	})
}

// loginPage shows the login form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Log in"})
}

// login checks the token entered and sets the login cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	addr := clientAddr(r)
	if c.auth.limited(addr) {
		c.log.WarnContext(r.Context(), "console: login refused: rate limited")
		c.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Log in", Error: errRateLimited.Error()})
		return
	}
	role := c.auth.tokenRole(strings.TrimSpace(r.PostFormValue("token")))
	if role == "" {
		c.auth.fail(addr)
		c.log.WarnContext(r.Context(), "console: login failed")
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Error: "wrong token"})
		return
	}
	id, err := c.auth.newLogin(role)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: id, Path: "/", MaxAge: int(c.cfg.LoginSessionTTL.Seconds()),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	c.log.InfoContext(r.Context(), "console: login", slog.String("user", "login:"+role))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the login.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, id identity) {
	c.auth.endLogin(r)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	c.log.InfoContext(r.Context(), "console: logout", slog.String("user", id.User))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
