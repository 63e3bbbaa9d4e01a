package sbadapter

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

func BenchmarkMapError(b *testing.B) {
	errs := []error{
		&azservicebus.Error{Code: azservicebus.CodeLockLost},
		&amqp.Error{Condition: condSessionCannotBeLocked},
		&azservicebus.Error{Code: azservicebus.CodeConnectionLost},
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = mapError(opSession, "complete", errs[i%len(errs)])
	}
}

func BenchmarkToMessage(b *testing.B) {
	rm := sbMsg("s1", 42, `{"order":"order-001","step":17}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = ToMessage(rm)
	}
}
