package modelsrc

import (
	"path/filepath"

	"github.com/tq-project/tq/gguf"
)

// hfMetadata builds the GGUF metadata of a converted model in the converter's order:
// general.architecture, general.type, general.name (the model folder's name), the
// architecture's hyper-parameters, then the tokenizer keys. general.file_type and
// general.quantization_version are added by OpenHF; a converter replaces them, and
// general.name, once the types are known.
func hfMetadata(m *hfModel) (gguf.Metadata, error) {
	var md gguf.Metadata
	a := m.ctx.arch
	md.Set("general.architecture", gguf.String(a.name))
	md.Set("general.type", gguf.String("model"))
	abs, err := filepath.Abs(m.dir)
	if err != nil {
		abs = m.dir
	}
	md.Set("general.name", gguf.String(filepath.Base(abs)))
	if err := commonHParams(m.ctx, &md); err != nil {
		return nil, err
	}
	if a.metadata != nil {
		if err := a.metadata(m.ctx, &md); err != nil {
			return nil, err
		}
	}
	tok, err := tokenizerMetadata(m.dir, a.name)
	if err != nil {
		return nil, err
	}
	for _, kv := range tok {
		md.Set(kv.Key, kv.Value)
	}
	return md, nil
}
