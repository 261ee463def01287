package verify

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
)

// CheckQuantizeConfig is the name of the check that a turboquant file is what its
// quantize_config.json describes (Options.QuantizeConfig).
const CheckQuantizeConfig = "quantize_config"

// checkQuantizeConfig compares the file with the quantize_config.json it was converted from:
// the config's SHA-256 must be the one the file records (turboquant.config_sha256), and every
// tensor the config lists must be in the file in the recorded container. A tensor in a larger
// type than recorded (a --target-bpw budget on top of the policy spends extra bits) is a
// warning; a smaller or missing one fails.
func checkQuantizeConfig(m *gguf.Model, path string) Check {
	c := Check{Name: CheckQuantizeConfig, Status: StatusPass}
	cfg, err := policy.LoadTurboConfig(path)
	if err != nil {
		c.fail("%v", err)
		return c
	}
	md := m.Metadata()
	if sum, err := md.GetString("turboquant.config_sha256"); err != nil {
		c.fail("the file records no turboquant.config_sha256 (not converted with --use-turboquant from a config)")
	} else if sum != cfg.FileSHA256 {
		c.fail("turboquant.config_sha256 %s is not the SHA-256 of %s (%s): converted from another config", short(sum), path, short(cfg.FileSHA256))
	}
	types := map[string]gguf.GGMLType{}
	cols := map[string]int64{}
	for _, t := range m.Tensors() {
		types[t.Name] = t.Type
		if len(t.Dims) > 0 {
			cols[t.Name] = int64(t.Dims[0])
		}
	}
	names := make([]string, 0, len(cfg.Tensors))
	for n := range cfg.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	var bad, raised []string
	for _, n := range names {
		rec := cfg.Tensors[n]
		want, err := gguf.ParseType(rec.Type)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: recorded type %q: %v", n, rec.Type, err))
			continue
		}
		got, ok := types[n]
		switch {
		case !ok:
			bad = append(bad, n+": not in the file")
		case got == want:
		default:
			gb, e1 := got.RowBytes(cols[n])
			wb, e2 := want.RowBytes(cols[n])
			if e1 == nil && e2 == nil && gb > wb {
				raised = append(raised, fmt.Sprintf("%s %s (recorded %s)", n, got, want))
			} else {
				bad = append(bad, fmt.Sprintf("%s is %s, recorded %s", n, got, want))
			}
		}
	}
	if len(bad) > 0 {
		c.fail("%d of %d recorded tensor(s) differ from the file: %s", len(bad), len(names), strings.Join(firstN(bad, 8), "; "))
	}
	if len(raised) > 0 {
		c.warn("%d tensor(s) are stored with more bits than recorded (a size budget on top of the policy?): %s",
			len(raised), strings.Join(firstN(raised, 8), "; "))
	}
	if c.Status == StatusPass {
		c.Detail = fmt.Sprintf("%d recorded tensors in their recorded containers; config SHA-256 matches", len(names))
	}
	return c
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
