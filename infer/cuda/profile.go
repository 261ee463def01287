package cuda

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// KernelTime is what the launch profiler (Device.SetProfile) measured for one kernel at one
// launch shape: how many launches, and the host wall time from each launch call to the end of
// the synchronisation that follows it (the kernel's device time plus one launch and one
// synchronisation; Profile's Overhead estimates that share).
type KernelTime struct {
	Name  string
	Grid  [3]uint32
	Block [3]uint32
	Calls int
	Total time.Duration
}

// Mean is the time of one launch.
func (k KernelTime) Mean() time.Duration {
	if k.Calls == 0 {
		return 0
	}
	return k.Total / time.Duration(k.Calls)
}

type profKey struct {
	id          kernelID
	grid, block dim3
}

// profiler accumulates KernelTime per kernel and shape; nil when profiling is off.
type profiler struct {
	stats map[profKey]*KernelTime
}

// SetProfile turns the launch profiler on (clearing what it measured) or off. While it is on,
// every kernel launched outside a graph recording is followed by a synchronisation of the
// stream and its wall time is added to Profile's table: kernels run one at a time, so the
// figures show where a step's time goes, not how fast it runs unprofiled.
func (d *Device) SetProfile(on bool) error {
	return d.do(func() error {
		if on {
			d.prof = &profiler{stats: map[profKey]*KernelTime{}}
		} else {
			d.prof = nil
		}
		return nil
	})
}

// Profile returns the launch profiler's table, the kernel shapes with the most total time
// first, and the mean wall time of a synchronisation with nothing queued (the floor under every
// entry's Mean besides the launch itself).
func (d *Device) Profile() (table []KernelTime, syncFloor time.Duration, err error) {
	err = d.do(func() error {
		if d.prof == nil {
			return fmt.Errorf("cuda: the launch profiler is off")
		}
		for _, k := range d.prof.stats {
			table = append(table, *k)
		}
		const n = 32
		start := time.Now()
		for range n {
			if err := d.drv.call(fnStreamSynchronize, 0); err != nil {
				return err
			}
		}
		syncFloor = time.Since(start) / n
		return nil
	})
	slices.SortFunc(table, func(a, b KernelTime) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Name, b.Name))
	})
	return table, syncFloor, err
}

// FormatProfile writes a profile table as text, one kernel shape per line, with its share of
// the total.
func FormatProfile(table []KernelTime) string {
	var total time.Duration
	for _, k := range table {
		total += k.Total
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-22s %-18s %7s %10s %9s %6s\n", "kernel", "grid", "calls", "total", "mean", "share")
	for _, k := range table {
		share := 0.0
		if total > 0 {
			share = 100 * float64(k.Total) / float64(total)
		}
		fmt.Fprintf(&sb, "%-22s %-18s %7d %10s %9s %5.1f%%\n", k.Name,
			fmt.Sprintf("%dx%dx%d/%d", k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0]*k.Block[1]*k.Block[2]),
			k.Calls, k.Total.Round(time.Microsecond), k.Mean().Round(100*time.Nanosecond), share)
	}
	return sb.String()
}

// record adds one timed launch; the lock is held.
func (p *profiler) record(id kernelID, grid, block dim3, dt time.Duration) {
	key := profKey{id, grid, block}
	k := p.stats[key]
	if k == nil {
		k = &KernelTime{Name: kernelTable[id].name, Grid: [3]uint32{grid.x, grid.y, grid.z},
			Block: [3]uint32{block.x, block.y, block.z}}
		p.stats[key] = k
	}
	k.Calls++
	k.Total += dt
}
