package admintransport

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// DefaultEmulatorPort is the port used when an emulator Endpoint names none; it is the
// AMQP port, on which the emulator also answers HTTP.
const DefaultEmulatorPort = "5672"

// ErrInvalidConnectionString is wrapped by the errors of New for a connection string
// without a usable Endpoint or with an invalid UseDevelopmentEmulator value.
var ErrInvalidConnectionString = errors.New("invalid connection string")

// Options adjust New. A nil *Options means all defaults.
type Options struct {
	// Addr is the host:port emulator requests go to. Default: the Endpoint's host and
	// port (port DefaultEmulatorPort when it has none).
	Addr string
	// Base sends the (rewritten) requests. Default http.DefaultTransport.
	Base http.RoundTripper
}

// Transport is an azcore policy.Transporter and an http.RoundTripper. In emulator mode
// it rewrites each request to plain HTTP on the emulator's address; otherwise it passes
// requests to its base transport unchanged.
type Transport struct {
	target string // host:port; "" passes through
	send   func(*http.Request) (*http.Response, error)
}

var (
	_ policy.Transporter = (*Transport)(nil)
	_ http.RoundTripper  = (*Transport)(nil)
)

// New returns the Transport for a Service Bus connection string.
func New(connectionString string) (*Transport, error) {
	return NewWithOptions(connectionString, nil)
}

// NewWithOptions is New with options.
func NewWithOptions(connectionString string, opts *Options) (*Transport, error) {
	if opts == nil {
		opts = &Options{}
	}
	cs, err := parse(connectionString)
	if err != nil {
		return nil, err
	}
	base := opts.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return newTransport(cs, opts.Addr, base.RoundTrip), nil
}

func newTransport(cs connString, addr string, send func(*http.Request) (*http.Response, error)) *Transport {
	t := &Transport{send: send}
	if cs.emulator {
		t.target = addr
		if t.target == "" {
			t.target = cs.host
			if _, _, err := net.SplitHostPort(cs.host); err != nil {
				t.target = net.JoinHostPort(cs.host, DefaultEmulatorPort)
			}
		}
	}
	return t
}

// Emulator reports whether the Transport rewrites requests to the emulator.
func (t *Transport) Emulator() bool { return t.target != "" }

// Target returns the host:port emulator requests are sent to ("" when passing through).
func (t *Transport) Target() string { return t.target }

// Do implements policy.Transporter.
func (t *Transport) Do(req *http.Request) (*http.Response, error) { return t.RoundTrip(req) }

// RoundTrip implements http.RoundTripper. The request is not modified: a rewritten copy
// is sent.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.target == "" {
		return t.send(req)
	}
	out := req.Clone(req.Context())
	u := *req.URL
	u.Scheme = "http"
	u.Host = t.target
	out.URL = &u
	out.Host = t.target
	resp, err := t.send(out)
	if err != nil {
		return nil, fmt.Errorf("admintransport: %s %s via %s: %w", req.Method, req.URL.Path, t.target, err)
	}
	return resp, nil
}

// NewAdminClient returns admin.NewClientFromConnectionString(connStr, opts), with the
// Transport of New installed when the connection string has UseDevelopmentEmulator=true.
// A Transport already set in opts sends the rewritten requests. opts is not modified.
func NewAdminClient(connStr string, opts *admin.ClientOptions) (*admin.Client, error) {
	var o admin.ClientOptions
	if opts != nil {
		o = *opts
	}
	cs, err := parse(connStr)
	if err != nil {
		return nil, err
	}
	send := http.DefaultTransport.RoundTrip
	if o.Transport != nil {
		send = o.Transport.Do
	}
	if t := newTransport(cs, "", send); t.Emulator() {
		o.Transport = t
	}
	c, err := admin.NewClientFromConnectionString(connStr, &o)
	if err != nil {
		return nil, fmt.Errorf("admintransport: admin client: %w", err)
	}
	return c, nil
}

type connString struct {
	host     string // Endpoint host, with port when given
	emulator bool
}

// parse reads the keys of a connection string that matter here (case-insensitively, as
// the SDK does): Endpoint and UseDevelopmentEmulator.
func parse(s string) (connString, error) {
	var cs connString
	var endpoint string
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return cs, fmt.Errorf("%w: segment %q has no '='", ErrInvalidConnectionString, part)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "endpoint":
			endpoint = strings.TrimSpace(v)
		case "usedevelopmentemulator":
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return cs, fmt.Errorf("%w: UseDevelopmentEmulator=%q: %w", ErrInvalidConnectionString, v, err)
			}
			cs.emulator = b
		}
	}
	if endpoint == "" {
		return cs, fmt.Errorf("%w: no Endpoint", ErrInvalidConnectionString)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return cs, fmt.Errorf("%w: Endpoint %q is not a URL like sb://host[:port]", ErrInvalidConnectionString, endpoint)
	}
	cs.host = u.Host
	return cs, nil
}
