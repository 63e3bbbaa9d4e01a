package atom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/emulator/atom"
	"github.com/seqbus/seqbus/emulator/broker"
)

// The admin client of the Azure SDK manages the emulator's broker through the handler;
// admintransport sends its https requests to the plain-HTTP server.
func Example() {
	b := broker.New(broker.Config{})
	defer b.Close()
	srv := httptest.NewServer(atom.NewHandler(b, atom.Config{})) // default key SAS_KEY_VALUE
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	connStr := "Endpoint=sb://" + srv.Listener.Addr().String() +
		";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
	client, err := admintransport.NewAdminClient(connStr, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	session := true
	if _, err := client.CreateQueue(ctx, "orders", &admin.CreateQueueOptions{
		Properties: &admin.QueueProperties{RequiresSession: &session},
	}); err != nil {
		panic(err)
	}
	q, err := b.Lookup("orders")
	if err != nil {
		panic(err)
	}
	fmt.Println("session queue:", q.RequiresSession())

	_, err = client.CreateQueue(ctx, "orders", nil)
	fmt.Println("again:", err.(*azcore.ResponseError).StatusCode)
	// Output:
	// session queue: true
	// again: 409
}
