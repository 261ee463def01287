package hf

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/safetensors"
)

// Folder is an opened Hugging Face model folder. Paths of optional side files are "" when
// the file is absent.
type Folder struct {
	Dir              string
	Config           *Config
	Weights          *safetensors.Model
	TokenizerJSON    string // tokenizer.json
	TokenizerConfig  string // tokenizer_config.json
	SpecialTokensMap string // special_tokens_map.json
	GenerationConfig string // generation_config.json
	ChatTemplate     string // chat_template.jinja
}

// Open loads config.json (validated), opens the safetensors weights lazily and records
// which tokenizer and generation files exist. It does not check the weights against the
// configuration; call CheckWeights for that.
func Open(dir string) (*Folder, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("hf: %s is not a folder", dir)
	}
	cfg, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	w, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	f := &Folder{Dir: dir, Config: cfg, Weights: w}
	// A side file that exists but is not a regular file (a symlink to a device, a FIFO, a
	// folder) is an error, not an absent file: the tokenizer would otherwise be built without it.
	var sideErr error
	side := func(name string) string {
		p := filepath.Join(dir, name)
		if err := boundedread.CheckRegular(p, "model file"); err != nil {
			sideErr = cmp.Or(sideErr, err)
			return ""
		}
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	f.TokenizerJSON = side("tokenizer.json")
	f.TokenizerConfig = side("tokenizer_config.json")
	f.SpecialTokensMap = side("special_tokens_map.json")
	f.GenerationConfig = side("generation_config.json")
	f.ChatTemplate = side("chat_template.jinja")
	if sideErr != nil {
		w.Close()
		return nil, fmt.Errorf("hf: %w", sideErr)
	}
	return f, nil
}

// CheckWeights verifies the weights against the configuration (see Config.CheckWeights).
func (f *Folder) CheckWeights() error { return f.Config.CheckWeights(f.Weights) }

// ParamCount returns the total and per-token active parameter counts from the config.
func (f *Folder) ParamCount() (total, active int64, err error) { return f.Config.ParamCount() }

// Close releases the weights.
func (f *Folder) Close() error {
	if f.Weights == nil {
		return nil
	}
	return f.Weights.Close()
}
