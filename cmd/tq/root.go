package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/internal/safeout"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func tqVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "0.1.0-dev+" + rev
		}
	}
	return "0.1.0-dev"
}

var rootCmd = &cobra.Command{
	Use:   "tq",
	Short: "Hugging Face safetensors to calibrated, mixed-precision GGUF — and proof that it works",
	Long: `tq takes a Hugging Face model folder (config.json + safetensors + tokenizer) to a
calibrated, mixed-precision GGUF file that llama.cpp, ollama and LM Studio load unchanged,
proves the result is good, and smoke-tests it.

Pipeline:
  tq calibrate MODEL_DIR            activation statistics + quantize_config.json
  tq convert MODEL_DIR --use-turboquant -o model.gguf
  tq verify model.gguf --reference MODEL_DIR
  tq run model.gguf -p "Hello"

Run 'tq COMMAND --help' for the flags and examples of each command.`,
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       tqVersion(),
}

func init() {
	rootCmd.SetVersionTemplate("tq {{.Version}}\n")
	// What the output rules of internal/safeout did besides a plain write (a symbolic link
	// written through, a device streamed to, stale temporary files or superseded shards
	// removed) is reported on stderr.
	rootCmd.PersistentPreRun = func(cmd *cobra.Command, args []string) {
		w := cmd.ErrOrStderr()
		safeout.SetNotify(func(msg string) { fmt.Fprintln(w, "note:", msg) })
	}
}

// writeJSON prints v as indented JSON (the --json output of every command).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
