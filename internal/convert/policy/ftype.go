// Package policy decides the ggml type of every tensor of a GGUF file being written: the
// llama.cpp presets (llama-quantize's mixture rules, block-size fallbacks and the tensors that are
// never quantized), the turboquant policy driven by quantize_config.json, and a size budget
// (--target-bpw / --max-size) solved from per-tensor sensitivity.
//
// The package is pure: it sees tensor names, shapes and a few model hyper-parameters, never data.
package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// FileType is llama.cpp's llama_ftype (include/llama.h), written as general.file_type.
type FileType uint32

// The llama_ftype values tq can produce.
const (
	FileTypeAllF32 FileType = 0
	FileTypeF16    FileType = 1
	FileTypeQ4_0   FileType = 2
	FileTypeQ4_1   FileType = 3
	FileTypeQ8_0   FileType = 7
	FileTypeQ5_0   FileType = 8
	FileTypeQ5_1   FileType = 9
	FileTypeQ2_K   FileType = 10
	FileTypeQ3_K_S FileType = 11
	FileTypeQ3_K_M FileType = 12
	FileTypeQ3_K_L FileType = 13
	FileTypeQ4_K_S FileType = 14
	FileTypeQ4_K_M FileType = 15
	FileTypeQ5_K_S FileType = 16
	FileTypeQ5_K_M FileType = 17
	FileTypeQ6_K   FileType = 18
	FileTypeIQ4_NL FileType = 25
	FileTypeIQ4_XS FileType = 30
	FileTypeBF16   FileType = 32
)

type ftypeInfo struct {
	name string
	def  gguf.GGMLType
}

var ftypes = map[FileType]ftypeInfo{
	FileTypeAllF32: {"F32", gguf.TypeF32},
	FileTypeF16:    {"F16", gguf.TypeF16},
	FileTypeBF16:   {"BF16", gguf.TypeBF16},
	FileTypeQ4_0:   {"Q4_0", gguf.TypeQ4_0},
	FileTypeQ4_1:   {"Q4_1", gguf.TypeQ4_1},
	FileTypeQ5_0:   {"Q5_0", gguf.TypeQ5_0},
	FileTypeQ5_1:   {"Q5_1", gguf.TypeQ5_1},
	FileTypeQ8_0:   {"Q8_0", gguf.TypeQ8_0},
	FileTypeQ2_K:   {"Q2_K", gguf.TypeQ2_K},
	FileTypeQ3_K_S: {"Q3_K_S", gguf.TypeQ3_K},
	FileTypeQ3_K_M: {"Q3_K_M", gguf.TypeQ3_K},
	FileTypeQ3_K_L: {"Q3_K_L", gguf.TypeQ3_K},
	FileTypeQ4_K_S: {"Q4_K_S", gguf.TypeQ4_K},
	FileTypeQ4_K_M: {"Q4_K_M", gguf.TypeQ4_K},
	FileTypeQ5_K_S: {"Q5_K_S", gguf.TypeQ5_K},
	FileTypeQ5_K_M: {"Q5_K_M", gguf.TypeQ5_K},
	FileTypeQ6_K:   {"Q6_K", gguf.TypeQ6_K},
	FileTypeIQ4_NL: {"IQ4_NL", gguf.TypeIQ4_NL},
	FileTypeIQ4_XS: {"IQ4_XS", gguf.TypeIQ4_XS},
}

// aliases accepted by ParseFileType in addition to the canonical names (llama-quantize's).
var ftypeAliases = map[string]FileType{
	"F32": FileTypeAllF32, "FP32": FileTypeAllF32, "FP16": FileTypeF16,
	"Q3_K": FileTypeQ3_K_M, "Q4_K": FileTypeQ4_K_M, "Q5_K": FileTypeQ5_K_M,
}

// ParseFileType parses a preset name as llama-quantize and --outtype accept it
// (case-insensitive: "q4_k_m", "Q8_0", "f16", "bf16"; aliases Q3_K, Q4_K, Q5_K mean the _M
// mixtures) or a numeric llama_ftype.
func ParseFileType(s string) (FileType, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if ft, ok := ftypeAliases[u]; ok {
		return ft, nil
	}
	for ft, info := range ftypes {
		if info.name == u {
			return ft, nil
		}
	}
	if n, err := strconv.ParseUint(u, 10, 32); err == nil {
		if _, ok := ftypes[FileType(n)]; ok {
			return FileType(n), nil
		}
	}
	return 0, fmt.Errorf("unknown output type %q (supported: %s)", s, strings.Join(FileTypeNames(), ", "))
}

// FileTypeNames lists the supported preset names in lower case, in llama_ftype order.
func FileTypeNames() []string {
	ids := make([]int, 0, len(ftypes))
	for ft := range ftypes {
		ids = append(ids, int(ft))
	}
	sort.Ints(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.ToLower(ftypes[FileType(id)].name)
	}
	return out
}

// String returns the llama-quantize name of the preset, e.g. "Q4_K_M".
func (f FileType) String() string {
	if info, ok := ftypes[f]; ok {
		return info.name
	}
	return fmt.Sprintf("ftype(%d)", uint32(f))
}

// DefaultType is llama_ftype_get_default_type: the ggml type most tensors get.
func (f FileType) DefaultType() gguf.GGMLType {
	if info, ok := ftypes[f]; ok {
		return info.def
	}
	return gguf.TypeCount
}

// IsFloat reports whether the preset stores weights unquantized (F32, F16, BF16).
func (f FileType) IsFloat() bool {
	return f == FileTypeAllF32 || f == FileTypeF16 || f == FileTypeBF16
}

// FileTypeFor returns the llama_ftype that best describes a file whose bulk weights are of
// type t (used for general.file_type of custom mixtures such as turboquant).
func FileTypeFor(t gguf.GGMLType) FileType {
	switch t {
	case gguf.TypeF32:
		return FileTypeAllF32
	case gguf.TypeF16:
		return FileTypeF16
	case gguf.TypeBF16:
		return FileTypeBF16
	case gguf.TypeQ4_0:
		return FileTypeQ4_0
	case gguf.TypeQ4_1:
		return FileTypeQ4_1
	case gguf.TypeQ5_0:
		return FileTypeQ5_0
	case gguf.TypeQ5_1:
		return FileTypeQ5_1
	case gguf.TypeQ8_0:
		return FileTypeQ8_0
	case gguf.TypeQ2_K:
		return FileTypeQ2_K
	case gguf.TypeQ3_K:
		return FileTypeQ3_K_M
	case gguf.TypeQ4_K:
		return FileTypeQ4_K_M
	case gguf.TypeQ5_K:
		return FileTypeQ5_K_M
	case gguf.TypeQ6_K:
		return FileTypeQ6_K
	case gguf.TypeIQ4_NL:
		return FileTypeIQ4_NL
	case gguf.TypeIQ4_XS:
		return FileTypeIQ4_XS
	}
	return FileTypeF16
}
