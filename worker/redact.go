package worker

import (
	"net/url"
	"regexp"
	"strings"
)

const redacted = "REDACTED"

var (
	// secretKV matches the secret values of a Service Bus connection string: a value runs to
	// the next ';' (a SharedAccessSignature value contains spaces and '&').
	secretKV = regexp.MustCompile(`(?i)((?:SharedAccessKey|SharedAccessSignature)\s*=\s*)('[^']*'|[^;]*)`)
	// passwordKV matches the password of a keyword/value Postgres DSN, whose values end at a space.
	passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|[^;\s]*)`)
	// queryPasswordKV matches password and sslpassword query parameters of a URL.
	queryPasswordKV = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)([^&#]*)`)
)

// RedactConnectionString hides the SharedAccessKey and SharedAccessSignature values of a Service
// Bus connection string.
func RedactConnectionString(s string) string {
	return secretKV.ReplaceAllString(s, "${1}"+redacted)
}

// RedactDatabaseURL hides the password of a Postgres URL (postgres://u:p@h/db, including its
// password and sslpassword query parameters) or keyword/value string (password=p). A URL that
// does not parse is redacted too, from its userinfo to the last '@' (an unescaped '%' or space
// in a password is the usual reason it does not parse). It also serves any other URL with
// userinfo, such as SEQBUS_HANDLER_URL.
func RedactDatabaseURL(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, redacted)
				u.RawQuery = q.Encode()
			}
		}
		return u.String()
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && !strings.ContainsAny(scheme, " =") {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPW := strings.Cut(rest[:at], ":"); hasPW {
				rest = user + ":" + redacted + rest[at:]
			}
		}
		return scheme + "://" + queryPasswordKV.ReplaceAllString(rest, "${1}"+redacted)
	}
	return passwordKV.ReplaceAllString(s, "${1}"+redacted)
}
