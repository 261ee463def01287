package tokenizer

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// englishText returns ~300 KB of English prose: the Go specification and memory model from
// GOROOT/doc with the HTML markup removed (present wherever the go tool is).
func englishText(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	tag := regexp.MustCompile(`<[^>]*>`)
	for _, name := range []string{"go_spec.html", "go_mem.html"} {
		data, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "doc", name))
		if err != nil {
			b.Skipf("English sample not available: %v", err)
		}
		sb.WriteString(tag.ReplaceAllString(string(data), ""))
	}
	return sb.String()
}

func benchEncode(b *testing.B, tok *Tokenizer, text string, cold bool) {
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPUSeconds()
	n := 0
	for i := 0; i < b.N; i++ {
		if cold {
			b.StopTimer()
			tok.cache.mu.Lock()
			clear(tok.cache.m)
			tok.cache.mu.Unlock()
			b.StartTimer()
		}
		n = len(tok.Encode(text, EncodeOptions{ParseSpecial: true}))
	}
	reportCPU(b, cpu0, len(text))
	b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
}

// reportCPU adds "MB/cpu-s": bytes per CPU-second of the whole process (includes GC), which
// unlike MB/s does not depend on how busy the machine is.
func reportCPU(b *testing.B, cpu0 float64, bytes int) {
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/cpu/1e6, "MB/cpu-s")
	}
}

// BenchmarkEncodeEnglish measures single-goroutine throughput on English text (target: >= 5
// MB/s). "warm" reuses the word cache across iterations, "cold" clears it first.
func BenchmarkEncodeEnglish(b *testing.B) {
	text := englishText(b)
	for _, name := range []string{"qwen2", "llama-bpe"} {
		tok, _ := loadVocabGGUF(b, name)
		b.Run(name+"/warm", func(b *testing.B) { benchEncode(b, tok, text, false) })
		b.Run(name+"/cold", func(b *testing.B) { benchEncode(b, tok, text, true) })
	}
	b.Run("qwen3-hf/cold", func(b *testing.B) { benchEncode(b, loadQwen3(b), text, true) })
	spm, _ := loadVocabGGUF(b, "llama-spm")
	b.Run("llama-spm", func(b *testing.B) { benchEncode(b, spm, text, false) })
}

// BenchmarkBaselineRegexpSplit is the baseline for the numbers above: only the pre-tokenizer
// pass, done with Go's regexp on an approximation of the GPT-2 pattern (no look-ahead).
func BenchmarkBaselineRegexpSplit(b *testing.B) {
	text := englishText(b)
	re := regexp.MustCompile(`'s|'t|'re|'ve|'m|'ll|'d| ?\pL+| ?\pN+| ?[^\s\pL\pN]+|\s+`)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	cpu0 := processCPUSeconds()
	for i := 0; i < b.N; i++ {
		_ = re.FindAllStringIndex(text, -1)
	}
	reportCPU(b, cpu0, len(text))
}

// BenchmarkLoadHFQwen3 measures loading the 151k-token Qwen3 tokenizer.json.
func BenchmarkLoadHFQwen3(b *testing.B) {
	dir := llamacppPath(b, qwen3Dir)
	cpu0 := processCPUSeconds()
	for i := 0; i < b.N; i++ {
		if _, err := LoadHF(dir); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
	}
}
