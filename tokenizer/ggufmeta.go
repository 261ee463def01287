package tokenizer

import (
	"fmt"

	"github.com/tq-project/tq/gguf"
)

// GGUFMetadata adapts gguf.Metadata to MetadataSource with the Go types VocabFromMetadata
// expects. Values of other GGUF types are passed through as gguf.Value, which the vocabulary
// loader then reports as a type error (llama.cpp is type-strict).
type GGUFMetadataSource gguf.Metadata

// Lookup implements MetadataSource.
func (g GGUFMetadataSource) Lookup(key string) (any, bool) {
	v, ok := gguf.Metadata(g).Get(key)
	if !ok {
		return nil, false
	}
	switch v.Type() {
	case gguf.ValueString:
		s, _ := v.AsString()
		return s, true
	case gguf.ValueBool:
		b, _ := v.AsBool()
		return b, true
	case gguf.ValueUint32:
		u, _ := v.AsUint()
		return uint32(u), true
	case gguf.ValueArray:
		if a, ok := gguf.ArrayOf[string](v); ok {
			return a, true
		}
		if a, ok := gguf.ArrayOf[int32](v); ok {
			return a, true
		}
		if a, ok := gguf.ArrayOf[float32](v); ok {
			return a, true
		}
	}
	return v, true
}

// FromGGUFMetadata builds the tokenizer llama.cpp would build from a GGUF file's metadata.
func FromGGUFMetadata(md gguf.Metadata) (*Tokenizer, error) {
	v, err := VocabFromMetadata(GGUFMetadataSource(md))
	if err != nil {
		return nil, err
	}
	return FromGGUF(v)
}

// LoadGGUF reads the tokenizer of a GGUF model (any shard of a split model).
func LoadGGUF(path string) (*Tokenizer, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	t, err := FromGGUFMetadata(m.Metadata())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// KeyValuesToGGUF converts exported tokenizer keys (GGUFMetadata) to GGUF metadata values,
// in order.
func KeyValuesToGGUF(kvs []KeyValue) (gguf.Metadata, error) {
	var md gguf.Metadata
	for _, kv := range kvs {
		var v gguf.Value
		switch x := kv.Value.(type) {
		case string:
			v = gguf.String(x)
		case []string:
			v = gguf.Array(x)
		case []int32:
			v = gguf.Array(x)
		case []float32:
			v = gguf.Array(x)
		case uint32:
			v = gguf.Uint32(x)
		case int32:
			v = gguf.Int32(x)
		case float32:
			v = gguf.Float32(x)
		case bool:
			v = gguf.Bool(x)
		case gguf.Value:
			v = x
		default:
			return nil, fmt.Errorf("tokenizer key %s: unexpected value type %T", kv.Key, kv.Value)
		}
		md.Set(kv.Key, v)
	}
	return md, nil
}
