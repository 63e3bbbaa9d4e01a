package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Options are what the registry's constructors may need.
type Options struct {
	// Out is where the log handler writes (default os.Stdout).
	Out io.Writer
	// URL is the target of the http handler.
	URL string
	// Timeout bounds each http request.
	Timeout time.Duration
	// Journal is the journal handler, which the state store provides because it writes in the
	// store's own transaction (the postgres store's TxStore.Journal). Required by "journal".
	Journal sequencer.Handler
}

// factory builds a handler from Options.
type factory func(opts Options) (sequencer.Handler, error)

// DefaultName is the handler the worker uses when none is configured.
const DefaultName = "log"

var registry = map[string]factory{
	"log": func(o Options) (sequencer.Handler, error) {
		out := o.Out
		if out == nil {
			out = os.Stdout
		}
		return NewLog(out), nil
	},
	"noop": func(Options) (sequencer.Handler, error) {
		return sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil }), nil
	},
	"http": func(o Options) (sequencer.Handler, error) {
		return NewHTTP(HTTPConfig{URL: o.URL, Timeout: o.Timeout})
	},
	"journal": func(o Options) (sequencer.Handler, error) {
		if o.Journal == nil {
			return nil, ErrNoJournal
		}
		return o.Journal, nil
	},
}

// ErrNoJournal is returned by New("journal") when Options.Journal is not set: the journal handler
// writes through the state store's transaction, so only a transactional store can provide it.
var ErrNoJournal = errors.New("the journal handler needs a transactional state store (postgres)")

// Names returns the registered handler names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Known reports whether name is a registered handler.
func Known(name string) bool {
	_, ok := registry[name]
	return ok
}

// New builds the handler called name ("" means DefaultName).
func New(name string, opts Options) (sequencer.Handler, error) {
	if name == "" {
		name = DefaultName
	}
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("handler: unknown handler %q (known: %v)", name, Names())
	}
	h, err := f(opts)
	if err != nil {
		return nil, fmt.Errorf("handler %q: %w", name, err)
	}
	return h, nil
}
