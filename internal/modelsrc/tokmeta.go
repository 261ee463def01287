package modelsrc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/tokenizer"
)

// tokenizerMetadata returns the tokenizer.* keys llama.cpp's converter writes for the folder
// (through the tokenizer package), plus tokenizer.ggml.add_space_prefix for llama models
// whose tokenizer_config.json sets add_prefix_space (LlamaModel.set_vocab).
func tokenizerMetadata(dir string, arch string) (gguf.Metadata, error) {
	tok, err := tokenizer.LoadHF(dir)
	if err != nil {
		return nil, fmt.Errorf("tokenizer of %s: %w", dir, err)
	}
	kvs, err := tok.GGUFMetadata("")
	if err != nil {
		return nil, fmt.Errorf("tokenizer of %s: %w", dir, err)
	}
	md, err := tokenizer.KeyValuesToGGUF(kvs)
	if err != nil {
		return nil, fmt.Errorf("tokenizer of %s: %w", dir, err)
	}
	if arch == "llama" {
		b, err := boundedread.ReadFile(filepath.Join(dir, "tokenizer_config.json"), "tokenizer file", boundedread.MaxTokenizerFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer of %s: %w", dir, err)
		}
		if err == nil {
			var tc struct {
				AddPrefixSpace *bool `json:"add_prefix_space"`
			}
			if json.Unmarshal(b, &tc) == nil && tc.AddPrefixSpace != nil {
				md.Set("tokenizer.ggml.add_space_prefix", gguf.Bool(*tc.AddPrefixSpace))
			}
		}
	}
	return md, nil
}
