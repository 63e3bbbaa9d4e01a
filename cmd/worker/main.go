package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(newCLI(os.Stdout, os.Stderr).run(context.Background(), os.Args[1:]))
}
