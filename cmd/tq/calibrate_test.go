package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/calib"
	"github.com/tq-project/tq/internal/fixtures"
)

// TestCalibrateCommand runs `tq calibrate` on a generated model with the built-in prompts
// (truncated to keep it short) and checks the outputs and the JSON result.
func TestCalibrateCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := fixtures.Preset("qwen3")
	o.Layers = 1
	if err := fixtures.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	dat := filepath.Join(t.TempDir(), "im.dat")
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	rootCmd.SetErr(&stderr)
	rootCmd.SetArgs([]string{"calibrate", dir, "-o", out, "--max-length", "128", "--threads", "2", "--json",
		"--export-imatrix", dat, "--kv-cache-dtype", "fp16"})
	defer rootCmd.SetArgs(nil)
	if err := rootCmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res struct {
		ConfigPath string                `json:"config_path"`
		Config     *calib.QuantizeConfig `json:"config"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if res.Config == nil || res.Config.NumPrompts != 32 || res.Config.KVCacheDType != "f16" || len(res.Config.Tensors) == 0 {
		t.Fatalf("result %+v", res.Config)
	}
	for _, f := range []string{calib.ConfigFile, calib.IMatrixFile, calib.StatsFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := calib.LoadIMatrix(dat, nil); err != nil {
		t.Errorf("exported .dat: %v", err)
	}
	// the input Gram matrices are on by default and recorded
	hs, err := calib.OpenHessians(filepath.Join(out, calib.HessianDir))
	if err != nil {
		t.Fatal(err)
	}
	if h := res.Config.Calibration.Hessians; h == nil || h.Bytes != hs.Bytes || h.Files != 2 || h.Tokens != res.Config.Calibration.Tokens {
		t.Errorf("hessians record %+v (set: %d bytes)", h, hs.Bytes)
	}
	if _, ok, err := hs.For("blk.0.attn_q.weight", -1); !ok || err != nil {
		t.Errorf("H of blk.0.attn_q.weight: %v %v", ok, err)
	}
	rootCmd.SetArgs([]string{"calibrate", dir, "-o", out, "--hessians", "--no-hessians"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("--hessians --no-hessians: %v", err)
	}
	if c, _, err := rootCmd.Find([]string{"calibrate"}); err == nil {
		c.Flags().Set("no-hessians", "false")
	}
	rootCmd.SetArgs([]string{"calibrate", dir, "-o", out, "--calibration-method", "kl"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "weighted MSE") {
		t.Errorf("--calibration-method kl: %v", err)
	}
	if c, _, err := rootCmd.Find([]string{"calibrate"}); err == nil {
		c.Flags().Set("calibration-method", calib.MethodMSE)
	}
	rootCmd.SetArgs([]string{"calibrate", dir, "-o", out, "--expert-hessian-limit", "-3G"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--expert-hessian-limit") {
		t.Errorf("--expert-hessian-limit -3G: %v", err)
	}
	if c, _, err := rootCmd.Find([]string{"calibrate"}); err == nil {
		c.Flags().Set("expert-hessian-limit", "4GiB")
	}
}

// TestCalibrateContextLength: without --max-length, calibration sequences stop at the model's
// context length (the trained test model's is 256 tokens), and calibrate says so; with it,
// the given length wins. Run as a child process so that no flag state of other tests leaks in.
func TestCalibrateContextLength(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates a trained model")
	}
	dir := filepath.Join("..", "..", "testdata", "trained", "qwen3")
	run := func(args ...string) (calib.QuantizeConfig, string) {
		out := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(os.Args[0], append([]string{"calibrate", dir, "-o", out, "--threads", "2", "--no-hessians",
			"--no-baseline", "--sensitivity-tokens", "0", "--search-rows", "8"}, args...)...)
		cmd.Env = append(os.Environ(), "TQ_TEST_MAIN=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		cfg, err := calib.LoadConfig(filepath.Join(out, calib.ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		return *cfg, stderr.String()
	}
	cfg, msg := run()
	if !strings.Contains(msg, "context length, 256 tokens") {
		t.Errorf("no note about the context length:\n%s", msg)
	}
	if c := cfg.Calibration; c.PaddedTokens > int64(32*256) || c.Tokens < 32*200 {
		t.Errorf("%d tokens (%d padded) from 32 prompts at the 256-token context", c.Tokens, c.PaddedTokens)
	}
	cfg, msg = run("--max-length", "512")
	if strings.Contains(msg, "context length") || cfg.Calibration.PaddedTokens <= int64(32*256) {
		t.Errorf("--max-length 512: %d padded tokens\n%s", cfg.Calibration.PaddedTokens, msg)
	}
}
