package calib

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// studentT draws from a Student-t distribution with nu degrees of freedom (heavy tails).
func studentT(rng *rand.Rand, nu float64) float64 {
	z := rng.NormFloat64()
	var chi float64
	for i := 0; i < int(nu); i++ {
		g := rng.NormFloat64()
		chi += g * g
	}
	return z / math.Sqrt(chi/nu)
}

func randRows(rng *rand.Rand, n, cols int, heavy bool) []float32 {
	x := make([]float32, n*cols)
	for i := range x {
		if heavy {
			x[i] = float32(studentT(rng, 3))
		} else {
			x[i] = float32(rng.NormFloat64())
		}
	}
	// an outlier column, as in real activations
	for r := 0; r < n; r++ {
		x[r*cols+cols/3] *= 40
	}
	return x
}

// TestTensorStatsMatchesFloat64 compares the accumulation with an independent float64
// computation (column-major loop, Kahan-compensated) on normal and Student-t rows. Tolerance:
// relative 1e-12 (both sum float64 squares of the same float32 values, in different orders).
func TestTensorStatsMatchesFloat64(t *testing.T) {
	for _, heavy := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(5, 6))
		const cols, nmat = 96, 3
		ts := NewTensorStats("x", cols, nmat)
		var all [nmat][]float32
		for call := 0; call < 7; call++ {
			e := call % nmat
			n := 1 + rng.IntN(20)
			x := randRows(rng, n, cols, heavy)
			ts.Add(e, x, n)
			all[e] = append(all[e], x...)
		}
		for e := 0; e < nmat; e++ {
			n := len(all[e]) / cols
			if ts.Counts[e] != int64(n) {
				t.Fatalf("matrix %d: count %d, want %d", e, ts.Counts[e], n)
			}
			for c := 0; c < cols; c++ {
				var sum, comp, mx float64
				for r := 0; r < n; r++ {
					v := float64(all[e][r*cols+c])
					y := v*v - comp
					tt := sum + y
					comp = (tt - sum) - y
					sum = tt
					mx = math.Max(mx, math.Abs(v))
				}
				got := ts.SumSq[e*cols+c]
				if math.Abs(got-sum) > 1e-12*sum {
					t.Fatalf("heavy=%v matrix %d column %d: Σx² %v, reference %v", heavy, e, c, got, sum)
				}
				if float64(ts.MaxAbs[e*cols+c]) != mx {
					t.Fatalf("max |x| %v, reference %v", ts.MaxAbs[e*cols+c], mx)
				}
				imp, _ := ts.Importance(e)
				if d := math.Abs(float64(imp[c]) - sum/float64(n)); d > 1e-6*sum/float64(n) {
					t.Fatalf("importance %v, want %v", imp[c], sum/float64(n))
				}
			}
		}
	}
}

