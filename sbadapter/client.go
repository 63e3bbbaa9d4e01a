package sbadapter

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// ClientOptions returns a copy of opts (nil: the SDK's defaults) with the SDK's own retries
// turned off, as the sessions of a [Source] need: see "Lock tenure" in the package
// documentation. The adapter retries what is safe to retry itself (Config.BusyRetry).
func ClientOptions(opts *azservicebus.ClientOptions) *azservicebus.ClientOptions {
	var o azservicebus.ClientOptions
	if opts != nil {
		o = *opts
	}
	o.RetryOptions.MaxRetries = -1 // one try: the SDK never re-locks a session behind our back
	return &o
}

// NewClientFromConnectionString returns a client for a [Source] from a connection string, with
// [ClientOptions] applied to opts.
func NewClientFromConnectionString(connectionString string, opts *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	c, err := azservicebus.NewClientFromConnectionString(connectionString, ClientOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("sbadapter: client from connection string: %w", err)
	}
	return c, nil
}

// NewClient returns a client for a [Source] on a fully qualified namespace with a token
// credential (Entra ID), with [ClientOptions] applied to opts.
func NewClient(namespace string, cred azcore.TokenCredential, opts *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	c, err := azservicebus.NewClient(namespace, cred, ClientOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("sbadapter: client for %s: %w", namespace, err)
	}
	return c, nil
}
