package tokenizer

import "github.com/tq-project/tq/gguf"

// testGGUF is a GGUF file's metadata as the Go values GGUFMetadataSource hands out.
type testGGUF map[string]any

func (g testGGUF) Lookup(key string) (any, bool) { v, ok := g[key]; return v, ok }

// readTestGGUF reads a GGUF file's metadata through the real gguf reader.
func readTestGGUF(path string) (testGGUF, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	md := m.Metadata()
	src := GGUFMetadataSource(md)
	out := make(testGGUF, len(md))
	for _, kv := range md {
		out[kv.Key], _ = src.Lookup(kv.Key)
	}
	return out, nil
}
