package infer

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// hybridBenchShape is BenchmarkGPUDecodeHybrid's model: the Qwen3.6-35B-A3B block layout (n_embd
// 2048; Gated DeltaNet with 16 key and 32 value heads of 128, conv 4; gated attention of 16
// heads of 256 with 2 KV heads, 64 rotated dims; 256 experts of 512, 8 used, a shared expert of
// 512) at 4 blocks (3 DeltaNet, 1 attention) and a 32000-token vocabulary, in the turboquant
// file's types: ~2.4 GB. -test.short: the emulator's size.
type hybridBenchShape struct{ E, L, KH, VH, DS, H, HKV, HD, NRot, NE, NU, FE, FS, V int }

func hybridBenchShapeFor(short bool) hybridBenchShape {
	if short {
		return hybridBenchShape{256, 4, 2, 4, 64, 4, 2, 64, 16, 8, 2, 128, 128, 1024}
	}
	return hybridBenchShape{2048, 4, 16, 32, 128, 16, 2, 256, 64, 256, 8, 512, 512, 32000}
}

// randomHybridSource builds a qwen35moe source of shape sh with the turboquant policy's types
// (Q4_K for the q/k/v/gate/up roles, Q8_0 for the output projections and down projections, F16
// LM head and β/decay projections) and random weight bytes whose fp16 scales are small and
// finite. The recurrent parameters are set so that the state decays (ssm_a = −1, dt_bias 0):
// only speed is measured, but the router must see finite logits.
func randomHybridSource(sh hybridBenchShape) *MapSource {
	s := NewMapSource()
	a := "qwen35moe"
	for k, v := range map[string]int{"block_count": sh.L, "context_length": 4096, "embedding_length": sh.E,
		"attention.head_count": sh.H, "attention.head_count_kv": sh.HKV, "attention.key_length": sh.HD,
		"attention.value_length": sh.HD, "rope.dimension_count": sh.NRot, "expert_count": sh.NE,
		"expert_used_count": sh.NU, "expert_feed_forward_length": sh.FE, "expert_shared_feed_forward_length": sh.FS,
		"ssm.conv_kernel": 4, "ssm.state_size": sh.DS, "ssm.group_count": sh.KH, "ssm.time_step_rank": sh.VH,
		"ssm.inner_size": sh.VH * sh.DS, "full_attention_interval": 4} {
		s.Metadata[a+"."+k] = uint32(v)
	}
	s.Metadata["general.architecture"] = a
	s.Metadata[a+".attention.layer_norm_rms_epsilon"] = float32(1e-6)
	s.Metadata[a+".rope.freq_base"] = float32(1e7)
	s.Metadata[a+".rope.dimension_sections"] = []int32{11, 11, 10, 0}
	r := rand.New(rand.NewPCG(3, 4))
	add := func(name string, t gguf.GGMLType, dims ...int64) {
		s.Add(&Tensor{Name: name, Type: t, Dims: dims, Data: randomWeightBytes(r, t, dims)})
	}
	vec := func(name string, v float32, n int64, dims ...int64) {
		data := make([]byte, 4*n)
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		s.Add(&Tensor{Name: name, Type: gguf.TypeF32, Dims: dims, Data: data})
	}
	E := int64(sh.E)
	kd, vd := int64(sh.KH*sh.DS), int64(sh.VH*sh.DS)
	conv := 2*kd + vd
	qd, kvd := int64(sh.H*sh.HD), int64(sh.HKV*sh.HD)
	add("token_embd.weight", gguf.TypeQ8_0, E, int64(sh.V))
	vec("output_norm.weight", 1, E, E)
	add("output.weight", gguf.TypeF16, E, int64(sh.V))
	for il := range sh.L {
		n := func(x string) string { return blkName(il, x) }
		vec(n("attn_norm.weight"), 1, E, E)
		vec(n("post_attention_norm.weight"), 1, E, E)
		if (il+1)%4 != 0 {
			add(n("attn_qkv.weight"), gguf.TypeQ4_K, E, conv)
			add(n("attn_gate.weight"), gguf.TypeQ4_K, E, vd)
			add(n("ssm_beta.weight"), gguf.TypeF16, E, int64(sh.VH))
			add(n("ssm_alpha.weight"), gguf.TypeF16, E, int64(sh.VH))
			vec(n("ssm_conv1d.weight"), 0.25, 4*conv, 4, conv)
			vec(n("ssm_dt.bias"), 0, int64(sh.VH), int64(sh.VH))
			vec(n("ssm_a"), -1, int64(sh.VH), int64(sh.VH))
			vec(n("ssm_norm.weight"), 1, int64(sh.DS), int64(sh.DS))
			add(n("ssm_out.weight"), gguf.TypeQ8_0, vd, E)
		} else {
			add(n("attn_q.weight"), gguf.TypeQ4_K, E, 2*qd)
			add(n("attn_k.weight"), gguf.TypeQ4_K, E, kvd)
			add(n("attn_v.weight"), gguf.TypeQ4_K, E, kvd)
			add(n("attn_output.weight"), gguf.TypeQ8_0, qd, E)
			vec(n("attn_q_norm.weight"), 1, int64(sh.HD), int64(sh.HD))
			vec(n("attn_k_norm.weight"), 1, int64(sh.HD), int64(sh.HD))
		}
		vec(n("ffn_gate_inp.weight"), 0.01, E*int64(sh.NE), E, int64(sh.NE))
		add(n("ffn_gate_exps.weight"), gguf.TypeQ4_K, E, int64(sh.FE), int64(sh.NE))
		add(n("ffn_up_exps.weight"), gguf.TypeQ4_K, E, int64(sh.FE), int64(sh.NE))
		add(n("ffn_down_exps.weight"), gguf.TypeQ8_0, int64(sh.FE), E, int64(sh.NE))
		vec(n("ffn_gate_inp_shexp.weight"), 0.01, E, E)
		add(n("ffn_gate_shexp.weight"), gguf.TypeQ4_K, E, int64(sh.FS))
		add(n("ffn_up_shexp.weight"), gguf.TypeQ4_K, E, int64(sh.FS))
		add(n("ffn_down_shexp.weight"), gguf.TypeQ8_0, int64(sh.FS), E)
	}
	return s
}

