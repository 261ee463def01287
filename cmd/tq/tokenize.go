package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/tokenizer"
)

type tokenizeOptions struct {
	prompt       string
	file         string
	stdin        bool
	showPieces   bool
	json         bool
	parseSpecial bool // --parse-special: deprecated, parsing is the default
	noParse      bool // --no-parse-special
	noSpecial    bool
	count        bool
	calib        calibTokenizeOptions
}

func init() {
	o := &tokenizeOptions{}
	cmd := &cobra.Command{
		Use:   "tokenize MODEL_DIR|MODEL.gguf (--prompt TEXT | --file F | --stdin)",
		Short: "Tokenize text with a model's own tokenizer (like llama-tokenize)",
		Long: `tokenize prints the token ids of a text, using the tokenizer of a Hugging Face folder
(tokenizer.json, with transformers' rules) or of a GGUF file (tokenizer.ggml.* metadata, with
llama.cpp's rules).

With --calibration-out FILE it builds a calibration token file instead: the prompts (the
built-in 32-prompt set — 12 tool-call, 10 long-document, 10 math — or --calibration-dataset
files) are rendered with the model's chat template, tokenized with special tokens parsed,
truncated to --max-length and padded to a multiple of --pad-to-multiple-of with the pad token
(docs/formats-tokfile.md). tq calibrate --calibration-dataset FILE reads it.

Special tokens, as in llama-tokenize and transformers: control tokens written in the text
(e.g. "<|im_start|>") become their ids by default.
  --no-parse-special  tokenize control tokens as plain text instead (llama-tokenize's flag of
                      the same name). User-defined added tokens (e.g. "<think>") are always
                      recognised, as in llama.cpp and transformers.
  --no-special        do not add the BOS/EOS tokens the model asks for (add_bos/add_eos),
                      like llama-tokenize --no-bos.
  --parse-special     accepted for old scripts; parsing is the default.`,
		Example: `  tq tokenize ./Qwen3-0.6B --prompt "Hello world" --show-pieces
  tq tokenize model.gguf --file prompt.txt --json
  tq tokenize ./Qwen3-0.6B --calibration-out calib.tok
  echo "<|im_start|>user" | tq tokenize model.gguf --stdin --no-parse-special`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := loadTokenizer(args[0])
			if err != nil {
				return err
			}
			if o.calib.out != "" {
				if err := checkOutputs(append(modelInputs(args[0]), o.calib.datasets...), o.calib.out); err != nil {
					return err
				}
				o.calib.json = o.json
				return runCalibrationTokenize(cmd, tok, &o.calib)
			}
			return runTokenize(cmd.OutOrStdout(), cmd.InOrStdin(), tok, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.prompt, "prompt", "p", "", "text to tokenize")
	f.StringVarP(&o.file, "file", "f", "", "read the text from a file")
	f.BoolVar(&o.stdin, "stdin", false, "read the text from standard input")
	f.BoolVar(&o.showPieces, "show-pieces", false, "print each token's piece next to its id")
	f.BoolVar(&o.json, "json", false, "print JSON: ids, pieces and count")
	f.BoolVar(&o.noParse, "no-parse-special", false, "tokenize control tokens written in the text (e.g. <|im_start|>) as plain text")
	f.BoolVar(&o.parseSpecial, "parse-special", false, "recognise control tokens written in the text (the default)")
	_ = f.MarkDeprecated("parse-special", "control tokens are parsed by default; --no-parse-special turns it off")
	f.BoolVar(&o.noSpecial, "no-special", false, "do not add the model's BOS/EOS tokens")
	f.BoolVar(&o.count, "show-count", false, "print only the number of tokens")
	addCalibTokenizeFlags(cmd, &o.calib)
	rootCmd.AddCommand(cmd)
}

// loadTokenizer opens the tokenizer of an HF folder or of a GGUF file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return tokenizer.LoadHF(path)
	}
	return tokenizer.LoadGGUF(path)
}

type tokenizeResult struct {
	IDs    []int32  `json:"ids"`
	Pieces []string `json:"pieces"`
	Count  int      `json:"count"`
}

func runTokenize(w io.Writer, stdin io.Reader, tok *tokenizer.Tokenizer, o *tokenizeOptions) error {
	sources := 0
	for _, b := range []bool{o.prompt != "", o.file != "", o.stdin} {
		if b {
			sources++
		}
	}
	if sources != 1 {
		return fmt.Errorf("give exactly one of --prompt, --file or --stdin")
	}
	text := o.prompt
	switch {
	case o.file != "":
		b, err := boundedread.ReadFile(o.file, "text file", boundedread.MaxTextFile)
		if err != nil {
			return err
		}
		text = string(b)
	case o.stdin:
		b, err := io.ReadAll(io.LimitReader(stdin, 1<<30))
		if err != nil {
			return err
		}
		text = string(b)
	}
	ids := tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: !o.noSpecial, ParseSpecial: !o.noParse})
	if o.count {
		_, err := fmt.Fprintln(w, len(ids))
		return err
	}
	if o.json {
		res := tokenizeResult{IDs: ids, Count: len(ids), Pieces: make([]string, len(ids))}
		for i, id := range ids {
			res.Pieces[i] = tok.TokenPiece(id)
		}
		return writeJSON(w, res)
	}
	if o.showPieces {
		for _, id := range ids {
			fmt.Fprintf(w, "%6d -> '%s'\n", id, tok.TokenPiece(id))
		}
		return nil
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	_, err := fmt.Fprintf(w, "[%s]\n", strings.Join(parts, ", "))
	return err
}
