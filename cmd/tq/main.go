// Command tq turns a Hugging Face model folder into a calibrated, mixed-precision GGUF file
// that llama.cpp runs unchanged, verifies the result, and smoke-tests it.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tq:", err)
		var ec exitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(2)
	}
}

// exitCoder lets a subcommand choose the process exit status (verify: 1 = gate failed).
type exitCoder interface{ ExitCode() int }