// TestCollectorPaddingAndBatches feeds a sequence in two batches with padding at the end,
// dense and routed rows, and checks that only the valid rows count.
func TestCollectorPaddingAndBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const cols, nexp, k = 8, 4, 2
	s := NewStats()
	c := NewCollector(s, nexp, k)
	var sampled int
	c.Sample = func(_ int, x []float32, n, _ int) { sampled += n }
	c.SetValid(7) // 10 tokens, 3 of padding, batches of 5
	ref := NewTensorStats("blk.0.attn_q.weight", cols, 1)
	refE := NewTensorStats("blk.0.ffn_up_exps.weight", cols, nexp)
	refR := NewLayerRouting(0, nexp, k)
	for b := 0; b < 2; b++ {
		x := randRows(rng, 5, cols, true)
		c.Linear("blk.0.attn_q.weight", -1, x, 5, cols)
		c.Linear("blk.0.ffn_gate_inp.weight", -1, x, 5, cols)
		sel := make([]int32, 5*k)
		wts := make([]float32, 5*k)
		for i := range sel {
			sel[i] = int32((i*3 + b) % nexp)
			wts[i] = 0.5
		}
		// make the two slots of a token distinct
		for tk := 0; tk < 5; tk++ {
			if sel[tk*k] == sel[tk*k+1] {
				sel[tk*k+1] = (sel[tk*k+1] + 1) % nexp
			}
		}
		c.Route(0, sel, wts, 5, k)
		for tk := 0; tk < 5; tk++ {
			if b*5+tk < 7 {
				ref.AddRow(0, x[tk*cols:(tk+1)*cols])
				refR.Add(sel[tk*k:(tk+1)*k], wts[tk*k:(tk+1)*k], 1, k)
			}
		}
		for e := 0; e < nexp; e++ {
			var rows []float32
			var n int
			for i, se := range sel {
				if int(se) == e {
					tk := i / k
					rows = append(rows, x[tk*cols:(tk+1)*cols]...)
					if b*5+tk < 7 {
						refE.AddRow(e, x[tk*cols:(tk+1)*cols])
					}
					n++
				}
			}
			if n > 0 {
				c.Linear("blk.0.ffn_up_exps.weight", e, rows, n, cols)
			}
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.Tensors["blk.0.attn_q.weight"]; !reflect.DeepEqual(got.SumSq, ref.SumSq) || got.Counts[0] != 7 {
		t.Fatalf("dense statistics wrong: count %d", got.Counts[0])
	}
	got := s.Tensors["blk.0.ffn_up_exps.weight"]
	if !reflect.DeepEqual(got.SumSq, refE.SumSq) || !reflect.DeepEqual(got.Counts, refE.Counts) {
		t.Fatalf("expert statistics wrong: counts %v, want %v", got.Counts, refE.Counts)
	}
	if !reflect.DeepEqual(s.Routing[0], refR) {
		t.Fatalf("routing %+v, want %+v", s.Routing[0], refR)
	}
	if sampled != 7 {
		t.Fatalf("sampled %d router rows, want 7", sampled)
	}
	// an expert call whose row count disagrees with the routing is reported
	c.SetValid(5)
	c.Route(0, []int32{0, 1}, []float32{.5, .5}, 1, 2)
	c.Linear("blk.0.ffn_up_exps.weight", 2, make([]float32, cols), 1, cols)
	if c.Err() == nil {
		t.Fatal("inconsistent expert call not reported")
	}
}

func randomStats(seed uint64) *Stats {
	rng := rand.New(rand.NewPCG(seed, 3))
	s := NewStats()
	s.Meta = Meta{Model: "m", Arch: "qwen3moe", NLayer: 2, Prompts: 3, Tokens: 100, TokenHash: "sha256:ab", Datasets: []string{"a", "b"}}
	for _, spec := range []struct {
		name       string
		cols, nmat int
	}{{"blk.0.attn_q.weight", 64, 1}, {"blk.0.ffn_up_exps.weight", 32, 4}, {"output.weight", 64, 1}} {
		ts := NewTensorStats(spec.name, spec.cols, spec.nmat)
		for e := 0; e < spec.nmat; e++ {
			if e == 2 {
				continue // an expert never routed
			}
			n := 1 + rng.IntN(9)
			ts.Add(e, randRows(rng, n, spec.cols, true), n)
		}
		if spec.nmat > 1 {
			ts.Synthetic[3] = true
		}
		s.Tensors[spec.name] = ts
	}
	s.Tensors["output.weight"].MaxAbs[5] = float32(math.NaN())
	r := NewLayerRouting(0, 4, 2)
	r.Add([]int32{0, 1, 3, 1, 0, 3}, []float32{.6, .4, .7, .3, .5, .5}, 3, 2)
	s.Routing = append(s.Routing, r)
	return s
}

func TestStatsFileRoundTrip(t *testing.T) {
	s := randomStats(1)
	// a matrix without rows gets uniform importance through the ImportanceSource interface,
	// as llama-quantize gives it
	if v, ok := s.Importance("blk.0.ffn_up_exps.weight", 2); !ok || len(v) != 32 || v[0] != 1 || v[31] != 1 {
		t.Fatalf("importance of an unrouted expert: %v %v", v, ok)
	}
	if _, ok := s.Importance("blk.0.ffn_up_exps.weight", 4); ok {
		t.Fatal("importance of a matrix out of range")
	}
	var buf bytes.Buffer
	if err := WriteStats(&buf, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStats(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Meta, s.Meta) {
		t.Fatalf("meta %+v, want %+v", got.Meta, s.Meta)
	}
	for _, n := range s.Names() {
		a, b := s.Tensors[n], got.Tensors[n]
		if !reflect.DeepEqual(a.SumSq, b.SumSq) || !reflect.DeepEqual(a.Counts, b.Counts) || !reflect.DeepEqual(a.Synthetic, b.Synthetic) {
			t.Fatalf("%s differs after round trip", n)
		}
		for i := range a.MaxAbs {
			if math.Float32bits(a.MaxAbs[i]) != math.Float32bits(b.MaxAbs[i]) {
				t.Fatalf("%s max|x|[%d] %v vs %v", n, i, a.MaxAbs[i], b.MaxAbs[i])
			}
		}
	}
	if !reflect.DeepEqual(got.Routing, s.Routing) {
		t.Fatal("routing differs after round trip")
	}
	// every truncation and several corruptions are clean errors
	raw := decompressForTest(t, buf.Bytes())
	for n := 0; n < len(raw); n += 1 + n/50 {
		if _, err := ReadStats(bytes.NewReader(recompressForTest(t, raw[:n]))); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
	bad := append([]byte(nil), raw...)
	copy(bad[len(bad)-8:], "XXXXXXXX")
	if _, err := ReadStats(bytes.NewReader(recompressForTest(t, bad))); err == nil {
		t.Fatal("bad end marker accepted")
	}
	if _, err := ReadStats(bytes.NewReader([]byte("not zstd at all"))); err == nil {
		t.Fatal("garbage accepted")
	}
}
