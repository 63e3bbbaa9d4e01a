package contract_test

import (
	"fmt"

	"github.com/seqbus/seqbus/contract"
)

func ExampleParseDuration() {
	for _, s := range []string{"PT30S", "P1DT12H", "P1M", "P10675199DT2H48M5.4775807S", "P2W"} {
		d, err := contract.ParseDuration(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s, "=", d, "→", contract.FormatDuration(d))
	}
	// Output:
	// PT30S = 30s → PT30S
	// P1DT12H = 36h0m0s → P1DT12H
	// P1M = 720h0m0s → P30D
	// P10675199DT2H48M5.4775807S = 2562047h47m16.854775807s → P10675199DT2H48M5.4775807S
	// invalid ISO 8601 duration "P2W": want P[nY][nM][nD][T[nH][nM][n[.f]S]], like PT30S, P14D or P1DT12H
}
