package main

import (
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/calib"
	"github.com/tq-project/tq/calib/prompts"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/tokfile"
)

// calibTokenizeOptions are the flags of `tq tokenize --calibration-out`.
type calibTokenizeOptions struct {
	out       string
	datasets  []string
	maxLength int
	padTo     int
	json      bool
}

func addCalibTokenizeFlags(cmd *cobra.Command, o *calibTokenizeOptions) {
	f := cmd.Flags()
	f.StringVar(&o.out, "calibration-out", "", "write a calibration token file (docs/formats-tokfile.md) instead of printing ids")
	f.StringSliceVar(&o.datasets, "calibration-dataset", nil, "prompt files (.txt, .jsonl, .json) instead of the built-in 32-prompt set (@builtin names it, to combine it with files)")
	f.IntVar(&o.maxLength, "max-length", 4096, "truncate each calibration sequence to this many tokens")
	f.IntVar(&o.padTo, "pad-to-multiple-of", 64, "pad each calibration sequence with the pad token to a multiple of this")
}

// calibTokenizeSummary is the --json output of the calibration mode.
type calibTokenizeSummary struct {
	File        string `json:"file"`
	Sequences   int    `json:"sequences"`
	Tokens      int    `json:"tokens"`
	Padded      int    `json:"padded_tokens"`
	PadID       int32  `json:"pad_id"`
	PadMultiple int    `json:"pad_multiple"`
	MaxLength   int    `json:"max_length"`
	VocabHash   string `json:"vocab_hash"`
	Hash        string `json:"calibration_hash"`
}

func runCalibrationTokenize(cmd *cobra.Command, tok *tokenizer.Tokenizer, o *calibTokenizeOptions) error {
	if o.padTo < 1 || o.maxLength < 0 {
		return fmt.Errorf("--pad-to-multiple-of must be >= 1 and --max-length >= 0")
	}
	var set []prompts.Prompt
	var err error
	if len(o.datasets) > 0 {
		set, err = prompts.LoadFiles(o.datasets...)
	} else {
		set, err = prompts.Default()
	}
	if err != nil {
		return err
	}
	seqs, pad, err := calib.BuildSequences(tok, calib.FromPromptSet(set), calib.SequenceOptions{PadMultiple: o.padTo, MaxLen: o.maxLength})
	if err != nil {
		return err
	}
	var h tokfile.Header
	vh, err := hex.DecodeString(tok.Hash())
	if err != nil || len(vh) != len(h.VocabHash) {
		return fmt.Errorf("tokenizer hash %q is not a hex SHA-256", tok.Hash())
	}
	copy(h.VocabHash[:], vh)
	h.PadID = pad
	h.PadMultiple = uint32(o.padTo)
	h.MaxLen = uint32(o.maxLength)
	out := make([]tokfile.Sequence, len(seqs))
	sum := calibTokenizeSummary{File: o.out, Sequences: len(seqs), PadID: pad, PadMultiple: o.padTo, MaxLength: o.maxLength, VocabHash: tok.Hash()}
	for i, s := range seqs {
		out[i] = tokfile.Sequence{IDs: s.Tokens, AttnLen: s.Valid}
		sum.Tokens += s.Valid
		sum.Padded += len(s.Tokens)
	}
	if err := tokfile.WriteFile(o.out, h, out); err != nil {
		return err
	}
	if sum.Hash, err = calib.CalibrationHash(h, seqs); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		return writeJSON(w, sum)
	}
	_, err = fmt.Fprintf(w, "wrote %s: %d sequences, %d tokens (%d with padding to a multiple of %d, pad id %d)\n%s\n",
		sum.File, sum.Sequences, sum.Tokens, sum.Padded, sum.PadMultiple, sum.PadID, sum.Hash)
	return err
}
