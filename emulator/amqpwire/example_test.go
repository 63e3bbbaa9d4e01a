package amqpwire_test

import (
	"bytes"
	"fmt"

	"github.com/seqbus/seqbus/emulator/amqpwire"
)

// A broker answers a client's attach and reads the frame back, as the peer
// would.
func ExampleAppendFrame() {
	credit := uint32(100)
	zero := uint32(0)
	wire, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Channel: 1, Body: &amqpwire.Flow{
		NextIncomingID: &zero, IncomingWindow: 5000, OutgoingWindow: 5000,
		Handle: &zero, DeliveryCount: &zero, LinkCredit: &credit,
	}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", wire[:8])

	f, err := amqpwire.ReadFrame(bytes.NewReader(wire), 65536)
	if err != nil {
		panic(err)
	}
	flow := f.Body.(*amqpwire.Flow)
	fmt.Println(f.Channel, *flow.Handle, *flow.LinkCredit)
	// Output:
	// 00 00 00 1e 02 00 00 01
	// 1 0 100
}

func ExampleDecodeValue() {
	v, n, err := amqpwire.DecodeValue([]byte{0xc1, 0x06, 0x02, 0xa3, 0x01, 'k', 0x55, 0x07})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%#v (%d bytes)\n", v, n)
	// Output:
	// map[interface {}]interface {}{"k":7} (8 bytes)
}