// activeBytes is what one decode token reads of a source's device weights: every tensor, but of
// the routed experts only nUsed of nExpert (the embedding row is read on the host).
func activeBytes(s *MapSource, nUsed, nExpert int) int64 {
	var n float64
	for name, t := range s.Tensors {
		switch {
		case name == "token_embd.weight":
		case strings.Contains(name, "_exps."):
			n += float64(len(t.Data)) * float64(nUsed) / float64(nExpert)
		default:
			n += float64(len(t.Data))
		}
	}
	return int64(n)
}

var hybridDecodeBench decodeBenchState

// BenchmarkGPUDecodeHybrid is BenchmarkGPUDecode for the Qwen3.5/3.6 hybrid (qwen35moe, the
// turboquant file's types): single-token decode with every block and the LM head on the device;
// GB/s counts the weights one token reads (the routed experts' share nUsed/nExpert) against the
// device copy bandwidth measured in the same run; the CPU decodes the same model for x-cpu.
func BenchmarkGPUDecodeHybrid(b *testing.B) {
	if os.Getenv("TQ_GPU") != "1" {
		b.Skip("device benchmark: set TQ_GPU=1 to run it on a CUDA GPU")
	}
	hybridDecodeBench.setup(b, func() (Source, int, int, func(*Model) int64) {
		sh := hybridBenchShapeFor(testing.Short())
		src := randomHybridSource(sh)
		active := activeBytes(src, sh.NU, sh.NE)
		return src, sh.V, sh.L, func(*Model) int64 { return active }
	})
	hybridDecodeBench.run(b)
}
