package calib

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/internal/convert/policy"
)

// TestSearchProbe checks the container search's probe: with it, the chosen container and
// every recorded figure of the choice are those of measuring both containers on every
// sampled row; a loser is measured on all rows unless its probe error is more than
// probeMargin above the winner's. Gaussian, heavy-tailed (Student-t, 3 degrees of freedom)
// and outlier-column weights, with importance weights spanning three decades.
func TestSearchProbe(t *testing.T) {
	const cols = 512
	gens := map[string]func(r *rand.Rand, c int) float64{
		"gauss": func(r *rand.Rand, c int) float64 { return r.NormFloat64() },
		"student-t3": func(r *rand.Rand, c int) float64 {
			z := r.NormFloat64()
			var v float64
			for range 3 {
				g := r.NormFloat64()
				v += g * g
			}
			return z / math.Sqrt(v/3)
		},
		"outlier-columns": func(r *rand.Rand, c int) float64 {
			if c%61 == 0 {
				return 20 * r.NormFloat64()
			}
			return r.NormFloat64()
		},
	}
	skipped := 0
	for name, gen := range gens {
		// a matrix below the probe's minimum, one above it, and stacked experts (32 rows each)
		// whose total is above it
		for _, sh := range [][2]int{{40, 1}, {300, 1}, {32, 4}} {
			rows, nmat := sh[0], sh[1]
			r := rand.New(rand.NewPCG(uint64(rows), 7))
			w := make([]float32, nmat*rows*cols)
			for i := range w {
				w[i] = float32(0.02 * gen(r, i%cols))
			}
			imp := make([]float32, cols)
			for c := range imp {
				imp[c] = float32(math.Pow(10, 3*r.Float64()))
			}
			readRows := 0
			read := func(e, r0, n int, dst []float32) error {
				readRows += n
				copy(dst, w[(e*rows+r0)*cols:(e*rows+r0+n)*cols])
				return nil
			}
			shape := []int64{cols, int64(rows), int64(nmat)}
			o := &SearchOptions{Config: policy.DefaultTurboConfig(), Threads: 2, NoBaseline: true, NoSensitivity: true, SampleRows: 256}
			impf := func(int) []float32 { return imp }
			share := func(int) float64 { return 1 }
			got, err := SearchTensor(name, shape, read, impf, share, o)
			if err != nil {
				t.Fatal(err)
			}
			probed := readRows
			// a margin no candidate exceeds: every candidate is measured on every row
			o.probeMargin = 1e9
			readRows = 0
			wide, err := SearchTensor(name, shape, read, impf, share, o)
			if err != nil {
				t.Fatal(err)
			}
			wideRows := readRows
			o.probeMargin = 0
			o.noProbe = true
			readRows = 0
			want, err := SearchTensor(name, shape, read, impf, share, o)
			if err != nil {
				t.Fatal(err)
			}
			all := readRows
			if len(want.ContainerWeightedRMSE) != 2 {
				t.Fatalf("%s: %d candidates measured, want 2 (Q4_K and IQ4_NL)", name, len(want.ContainerWeightedRMSE))
			}
			if got.Type != want.Type {
				t.Fatalf("%s, %d rows: probe chose %s, every row gives %s (%v)", name, rows, got.Type, want.Type, want.ContainerWeightedRMSE)
			}
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }
			// subset is the sampled rows k with k%stride == 0 of each matrix, as a tensor
			// searched with every row (the figures the search reports for those rows)
			per := min(rows, (256+nmat-1)/nmat)
			subset := func(stride int) *TensorChoice {
				var sub []float32
				for e := 0; e < nmat; e++ {
					for k := 0; k < per; k++ {
						if k%stride == 0 {
							r0 := e*rows + k*rows/per
							sub = append(sub, w[r0*cols:(r0+1)*cols]...)
						}
					}
				}
				subRows := len(sub) / cols / nmat
				readSub := func(e, r0, n int, dst []float32) error {
					copy(dst, sub[(e*subRows+r0)*cols:(e*subRows+r0+n)*cols])
					return nil
				}
				so := &SearchOptions{Config: o.Config, Threads: 2, SampleRows: -1, noProbe: true,
					NoBaseline: o.NoBaseline, NoSensitivity: o.NoSensitivity}
				ref, err := SearchTensor(name, []int64{cols, int64(subRows), int64(nmat)}, readSub, impf, share, so)
				if err != nil {
					t.Fatal(err)
				}
				return ref
			}
			sameFigures := func(a, b *TensorChoice) bool {
				return near(a.RMSE, b.RMSE) && near(a.WeightedRMSE, b.WeightedRMSE) && near(a.OutputMSE, b.OutputMSE) &&
					near(a.SNRdB, b.SNRdB) && near(a.OutputNSR, b.OutputNSR)
			}
			best := want.ContainerWeightedRMSE[want.Type]
			decided := false // a clear loser: the choice is made on the probe's rows
			for ct, v := range want.ContainerWeightedRMSE {
				if g := got.ContainerWeightedRMSE[ct]; ct != want.Type && !near(g, v) {
					decided = true
					if g*g <= best*best*(1+defaultProbeMargin) {
						t.Fatalf("%s, %d rows: %s kept its probe figure %v (all rows %v, best %v)", name, rows, ct, g, v, best)
					}
				}
			}
			if decided {
				// everything recorded is the probe's rows' figures, and only they were read
				skipped++
				pr := subset(probeStride)
				if got.Type != pr.Type || !sameFigures(got, pr) {
					t.Fatalf("%s, %d rows: decided on the probe: %+v, the probe's rows alone give %+v", name, rows, got, pr)
				}
				for ct, v := range pr.ContainerWeightedRMSE {
					if !near(got.ContainerWeightedRMSE[ct], v) {
						t.Fatalf("%s, %d rows: %s %v, the probe's rows alone give %v", name, rows, ct, got.ContainerWeightedRMSE[ct], v)
					}
				}
				if n := (per + probeStride - 1) / probeStride; got.SampledRows != n || probed != 2*nmat*n {
					t.Fatalf("%s, %d rows: decided on the probe: %d sampled rows recorded, %d read; want %d and %d",
						name, rows, got.SampledRows, probed, n, 2*nmat*n)
				}
			} else if !sameFigures(got, want) {
				t.Fatalf("%s, %d rows: figures %+v, every row gives %+v", name, rows, got, want)
			}
			if wide.Type != want.Type || !sameFigures(wide, want) || wideRows != all {
				t.Fatalf("%s, %d rows: with every candidate within the margin: %+v (%d rows read), every row gives %+v (%d)",
					name, rows, wide, wideRows, want, all)
			}
			for ct, v := range want.ContainerWeightedRMSE {
				if !near(wide.ContainerWeightedRMSE[ct], v) {
					t.Fatalf("%s, %d rows: %s within the margin %v, every row gives %v", name, rows, ct, wide.ContainerWeightedRMSE[ct], v)
				}
			}
			// the unweighted baseline: it runs on the report rows (every reportStride-th
			// sampled row when there are enough of them, else the probe's rows, else all), and
			// the recorded gain is the ratio of the two searches on exactly those rows; the
			// other width (int8) too, its figure over the chosen container's that of those rows
			o.NoBaseline, o.noProbe, o.NoSensitivity = false, false, false
			gb, err := SearchTensor(name, shape, read, impf, share, o)
			if err != nil {
				t.Fatal(err)
			}
			// the report rows of each matrix
			usesProbe := per*nmat >= probeMinRows
			stride := 1
			switch {
			case nmat*((per+reportStride-1)/reportStride) >= reportMinRows:
				stride = reportStride
			case usesProbe:
				stride = probeStride
			}
			ref := subset(stride)
			subRows := ref.Shape[1]
			if gb.UnweightedWeightedRMSE <= 0 || ref.UnweightedWeightedRMSE <= 0 ||
				!near(gb.UnweightedWeightedRMSE/gb.WeightedRMSE, ref.UnweightedWeightedRMSE/ref.WeightedRMSE) {
				t.Fatalf("%s, %d rows: weighting gain %v (%v/%v), on the %d report rows alone %v", name, rows,
					gb.UnweightedWeightedRMSE/gb.WeightedRMSE, gb.UnweightedWeightedRMSE, gb.WeightedRMSE, subRows,
					ref.UnweightedWeightedRMSE/ref.WeightedRMSE)
			}
			if gb.AltOutputMSE <= 0 || ref.AltOutputMSE <= 0 || gb.AltType != "q8_0" ||
				!near(gb.AltOutputMSE/gb.OutputMSE, ref.AltOutputMSE/ref.OutputMSE) {
				t.Fatalf("%s, %d rows: other width %s %v over %v, on the %d report rows alone %v over %v", name, rows,
					gb.AltType, gb.AltOutputMSE, gb.OutputMSE, subRows, ref.AltOutputMSE, ref.OutputMSE)
			}
			o.NoBaseline, o.NoSensitivity = true, true
			if usesProbe && probed >= all {
				t.Fatalf("%s, %d×%d rows: the probe saved nothing (%d rows read, %d without it)", name, nmat, rows, probed, all)
			}
			if !usesProbe && probed != all {
				t.Fatalf("%s, %d rows: probe used below %d rows", name, rows, probeMinRows)
			}
		}
	}
	if skipped == 0 {
		t.Fatal("no case had a clear loser: the probe's saving is untested")
	}
}
