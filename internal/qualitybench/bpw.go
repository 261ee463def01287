package main

import (
	"fmt"

	"github.com/tq-project/tq/gguf"
)

// fileInfo is what the harness reads from a GGUF header: its size in bits per weight
// (all tensor data bits over all tensor elements) and its vocabulary.
type fileInfo struct {
	Params    uint64  `json:"params"`
	DataBytes uint64  `json:"tensor_bytes"`
	BPW       float64 `json:"bpw"`
	Vocab     int     `json:"vocab"`
	FileType  string  `json:"file_type,omitempty"`
}

func readInfo(path string) (*fileInfo, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var fi fileInfo
	for _, t := range m.Tensors() {
		fi.Params += t.NumElements()
		fi.DataBytes += t.Bytes
	}
	if fi.Params == 0 {
		return nil, fmt.Errorf("%s: no tensors", path)
	}
	fi.BPW = float64(fi.DataBytes) * 8 / float64(fi.Params)
	emb, ok := m.Tensor("token_embd.weight")
	if !ok || len(emb.Dims) != 2 || emb.Dims[1] == 0 || emb.Dims[1] > 1<<24 {
		return nil, fmt.Errorf("%s: token_embd.weight missing or not a [n_embd, n_vocab] matrix", path)
	}
	fi.Vocab = int(emb.Dims[1])
	if v, err := m.Metadata().GetUint("general.file_type"); err == nil {
		fi.FileType = fileTypeName(v)
	}
	return &fi, nil
}

// fileTypeName names llama.cpp's llama_ftype values that tq writes.
func fileTypeName(v uint64) string {
	names := map[uint64]string{0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
		10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
		17: "Q5_K_M", 18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16"}
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("ftype %d", v)
}
