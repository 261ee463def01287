package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/safeout"
	"github.com/tq-project/tq/internal/safetensors"
)

// caughtSignal is the cancellation cause of a signalContext.
type caughtSignal struct{ sig os.Signal }

func (c *caughtSignal) Error() string { return "received " + signalName(c.sig) }

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// signalContext returns a context cancelled by the first SIGINT, SIGTERM or SIGHUP (a
// dropped SSH session), so that a long command stops and removes its temporary files. A
// second signal terminates at once. A signal the process was started with ignored (nohup,
// a background job) stays ignored. Every long command uses it; stop releases it.
func signalContext() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var sigs []os.Signal
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 { // Notify without signals would relay every signal
		return ctx, func() { cancel(nil) }
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch) // back to the default action: a second signal kills
			cancel(&caughtSignal{s})
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(nil)
		})
	}
}

// signalError is the error of a command stopped by a signal: tq exits with 128 + the
// signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as shells report a
// process killed by that signal.
type signalError struct {
	sig  os.Signal
	note string
	err  error
}

func (e *signalError) Error() string {
	return fmt.Sprintf("interrupted by %s; %s: %v", signalName(e.sig), e.note, e.err)
}
func (e *signalError) Unwrap() error { return e.err }
func (e *signalError) ExitCode() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

// interrupted returns err as a signalError when ctx (from signalContext) was cancelled by a
// signal, and nil otherwise. note says what became of the command's output.
func interrupted(ctx context.Context, err error, note string) error {
	var cs *caughtSignal
	if !errors.As(context.Cause(ctx), &cs) {
		return nil
	}
	return &signalError{sig: cs.sig, note: note, err: err}
}

// hfInputNames are the files of a Hugging Face model folder that tq reads besides the
// safetensors weights (internal/hf, tokenizer.LoadHF, internal/convert).
var hfInputNames = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "tokenizer.model", "added_tokens.json", "chat_template.jinja", "chat_template.json",
	safetensors.IndexFileName}

// hfInputs lists the files tq reads from a Hugging Face model folder: the names above,
// every *.safetensors file and additional_chat_templates/*.jinja.
func hfInputs(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); slices.Contains(hfInputNames, n) || strings.HasSuffix(n, ".safetensors") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	more, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	return append(out, more...)
}

// modelInputs lists the files read for a model argument: a Hugging Face folder's files, or
// a GGUF file with all the shards of its split.
func modelInputs(path string) []string {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return hfInputs(path)
	}
	out := []string{path}
	if prefix, _, count, ok := gguf.ParseSplitPath(path); ok {
		for i := range count {
			if p := gguf.SplitPath(prefix, i, count); p != path {
				out = append(out, p)
			}
		}
	}
	return out
}

// turboInputs lists the quantize_config.json convert --use-turboquant reads and the
// imatrix it names.
func turboInputs(dir, config string) []string {
	if config == "" {
		config = filepath.Join(dir, "quantize_config.json")
	}
	out := []string{config}
	if cfg, err := policy.LoadTurboConfig(config); err == nil && cfg.Imatrix != "" {
		im := cfg.Imatrix
		if !filepath.IsAbs(im) {
			im = filepath.Join(filepath.Dir(config), im)
		}
		out = append(out, im)
	}
	return out
}

// checkOutputs refuses outputs that are (the same path, a symbolic link to, or a hard link
// of) one of the inputs; empty names are skipped.
func checkOutputs(inputs []string, outputs ...string) error {
	inputs = slices.DeleteFunc(slices.Clone(inputs), func(s string) bool { return s == "" })
	for _, o := range outputs {
		if o == "" {
			continue
		}
		if err := safeout.CheckNotInput(o, inputs); err != nil {
			return err
		}
	}
	return nil
}

// checkGGUFOutput checks the files a GGUF write to out may create: out and its .sha256
// manifest; when the output may be split, also SHA256SUMS beside it, and no input may be
// a shard of the same name (the new shards would replace it or, with another count,
// remove it as superseded).
func checkGGUFOutput(inputs []string, out string, split, manifest bool) error {
	outs := []string{out}
	if manifest {
		outs = append(outs, out+gguf.ManifestSuffix)
		if split {
			outs = append(outs, filepath.Join(filepath.Dir(out), gguf.ManifestName))
		}
	}
	if err := checkOutputs(inputs, outs...); err != nil {
		return err
	}
	if !split {
		return nil
	}
	prefix := filepath.Base(strings.TrimSuffix(out, ".gguf"))
	odir, err := os.Stat(filepath.Dir(out))
	if err != nil {
		return nil
	}
	for _, in := range inputs {
		p, _, _, ok := gguf.ParseSplitPath(filepath.Base(in))
		if !ok || p != prefix {
			continue
		}
		if idir, err := os.Stat(filepath.Dir(in)); err == nil && os.SameFile(odir, idir) {
			return fmt.Errorf("refusing to write split output %s: its shards would replace the input file %s", out, in)
		}
	}
	return nil
}
